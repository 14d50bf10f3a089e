"""``python -m torture [--quick] [--only NAME] [--seed S]``: run every campaign.

Every module of this package with a ``main()`` is a campaign (see the package
docstring for the contract). ``--quick`` runs each one's ``QUICK_TRIALS``
(the slice ``make test`` runs too); the default is ``FULL_TRIALS``
(``make torture``). Prints one summary table; exits 1 when any campaign had a
failure, 2 when ``--only`` names no campaign.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torture
from torture import Result

# the order; campaigns not listed here run after these, by name
_ORDER = ("crash", "network", "anomalies", "hostile", "storage", "erasure", "secrets")


def campaigns() -> list[str]:
    names = [m.name for m in pkgutil.iter_modules(torture.__path__) if not m.name.startswith("_")]
    return sorted(names, key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n))


def _as_result(name: str, value: Any, seconds: float) -> Result:
    """A campaign's return value as a Result (an int is a failure count)."""
    if isinstance(value, Result):
        result = value
    elif isinstance(value, dict):
        result = Result(name, **{k: v for k, v in value.items() if k in Result.__annotations__})
    elif isinstance(value, int):
        result = Result(name, failures=[f"{value} failures"] * value if value else [])
    else:
        result = Result(name, failures=[f"main() returned {value!r}"])
    if not result.seconds:
        result.seconds = seconds
    return result


def run(name: str, quick: bool, seed: int | None) -> Result:
    t0 = time.monotonic()
    try:
        module = importlib.import_module(f"torture.{name}")
    except Exception as exc:
        return Result(name, failures=[f"cannot import torture.{name}: {exc}"])
    main = getattr(module, "main", None)
    if main is None:
        return Result(name, skipped=["no main()"])
    trials = getattr(module, "QUICK_TRIALS" if quick else "FULL_TRIALS", None)
    params = inspect.signature(main).parameters
    kwargs: dict[str, Any] = {}
    if trials is not None and "trials" in params:
        kwargs["trials"] = trials
    if seed is not None and "seed" in params:
        kwargs["seed"] = seed
    if "quick" in params:
        kwargs["quick"] = quick
    print(f"== torture {name} {kwargs}", flush=True)
    try:
        value = main(**kwargs)
    except Exception:
        return Result(name, failures=[f"crashed:\n{traceback.format_exc()}"])
    return _as_result(name, value, time.monotonic() - t0)


def table(results: list[Result]) -> str:
    head = ("campaign", "trials", "faults", "failures", "skipped", "seconds", "result")
    rows = [
        (
            r.name,
            str(r.trials),
            str(r.faults),
            str(len(r.failures)),
            str(len(r.skipped)),
            f"{r.seconds:.0f}",
            "OK" if r.ok else "FAILED",
        )
        for r in results
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))

    return "\n".join([line(head), line(tuple("-" * w for w in widths)), *map(line, rows)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torture", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the small slice (make test runs it)")
    ap.add_argument("--only", action="append", metavar="NAME", help="only this campaign")
    ap.add_argument("--seed", type=int, help="one seed for every campaign (default: theirs)")
    ap.add_argument("--list", action="store_true", help="list the campaigns and exit")
    args = ap.parse_args(argv)
    names = campaigns()
    if args.list:
        print("\n".join(names))
        return 0
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            print(f"no campaign {', '.join(unknown)}; there are: {', '.join(names)}")
            return 2
        names = [n for n in names if n in args.only]
    results = [run(name, args.quick, args.seed) for name in names]
    print()
    print(table(results))
    for r in results:
        for f in r.failures:
            print(f"FAILED {r.name}: {f}", file=sys.stderr)
        for s in dict.fromkeys(r.skipped):
            print(f"skipped {r.name}: {s}")
    print(f"\n(run from {Path.cwd()}; {'quick slice' if args.quick else 'full campaigns'})")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
