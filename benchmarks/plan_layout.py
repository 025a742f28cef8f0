"""CPU time of plan_layout (the exact layout search) from a cold process and warm, and of the other tools warm.

    .venv/bin/python -m benchmarks.plan_layout [--repeat N] [--json FILE]

Cold: a fresh Python process per run imports the engine and plans one job; it reports the CPU seconds of the import
and of that first plan, and its own reference (benchmarks/machine.py) measured in the same process. Warm: in this
process, after one call, the median CPU of ``--repeat`` calls. ``moe-lc plan`` is also timed whole (wall, the
process started to its exit) next to ``moe-lc gpus``, the CLI's cheapest command, as a same-run yardstick.
Every figure is given in seconds (or ms) and as a ratio to the reference, which is what compares across machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.machine import cpu_ratio, describe, machine, reference_cpu_s

JOBS = {
    "deepseek-v3 128K 256 x h100": dict(model="deepseek-v3", gpu="h100", num_gpus=256, seq_len=131072),
    "deepseek-v3 128K 1024 x h100": dict(model="deepseek-v3", gpu="h100", num_gpus=1024, seq_len=131072),
    "qwen3-235b-a22b 128K 128 x gb200": dict(
        model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072
    ),
    "kimi-k2 128K 1024 x gb300": dict(model="kimi-k2", gpu="gb300", num_gpus=1024, seq_len=131072),
    "kimi-k2 128K 8192 x gb300": dict(model="kimi-k2", gpu="gb300", num_gpus=8192, seq_len=131072),
    "deepseek-v3 256K 8192 x gb300": dict(model="deepseek-v3", gpu="gb300", num_gpus=8192, seq_len=262144),
}
BIN = Path(sys.executable).parent
SCRIPT = (Path(__file__).resolve().parents[1] / "tests" / "data" / "dsv3_128k_h100.sh").read_text()

# What a fresh process runs: its own reference, the import, one plan; one JSON line out.
COLD = """
import json, sys, time
from benchmarks.machine import reference_cpu_s
reference = reference_cpu_s(3)
started = time.process_time()
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout
imported = time.process_time()
result = plan_layout(PlanLayoutRequest(**json.loads(sys.argv[1])))
planned = time.process_time()
print(json.dumps({"import_s": imported - started, "plan_s": planned - imported, "reference_s": reference,
                  "evaluated": result.evaluated, "optimal": result.optimal}))
"""


def cold(job: dict, runs: int) -> dict:
    """Median over ``runs`` fresh processes of the import and first-plan CPU seconds, and their ratios."""
    rows = []
    root = Path(__file__).resolve().parents[1]
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", COLD, json.dumps(job)],
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    median = {k: statistics.median(r[k] for r in rows) for k in ("import_s", "plan_s", "reference_s")}
    return {
        **{k: round(v, 4) for k, v in median.items()},
        "plan_ratio": round(statistics.median(r["plan_s"] / r["reference_s"] for r in rows), 2),
        "import_ratio": round(statistics.median(r["import_s"] / r["reference_s"] for r in rows), 2),
        "evaluated": rows[0]["evaluated"],
        "optimal": rows[0]["optimal"],
    }


def wall(argv: list[str], runs: int) -> float:
    """Median wall seconds of a whole command, started to exit."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def warm(repeat: int) -> dict[str, dict]:
    """In this process: median CPU per call of plan_layout on each job and of each other tool on the
    published DeepSeek-V3 128K layout, with its ratio to the reference (each call paired with one)."""
    from benchmarks.bench_server import tool_arguments

    from moe_long_context.faces.registry import TOOLS_BY_NAME
    from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout

    out = {}
    for name, job in JOBS.items():
        s, ratio = cpu_ratio(lambda job=job: plan_layout(PlanLayoutRequest(**job)), repeat)
        out[f"plan {name}"] = {"cpu_ms": round(s * 1e3, 2), "ratio": _sig(ratio)}
    calls = {**tool_arguments(), "lint_config": {"megatron_args": SCRIPT, "gpu": "h100"}}
    for name, arguments in calls.items():
        tool = TOOLS_BY_NAME[name]
        s, ratio = cpu_ratio(lambda t=tool, a=arguments: t.fn(t.request.model_validate(a)), repeat * 4)
        out[name] = {"cpu_ms": round(s * 1e3, 3), "ratio": _sig(ratio)}
    return out


def _sig(ratio: float) -> float:
    """Four significant digits: a sub-millisecond call's ratio is about 0.003, which three decimals would round
    by up to 20 %, a fifth of the regression check's factor."""
    return float(f"{ratio:.4g}")


def measure(repeat: int, cold_runs: int, cli_runs: int) -> dict:
    reference = reference_cpu_s()
    report = {"machine": machine(), "reference_ms": round(reference * 1e3, 2), "cold": {}, "warm": {}}
    for name, job in JOBS.items():
        report["cold"][name] = cold(job, cold_runs)
    report["warm"] = warm(repeat)
    if cli_runs:
        job = JOBS["deepseek-v3 128K 256 x h100"]
        plan = [str(BIN / "moe-lc"), "plan", "--model", job["model"], "--gpu", job["gpu"],
                "--num-gpus", str(job["num_gpus"]), "--seq-len", str(job["seq_len"])]  # fmt: skip
        gpus = wall([str(BIN / "moe-lc"), "gpus"], cli_runs)
        plan_s = wall(plan, cli_runs)
        report["cli"] = {"moe-lc plan deepseek-v3 128K 256 x h100": {
            "wall_s": round(plan_s, 3), "moe-lc gpus wall_s": round(gpus, 3), "ratio": round(plan_s / gpus, 2)}}  # fmt: skip
    return report


def print_report(report: dict) -> None:
    print(describe(report["machine"], report["reference_ms"] / 1e3))
    width = max(len(k) for k in [*report["cold"], *report["warm"]]) + 5
    print(f"\n{'cold process (CPU)'.ljust(width)}  import s  plan s  plan/ref  evaluated  optimal")
    for name, row in report["cold"].items():
        print(f"{name.ljust(width)}  {row['import_s']:8.3f}  {row['plan_s']:6.3f}  {row['plan_ratio']:8.2f}  "
              f"{row['evaluated']:9d}  {row['optimal']}")  # fmt: skip
    print(f"\n{'warm, per call (CPU)'.ljust(width)}  median ms  ratio")
    for name, row in report["warm"].items():
        print(f"{name.ljust(width)}  {row['cpu_ms']:9.2f}  {row['ratio']:.4g}")
    for name, row in report.get("cli", {}).items():
        print(f"\n{name}: {row['wall_s']:.2f} s wall (moe-lc gpus {row['moe-lc gpus wall_s']:.2f} s; "
              f"ratio {row['ratio']:.2f})")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="warm calls per case")
    parser.add_argument("--cold-runs", type=int, default=3, help="fresh processes per job")
    parser.add_argument("--cli-runs", type=int, default=3, help="whole moe-lc runs (0: skip)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    report = measure(args.repeat, args.cold_runs, args.cli_runs)
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
