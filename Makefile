# mailledger — `make demo` runs the whole job on bundled mail, `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STORE  ?= $(or $(MAILLEDGER_STORE),$(CURDIR)/demo-store)

.PHONY: venv demo test fuzz replay bench bench-http bench-scale delta-spike delta-chaos delta-checks fencing-chaos scale-sim bench-cluster bench-cluster-reads lint torture interop man clean screenshots

# The editable install puts the source tree on sys.path with a plain .pth line
# (editable_mode=compat): setuptools' default, an import finder, costs every Python
# process 15-20 ms at start (pathlib, importlib.util, fnmatch, re), which a served
# command's whole wall (docs/serve.md, "Figures") and every bench figure would pay
# and an installed mailledger does not.
$(BIN)/mailledger: pyproject.toml
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || { echo "python3 -m venv is missing: apt-get install -y python3-venv" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' --config-settings editable_mode=compat
	@touch $@

venv: $(BIN)/mailledger

demo: venv
	MAILLEDGER_STORE=$(STORE) BIN=$(BIN) ./scripts/demo.sh

# The house rules first (make lint: ruff, the import contracts, mypy, vulture), then the suite.
test: lint
	$(BIN)/pytest -q

# The property tests (hypothesis, marked so by its plugin) randomized, run before a
# release: FUZZ_ROUNDS runs, each drawing new examples (a test's own max_examples each,
# 500 where it sets none). `make test` draws the same examples every run (the ci profile,
# tests/conftest.py). A failure is kept in .hypothesis/ and replayed first next time; it
# becomes an @example or a plain test. FUZZ_ARGS="tests/unit/test_search_language.py".
FUZZ_ROUNDS ?= 5
fuzz: venv
	@for i in $$(seq $(FUZZ_ROUNDS)); do \
	  echo "fuzz: round $$i of $(FUZZ_ROUNDS)"; \
	  HYPOTHESIS_PROFILE=release $(BIN)/pytest -q -m hypothesis $(FUZZ_ARGS) || exit 1; \
	done

# docs/web-search.png, web-thread.png, web-message.png: the web pages over a small store,
# shot by Playwright driving Debian's chromium (scripts/web_screenshots.py). Not in `make test`.
screenshots: venv
	$(BIN)/python scripts/web_screenshots.py

replay: venv
	$(BIN)/mailledger --store $(STORE) replay

# notmuch and mu, which bench.run and bench.scale index the corpus with beside mailledger
# (bench.peers): from apt-get when run as root and missing; without them, their columns
# are left out with a line saying so.
PEERS_INSTALL = if { ! command -v notmuch || ! command -v mu; } >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "$@: installing notmuch and maildir-utils (mu) to compare with" >&2; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq notmuch maildir-utils) >/dev/null 2>&1 || true; \
	fi

# Both benchmarks: import / replay / lookups, then notmuch new, mu index and mailledger
# import side by side with the search language's counts against notmuch's, then served
# `search --output count` beside `notmuch count` on the same mail (bench.run,
# bench.serve_bench; BENCH_ARGS="--no-serve" without it), then the IMAP sync against mbsync on a loopback Dovecot (bench.sync_bench; isync and
# dovecot from apt-get when run as root and missing). SYNC_BENCH_ARGS="--runs 1" for a
# quick one; BENCH_ARGS="--no-peers" without notmuch and mu. Last, issue 37's HTTP
# targets against `serve --listen` (bench.http_load, about 2 minutes; below).
bench: venv
	@$(PEERS_INSTALL)
	$(BIN)/python -m bench.run $(BENCH_ARGS)
	@if ! command -v mbsync >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "bench: installing isync (mbsync) for the sync benchmark" >&2; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq isync dovecot-imapd) >/dev/null 2>&1 || true; \
	fi
	$(BIN)/python -m bench.sync_bench $(SYNC_BENCH_ARGS)
	$(BIN)/python -m bench.http_load $(HTTP_BENCH_ARGS)

# Issue 37's HTTP targets (bench/http_load.py): `serve --listen` on a copy of a store of
# 10,000 generated messages (built once under bench-data/http-load-10000/), idle memory,
# one client's message and search pages, then 50 closed-loop clients for 60 s over a mix
# of pages and API calls: errors, p50/p95/p99 per kind, requests/s, RSS, the load
# average. About 2 minutes once the store is built. HTTP_BENCH_ARGS="--store DIR" for
# another store (copied first; --in-place serves it where it is), "--duration 20".
bench-http: venv
	$(BIN)/python -m bench.http_load $(HTTP_BENCH_ARGS)

# Every figure at two store sizes side by side, with its cost per message at each and
# the growth of that cost (bench.scale): default 100,000 and 1,000,000 messages, about
# 19 GB under bench-data/ and hours on two cores. The sync figures need Dovecot (from
# apt-get when run as root and missing), or SCALE_ARGS="--no-sync". A quick one:
# SCALE_ARGS="--sizes 2000,10000 --sync-messages 300 --data /tmp/bench-scale".
# SCALE_ARGS="--reuse" measures the stores a previous run left, without importing them again.
# Last, notmuch and mu beside mailledger on the smallest size's corpus (bench.peers;
# "--peers-size N" for another, "--no-peers" for none).
bench-scale: venv
	@if [ ! -x /usr/sbin/dovecot ] && ! command -v dovecot >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "bench-scale: installing dovecot for the sync figures" >&2; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dovecot-imapd dovecot-pop3d) >/dev/null 2>&1 || true; \
	fi
	@$(PEERS_INSTALL)
	$(BIN)/python -m bench.scale $(SCALE_ARGS)

# Issue 16, gate 1: 8 spawned writer processes append 2,000 commits to one local Delta
# table (bench/delta_spike.py; docs/delta-spike.md has the figures). deltalake is not a
# product dependency: it is pip-installed into the venv here when missing.
# DELTA_SPIKE_ARGS="--commits 200" for a quick one.
DELTALAKE ?= deltalake==1.6.6
delta-spike: venv
	@$(BIN)/python -c "import deltalake" 2>/dev/null || $(BIN)/pip install -q '$(DELTALAKE)'
	$(BIN)/python -m bench.delta_spike $(DELTA_SPIKE_ARGS)

# Issue 34, gate 5: `publish delta` killed with SIGKILL at random points (100 trials)
# and told a landed commit failed (100 lost answers), on a cluster whose logs grow
# between trials: no (shard, seq) twice, the table equal to the logs, older versions
# as of then (torture/delta.py; `make test` runs 10 trials). DELTA_CHAOS_ARGS="--trials 20".
delta-chaos: venv
	$(BIN)/python -m torture.delta $(DELTA_CHAOS_ARGS)

# deltalake in our processes: threads at import, fork after import / after a write, exit
# statuses, peak RSS of a 200,000-event publish per --chunk-rows (bench/delta_publish.py;
# the figures are in docs/scale-out.md). DELTA_CHECKS_ARGS="--events 20000" for a quick one.
delta-checks: venv
	$(BIN)/python -m bench.delta_publish $(DELTA_CHECKS_ARGS)

# The reliability campaigns (RELIABILITY.md): crash (>= 500 kill -9 trials), network faults,
# server anomalies, hostile mail, storage faults, erasure, secrets. Runs as root for the
# tmpfs full-disk case. TORTURE_ARGS="--quick" for the slice `make test` runs;
# TORTURE_ARGS="--only crash" for one campaign.
torture: venv
	$(BIN)/python -m torture $(TORTURE_ARGS)

# Issue 34, gate 1: fencing under chaos. One shard, four accounts synced by four
# concurrent task processes; 100 trials kill -9 one of them at a random moment, 20
# SIGSTOP one past its lease while a second attempt runs, then resume it: 0 lost,
# 0 doubled, 0 seq gaps, cursors converge, the stale-epoch refusal seen
# (torture/fencing.py). FENCING_ARGS="--trials 10 --pauses 4" for a quick one.
fencing-chaos: venv
	$(BIN)/python -m torture.fencing $(FENCING_ARGS)

# Issue 34, gate 3 (bench/scale_sim.py): 200 Dovecot users on loopback behind a
# proxy adding 30 ms to every response, 8 shards; the first sync with 1 worker and
# with 4 (3 runs each), then chaos (two syncs at once, a worker killed, expunges, a
# UIDVALIDITY reset) and the shards against one store that synced the same accounts.
# SCALE_SIM_ARGS="--accounts 20 --shards 4 --runs 1" for a quick one.
scale-sim: venv
	$(BIN)/python -m bench.scale_sim $(SCALE_SIM_ARGS)

# Issue 34, gates 2 and 6 (bench/cluster_bench.py): commit latency of four fetchers
# on one shard, and a one-shard cluster's sync against a plain store's, paired.
bench-cluster: venv
	$(BIN)/python -m bench.cluster_bench $(CLUSTER_BENCH_ARGS)

# Issue 34, gate 4 (bench/cluster_reads.py): query and search across 16 shards against
# one store of the same 10,000 messages, in-process p95 (built once under bench-data/),
# and the snapshot lag. CLUSTER_READS_ARGS="--messages 100000" for a larger one.
bench-cluster-reads: venv
	$(BIN)/python -m bench.cluster_reads $(CLUSTER_READS_ARGS)

# The core sync scenarios (first, idle, new mail, move, UIDVALIDITY change, expunge,
# read-only) against Cyrus IMAP 3.6 and Courier-IMAP 5.0 from Debian 12, unpacked with
# dpkg-deb -x into bench-data/interop/ and run from there on loopback (they conflict
# with dovecot-imapd: nothing is installed, nothing is left running). Prints a table per
# server x scenario: pass/FAIL, bytes from the server, bodies on the wire. Not in `test`.
# INTEROP_ARGS="--servers cyrus -v" for one server with every sync's report.
interop: venv
	$(BIN)/python -m testkit.interop $(INTEROP_ARGS)

# The manual page, generated from the command's own parser (argparse-manpage):
# man -l man/mailledger.1
man: venv
	@mkdir -p man
	$(BIN)/mailledger man > man/mailledger.1

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/vulture --min-confidence 60 stores projections pipeline vulture_whitelist.py

clean:
	rm -rf demo-store demo-store-imap bench-data .pytest_cache .ruff_cache
