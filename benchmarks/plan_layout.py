"""Benchmark plan_layout (a layout search) and lint_config (a whole launch script) in-process.

    .venv/bin/python benchmarks/plan_layout.py [--repeat N] [--json FILE]

Prints the median and worst wall time of each case, and the median CPU time of this process (what the wall
time would be on an idle machine; with other jobs on the cores the wall time grows, the CPU time does not).
The planning cases include a 1024-GPU job; plan_layout for DeepSeek-V3 on 1024 H100 at 128K should stay
under 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from moe_long_context.tools.lint_config import LintConfigRequest, lint_config
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout

PLANS = {
    "plan deepseek-v3 128K 256 x h100": dict(model="deepseek-v3", gpu="h100", num_gpus=256, seq_len=131072),
    "plan deepseek-v3 128K 1024 x h100": dict(model="deepseek-v3", gpu="h100", num_gpus=1024, seq_len=131072),
    "plan kimi-k2 128K 1024 x gb300": dict(model="kimi-k2", gpu="gb300", num_gpus=1024, seq_len=131072),
    "plan qwen3-235b-a22b 128K 128 x gb200": dict(
        model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072
    ),
}
SCRIPT = (Path(__file__).resolve().parents[1] / "tests" / "data" / "dsv3_128k_h100.sh").read_text()


def timed(fn, repeat: int) -> dict[str, float]:
    fn()  # warm the catalogs and caches once
    samples, cpu = [], []
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return {
        "median_ms": round(statistics.median(samples), 2),
        "max_ms": round(max(samples), 2),
        "cpu_median_ms": round(statistics.median(cpu), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    report = {
        name: timed(lambda kw=kw: plan_layout(PlanLayoutRequest(**kw)), args.repeat)
        for name, kw in PLANS.items()
    }
    report["lint_config dsv3 script"] = timed(
        lambda: lint_config(LintConfigRequest(megatron_args=SCRIPT, gpu="h100")), args.repeat * 4
    )
    width = max(len(k) for k in report)
    print(f"{'case'.ljust(width)}  median ms  max ms  cpu median ms")
    for name, row in report.items():
        print(
            f"{name.ljust(width)}  {row['median_ms']:9.1f}  {row['max_ms']:6.1f}  {row['cpu_median_ms']:13.1f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
