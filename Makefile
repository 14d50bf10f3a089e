# mailledger — `make demo` runs the whole job on bundled mail, `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STORE  ?= $(or $(MAILLEDGER_STORE),$(CURDIR)/demo-store)

.PHONY: venv demo test replay bench lint torture clean

$(BIN)/mailledger: pyproject.toml
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || { echo "python3 -m venv is missing: apt-get install -y python3-venv" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

venv: $(BIN)/mailledger

demo: venv
	MAILLEDGER_STORE=$(STORE) BIN=$(BIN) ./scripts/demo.sh

test: venv
	$(BIN)/ruff check .
	$(BIN)/pytest -q

replay: venv
	$(BIN)/mailledger --store $(STORE) replay

# Both benchmarks: import / replay / lookups (bench.run), then the IMAP sync against
# mbsync on a loopback Dovecot (bench.sync_bench; isync and dovecot from apt-get
# when run as root and missing). SYNC_BENCH_ARGS="--runs 1" for a quick one.
bench: venv
	$(BIN)/python -m bench.run $(BENCH_ARGS)
	@if ! command -v mbsync >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "bench: installing isync (mbsync) for the sync benchmark" >&2; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq isync dovecot-imapd) >/dev/null 2>&1 || true; \
	fi
	$(BIN)/python -m bench.sync_bench $(SYNC_BENCH_ARGS)

# The reliability campaigns (RELIABILITY.md): crash (>= 500 kill -9 trials), network faults,
# server anomalies, hostile mail, storage faults, erasure, secrets. Runs as root for the
# tmpfs full-disk case. TORTURE_ARGS="--quick" for the slice `make test` runs;
# TORTURE_ARGS="--only crash" for one campaign.
torture: venv
	$(BIN)/python -m torture $(TORTURE_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf demo-store demo-store-imap bench-data .pytest_cache .ruff_cache
