"""``moe-lc eval ...``: grade recorded answers, run an agent, the reference agent, build the task file.

Only argparse here; each handler imports what it needs, so ``moe-lc`` starts as fast as before.
Exit codes: 0 done, 1 a ``--check`` found a difference, 2 bad input (one readable line, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import InputError


def add_commands(sub) -> None:
    p = sub.add_parser(
        "eval",
        help="Evals: grade answers, run an agent with and without the skill, the reference agent.",
        description="Score any agent on evals/evals.json with deterministic checks, with and without the skill, "
        "in skill-creator's formats (grading.json, benchmark.json) and BENCHMARK.md.",
    )
    ev = p.add_subparsers(dest="eval_command", metavar="EVAL_COMMAND")
    p.set_defaults(handler=lambda ns: _usage(p))

    g = ev.add_parser("grade", help="Grade recorded answers (JSONL: id, answer, tool_calls, used_skill).")
    g.add_argument("answers", help="JSONL file, one answer object per line.")
    g.add_argument("--evals", type=Path, help="Task file (default: the repository's evals/evals.json).")
    g.add_argument("--out", type=Path, help="Write eval-<id>/run-<k>/grading.json and summary.json here.")
    g.add_argument("--json", action="store_true", help="Print the summary as JSON.")
    g.set_defaults(handler=_grade)

    r = ev.add_parser(
        "run", help="Ask an agent command every question with and without the skill, and grade."
    )
    r.add_argument("--agent-cmd", required=True, help="Shell command: question on stdin, answer on stdout.")
    r.add_argument("--agent-name", help="Name shown in BENCHMARK.md (default: the command).")
    r.add_argument("--evals", type=Path, help="Task file (default: the repository's evals/evals.json).")
    r.add_argument("--ids", help="Comma-separated task ids to run (default: all).")
    r.add_argument("--runs", type=int, default=1, help="Runs per task and configuration (default 1).")
    r.add_argument("--jobs", type=int, default=1, help="Agent commands run at once (default 1).")
    r.add_argument("--timeout", type=float, default=300.0, help="Seconds per agent call (default 300).")
    r.add_argument(
        "--configurations", default="with_skill,without_skill", help="with_skill, without_skill or both."
    )
    r.add_argument(
        "--out", type=Path, help="Workspace folder (default evals/runs); iteration-N is created inside."
    )
    r.add_argument(
        "--transcript-dir",
        type=Path,
        help="Where the agent writes transcripts (default: each run's outputs/).",
    )
    r.add_argument("--benchmark-md", type=Path, help="BENCHMARK.md to write (default: the repository's).")
    r.add_argument(
        "--results", type=Path, help="Copy of benchmark.json to write (default: evals/benchmark.json)."
    )
    r.add_argument(
        "--check-against",
        type=Path,
        metavar="BENCHMARK_JSON",
        help="Compare the scores with a committed benchmark.json and exit 1 if they differ; BENCHMARK.md and the "
        "copy then go to the iteration folder unless given.",
    )
    _recorded_arguments(r)
    r.set_defaults(handler=_run)

    a = ev.add_parser(
        "reference-agent",
        help="The reference agent: a question on stdin, an answer from the MCP server's tools on stdout.",
        description="Answers long-context MoE questions only by calling this package's MCP server over stdio "
        "(MOE_LC_EVAL_WITH_SKILL=0: a tool-less baseline); declines other questions. Writes its tool calls to "
        "MOE_LC_EVAL_TRANSCRIPT when set.",
    )
    a.set_defaults(handler=_reference_agent)

    b = ev.add_parser("build", help="Build evals/evals.json from evals/tasks.yaml with the engine's numbers.")
    b.add_argument("--source", type=Path, help="Task source (default evals/tasks.yaml).")
    b.add_argument("--out", type=Path, help="Task file to write (default evals/evals.json).")
    b.add_argument(
        "--check", action="store_true", help="Exit 1 when the task file differs from a fresh build."
    )
    b.set_defaults(handler=_build)

    cal = ev.add_parser(
        "calibrate",
        help="The engine against every public measurement: summary, README table, stated error, overhead.",
        description="Estimate every measured run of the calibration corpus (tools/moe_long_context/evals/calibration) "
        "and print the summary. --write regenerates README's calibration section, CALIBRATION.md, the stated error "
        "(engine/stated_error.yaml), the measured memory overhead (memory/overhead.yaml), the sustained tensor rates "
        "(engine/sustained_rate.yaml) and NVFP4's GEMM rate (engine/fp4_rate.yaml); --check exits 1 when any of them "
        "is stale.",
    )
    mode = cal.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="Rewrite the six generated files.")
    mode.add_argument("--check", action="store_true", help="Exit 1 when a generated file is stale.")
    cal.set_defaults(handler=_calibrate)

    rep = ev.add_parser("report", help="Write BENCHMARK.md from a benchmark.json.")
    rep.add_argument("benchmark", type=Path, help="benchmark.json")
    rep.add_argument("--out", type=Path, help="Markdown file to write (default: print).")
    rep.add_argument("--check", action="store_true", help="Exit 1 when --out differs from the rendering.")
    rep.add_argument(
        "--benchmark-out",
        type=Path,
        help="With a recorded run: write the benchmark.json that includes it here.",
    )
    _recorded_arguments(rep)
    rep.set_defaults(handler=_report)


def _recorded_arguments(parser) -> None:
    g = parser.add_argument_group(
        "recorded run", "Grade an agent's recorded answers (JSONL) and show them next to the live run."
    )
    g.add_argument("--recorded-with", type=Path, metavar="JSONL", help="Answers given with the skill.")
    g.add_argument("--recorded-without", type=Path, metavar="JSONL", help="Answers given without it.")
    g.add_argument("--recorded-name", help="The agent that gave them (shown in BENCHMARK.md).")
    g.add_argument("--recorded-date", help="When they were recorded (YYYY-MM-DD).")


def _add_recorded(ns, benchmark: dict, evals: Path | None) -> None:
    from .recorded import grade_recorded, spec_from_args
    from .tasks import load_tasks

    spec = spec_from_args(ns.recorded_name, ns.recorded_date, ns.recorded_with, ns.recorded_without)
    if spec is not None:
        runs = [r for r in benchmark.get("recorded_runs", []) if r["name"] != spec.name]
        benchmark["recorded_runs"] = [*runs, grade_recorded(spec, load_tasks(evals))]


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise InputError(what, str(path), f"a readable file ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise InputError(what, str(path), f"valid JSON ({exc.msg} at line {exc.lineno})") from None


def _grade(ns) -> int:
    from .grader import grade_records, read_answers, task_passed
    from .tasks import load_tasks

    tasks = load_tasks(ns.evals)
    graded = grade_records(tasks, read_answers(ns.answers))
    counts: dict[str, int] = {}
    rows = []
    for task, grading in graded:
        k = counts[task["id"]] = counts.get(task["id"], 0) + 1
        if ns.out:
            folder = ns.out / f"eval-{task['id']}" / f"run-{k}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "grading.json").write_text(json.dumps(grading, indent=2) + "\n")
        rows.append(
            {
                "eval_id": task["id"],
                "run": k,
                "category": task["category"],
                "task_passed": task_passed(grading),
                **grading["summary"],
                **({"lint": grading["lint"]} if "lint" in grading else {}),
            }
        )
    mean = sum(r["pass_rate"] for r in rows) / len(rows) if rows else 0.0
    passed = sum(r["task_passed"] for r in rows)
    summary = {
        "answers": len(rows),
        "tasks_passed": passed,
        "mean_pass_rate": round(mean, 4),
        "results": rows,
    }
    if ns.out:
        ns.out.mkdir(parents=True, exist_ok=True)
        (ns.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if ns.json:
        print(json.dumps(summary, indent=2))
    else:
        for r in rows:
            mark = "PASS" if r["task_passed"] else "FAIL"
            print(f"{mark}  {r['eval_id']:<36} {r['passed']}/{r['total']} expectations")
        print(f"{passed} of {len(rows)} answers pass every check; mean pass rate {mean:.2f}")
    return 0


def _run(ns) -> int:
    from .report import render_benchmark
    from .runner import CONFIGURATIONS, RunOptions, command_line, differences, run_benchmark
    from .tasks import BENCHMARK_JSON, BENCHMARK_MD, EVALS_JSON, REPO

    configurations = tuple(c.strip() for c in ns.configurations.split(",") if c.strip())
    bad = [c for c in configurations if c not in CONFIGURATIONS]
    if bad or not configurations:
        raise InputError(
            "--configurations", ns.configurations, "with_skill, without_skill or both, comma-separated"
        )
    if ns.runs < 1 or ns.jobs < 1 or ns.timeout <= 0:
        raise InputError.plain("--runs and --jobs must be at least 1 and --timeout positive")
    opts = RunOptions(
        agent_cmd=ns.agent_cmd,
        agent_name=ns.agent_name,
        evals=ns.evals or EVALS_JSON,
        out=ns.out or REPO / "evals" / "runs",
        runs=ns.runs,
        jobs=ns.jobs,
        timeout_s=ns.timeout,
        transcript_dir=ns.transcript_dir,
        ids=[i.strip() for i in ns.ids.split(",") if i.strip()] if ns.ids else None,
        configurations=configurations,
        command_line=command_line(sys.argv[1:]) if sys.argv[1:2] == ["eval"] else "",
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    expected = _read_json(ns.check_against, "--check-against") if ns.check_against else None
    benchmark, iteration = run_benchmark(opts)
    _add_recorded(ns, benchmark, ns.evals)
    (iteration / "benchmark.json").write_text(json.dumps(benchmark, indent=2) + "\n")
    text = json.dumps(benchmark, indent=2) + "\n"
    results = ns.results or (iteration / "benchmark.copy.json" if expected else BENCHMARK_JSON)
    md = ns.benchmark_md or (iteration / "BENCHMARK.md" if expected else BENCHMARK_MD)
    results.write_text(text)
    md.write_text(render_benchmark(benchmark))
    s = benchmark["run_summary"]
    for c in configurations:
        print(f"{c}: mean pass rate {s[c]['pass_rate']['mean']:.2f}")
    if "delta" in s:
        print(f"delta: {s['delta']['pass_rate']} (outcome {s['delta']['outcome_pass_rate']})")
    for rec in benchmark.get("recorded_runs", []):
        print(f"recorded run {rec['name']!r} ({rec['date']}): {rec['tasks_covered']} tasks graded")
    print("\n".join(benchmark["notes"]))
    print(f"workspace {iteration}; wrote {results} and {md}")
    if expected is not None:
        from .recorded import recorded_differences

        diff = differences(expected, benchmark) + recorded_differences(expected, benchmark)
        if diff:
            print(f"scores differ from {ns.check_against} (run `make evals` and commit):", file=sys.stderr)
            for line in diff[:40]:
                print("  " + line, file=sys.stderr)
            return 1
        print(f"scores match {ns.check_against}")
    return 0


def _reference_agent(ns) -> int:
    from .agent import main

    return main()


def _build(ns) -> int:
    from .build import build, render
    from .tasks import EVALS_JSON

    out = ns.out or EVALS_JSON
    text = render(build(ns.source))
    if ns.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is stale: run `moe-lc eval build` and commit it", file=sys.stderr)
            return 1
        print(f"{out} matches the engine")
        return 0
    out.write_text(text)
    print(f"wrote {out} ({text.count(chr(10))} lines)")
    return 0


def _calibrate(ns) -> int:
    from .calibration import generate
    from .calibration.evaluate import evaluate
    from .calibration.report import summary_markdown

    if ns.check:
        stale = generate.stale()
        if stale:
            names = ", ".join(str(p.relative_to(generate.REPO)) for p in stale)
            print(f"stale: {names} (run `moe-lc eval calibrate --write` and commit them)", file=sys.stderr)
            return 1
        print("calibration files match the corpus")
        return 0
    if ns.write:
        changed = generate.write()
        print(
            "wrote "
            + (", ".join(str(p.relative_to(generate.REPO)) for p in changed) or "nothing (all current)")
        )
        return 0
    print(summary_markdown(evaluate()))
    return 0


def _report(ns) -> int:
    from .report import render_benchmark

    benchmark = _read_json(ns.benchmark, "benchmark")
    _add_recorded(ns, benchmark, None)
    if ns.benchmark_out:
        ns.benchmark_out.write_text(json.dumps(benchmark, indent=2) + "\n")
    text = render_benchmark(benchmark)
    if ns.check:
        if ns.out is None or not ns.out.exists() or ns.out.read_text() != text:
            print(f"{ns.out} is not the rendering of {ns.benchmark}", file=sys.stderr)
            return 1
        return 0
    if ns.out:
        ns.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0
