"""CI's speed check: every benchmark ratio (a figure over the reference measured in the same run) against the
committed baseline; fails when one is more than twice its baseline, or when a plan is no longer optimal.

    .venv/bin/python -m benchmarks.check            # compare with benchmarks/baseline.json
    .venv/bin/python -m benchmarks.check --write    # measure three times, write the medians (a deliberate change)

Ratios, not seconds, are compared, so the check holds on a faster or slower machine; the factor 2 leaves room for
a noisy one. It runs each job once from a cold process and a few warm calls (about half a minute).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchmarks.plan_layout import measure, print_report

BASELINE = Path(__file__).with_name("baseline.json")
FACTOR = 2.0  # a ratio may grow to twice its baseline before the check fails
WRITE_RUNS = 3  # measurements a new baseline takes the median of


def ratios(report: dict) -> dict[str, float]:
    out = {f"cold plan {k}": row["plan_ratio"] for k, row in report["cold"].items()}
    out.update({f"warm {k}": row["ratio"] for k, row in report["warm"].items()})
    return out


def regressions(now: dict[str, float], baseline: dict[str, float], factor: float = FACTOR) -> list[str]:
    """One line per figure more than ``factor`` times its baseline ratio, or missing from the measurement."""
    out = []
    for name, base in baseline.items():
        if name not in now:
            out.append(f"{name}: not measured")
        elif now[name] > factor * base:
            out.append(f"{name}: ratio {now[name]:.4g}, more than {factor:g} x the baseline {base:.4g}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the measured ratios as the baseline")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    args = parser.parse_args(argv)
    report = measure(repeat=2, cold_runs=1, cli_runs=0)
    print_report(report)
    now = ratios(report)
    not_optimal = [name for name, row in report["cold"].items() if not row["optimal"]]
    if args.write:
        # a baseline is the median of three measurements: one run can sit 1.5x low on a shared machine
        runs = [now] + [ratios(measure(repeat=2, cold_runs=1, cli_runs=0)) for _ in range(WRITE_RUNS - 1)]
        median = {name: statistics.median(run[name] for run in runs) for name in now}
        args.baseline.write_text(
            json.dumps({"machine": report["machine"], "ratios": median}, indent=2) + "\n"
        )
        print(f"\nwrote {args.baseline} (median of {WRITE_RUNS} runs)")
        return 0
    problems = regressions(now, json.loads(args.baseline.read_text())["ratios"])
    problems += [f"plan {name}: the search stopped before it was optimal" for name in not_optimal]
    print()
    print("\n".join(problems) if problems else f"every ratio within {FACTOR:g} x of {args.baseline.name}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
