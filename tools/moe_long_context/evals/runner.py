"""The runner: ask an agent command every question, with and without the skill, grade, aggregate.

The agent is any command: it reads the question on stdin and writes the answer on stdout. It learns from its
environment whether the skill is enabled (``MOE_LC_EVAL_WITH_SKILL=1`` or ``0``), where the skill lives
(``MOE_LC_EVAL_SKILL_DIR``) and where it may write a transcript (``MOE_LC_EVAL_TRANSCRIPT``: a JSON object with
``tool_calls`` [{name, arguments}], and optionally ``used_skill`` and ``total_tokens``). It is never told the
task id.

Output is skill-creator's workspace layout::

    <out>/iteration-N/eval-<id>/eval_metadata.json
    <out>/iteration-N/eval-<id>/{with_skill,without_skill}/run-K/{outputs/, grading.json, timing.json}
    <out>/iteration-N/benchmark.json

benchmark.json has skill-creator's ``metadata``, ``runs``, ``run_summary`` (pass_rate, and apart from it the
outcome (content) and process (tool use) pass rates, time_seconds, tokens as
mean/stddev/min/max per configuration, ``delta`` as signed strings) and ``notes``, plus ``breakdown``: per
category, positive and negative tasks, and lint recall and precision, from which BENCHMARK.md is written.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import InputError
from .grader import GRADER_VERSION, grade, task_passed
from .tasks import EVALS_JSON, REPO, SKILL_NAME, file_digest, is_positive, load_tasks

CONFIGURATIONS = ("with_skill", "without_skill")
SCORE_KEYS = (
    "eval_id",
    "configuration",
    "run_number",
    "passed",
    "failed",
    "total",
    "pass_rate",
    "expectations",
)


@dataclass
class RunOptions:
    agent_cmd: str
    agent_name: str | None = None
    evals: Path = EVALS_JSON
    out: Path = REPO / "evals" / "runs"
    runs: int = 1
    jobs: int = 1
    timeout_s: float = 300.0
    transcript_dir: Path | None = None
    ids: list[str] | None = None
    configurations: tuple[str, ...] = CONFIGURATIONS
    command_line: str = ""
    progress: Callable[[str], None] | None = field(default=None, repr=False)


@dataclass
class AgentRun:
    answer: str
    transcript: dict[str, Any]
    returncode: int | None  # None: timed out
    stderr: str
    seconds: float


def run_agent(cmd: str, question: str, with_skill: bool, transcript: Path, timeout_s: float) -> AgentRun:
    """One question to the agent command (through the shell), the skill on or off."""
    env = {
        **os.environ,
        "MOE_LC_EVAL_WITH_SKILL": "1" if with_skill else "0",
        "MOE_LC_EVAL_CONFIGURATION": "with_skill" if with_skill else "without_skill",
        "MOE_LC_EVAL_TRANSCRIPT": str(transcript),
        "MOE_LC_EVAL_SKILL_DIR": str(REPO),
    }
    transcript.unlink(missing_ok=True)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            shell=True,
            input=question,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
        out, err, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = f"timed out after {timeout_s:.0f} s"
        code = None
    seconds = time.monotonic() - started
    data: dict[str, Any] = {}
    if transcript.exists():
        try:
            loaded = json.loads(transcript.read_text())
            data = loaded if isinstance(loaded, dict) else {}
        except json.JSONDecodeError:
            err += "\ntranscript is not JSON; ignored"
    return AgentRun(out, data, code, err, seconds)


def _record(task_id: str, run: AgentRun) -> dict[str, Any]:
    calls = run.transcript.get("tool_calls")
    record: dict[str, Any] = {"id": task_id, "answer": run.answer}
    if isinstance(calls, list):
        record["tool_calls"] = [c for c in calls if isinstance(c, dict) and "name" in c]
    if isinstance(run.transcript.get("used_skill"), bool):
        record["used_skill"] = run.transcript["used_skill"]
    return record


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "stddev": 0.0, "min": 0.0, "max": 0.0}
    return {
        "mean": round(statistics.fmean(values), 4),
        "stddev": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0,
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def _next_iteration(out: Path) -> Path:
    n = 1
    while (out / f"iteration-{n}").exists():
        n += 1
    return out / f"iteration-{n}"


def run_benchmark(opts: RunOptions) -> tuple[dict[str, Any], Path]:
    """Run every (task, configuration, run), write the workspace, return benchmark.json and its folder."""
    tasks = load_tasks(opts.evals)
    if opts.ids:
        known = {t["id"] for t in tasks}
        unknown = [i for i in opts.ids if i not in known]
        if unknown:
            raise InputError.plain(f"unknown task id {unknown[0]!r} (not in {opts.evals})")
        tasks = [t for t in tasks if t["id"] in opts.ids]
    iteration = _next_iteration(opts.out)
    jobs = []
    for task in tasks:
        folder = iteration / f"eval-{task['id']}"
        folder.mkdir(parents=True, exist_ok=True)
        checks = [c["text"] for c in task["checks"]]
        metadata = {
            "eval_id": task["id"],
            "eval_name": task["id"],
            "prompt": task["question"],
            "assertions": checks,
        }
        (folder / "eval_metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
        for configuration in opts.configurations:
            for k in range(1, opts.runs + 1):
                jobs.append((task, configuration, k, folder / configuration / f"run-{k}"))

    def work(job):
        task, configuration, k, run_dir = job
        outputs = run_dir / "outputs"
        outputs.mkdir(parents=True, exist_ok=True)
        if opts.transcript_dir:
            opts.transcript_dir.mkdir(parents=True, exist_ok=True)
            transcript = opts.transcript_dir / f"{task['id']}.{configuration}.run-{k}.json"
        else:
            transcript = outputs / "transcript.json"
        run = run_agent(
            opts.agent_cmd, task["question"], configuration == "with_skill", transcript, opts.timeout_s
        )
        (outputs / "answer.md").write_text(run.answer)
        if run.stderr.strip():
            (outputs / "stderr.txt").write_text(run.stderr)
        if opts.transcript_dir and transcript.exists():
            shutil.copyfile(transcript, outputs / "transcript.json")
        grading = grade(task, _record(task["id"], run))
        tokens = run.transcript.get("total_tokens", 0)
        tokens = tokens if isinstance(tokens, int) else 0
        timing = {
            "total_tokens": tokens,
            "duration_ms": round(run.seconds * 1000),
            "total_duration_seconds": round(run.seconds, 3),
        }
        grading["timing"] = timing
        (run_dir / "grading.json").write_text(json.dumps(grading, indent=2) + "\n")
        (run_dir / "timing.json").write_text(json.dumps(timing, indent=2) + "\n")
        if opts.progress:
            mark = "pass" if task_passed(grading) else f"{grading['summary']['pass_rate']:.0%}"
            opts.progress(f"{task['id']} [{configuration} run {k}]: {mark}")
        return task, configuration, k, grading, run

    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        results = list(pool.map(work, jobs))  # map keeps the job order: the output does not depend on timing
    benchmark = aggregate(tasks, results, opts)
    (iteration / "benchmark.json").write_text(json.dumps(benchmark, indent=2) + "\n")
    return benchmark, iteration


def run_entry(task: dict, configuration: str, k: int, grading: dict, seconds: float = 0.0) -> dict[str, Any]:
    """One run of benchmark.json's ``runs``: its grade, outcome and process apart."""
    s = grading["summary"]
    entry = {
        "eval_id": task["id"],
        "eval_name": task["id"],
        "category": task["category"],
        "positive": is_positive(task),
        "configuration": configuration,
        "run_number": k,
        "result": {
            "pass_rate": s["pass_rate"],
            "outcome_pass_rate": s["outcome"]["pass_rate"],
            "process_pass_rate": s["process"]["pass_rate"],
            "passed": s["passed"],
            "failed": s["failed"],
            "total": s["total"],
            "time_seconds": round(seconds, 3),
            "tokens": grading.get("timing", {}).get("total_tokens", 0),
            "tool_calls": grading["execution_metrics"]["tool_calls"],
            "errors": 0,
        },
        "task_passed": task_passed(grading),
        "outcome_passed": s["outcome"]["passed"] == s["outcome"]["total"],
        "used_skill": grading["execution_metrics"]["used_skill"],
        "expectations": grading["expectations"],
        "notes": [],
    }
    if "lint" in grading:
        entry["lint"] = grading["lint"]
    return entry


def _mean(runs: list[dict], key: str) -> float | None:
    values = [r["result"][key] for r in runs if r["result"][key] is not None]
    return round(statistics.fmean(values), 4) if values else None


def summarize(runs: list[dict], configurations) -> dict[str, Any]:
    """run_summary: pass rate (all, outcome, process), time and tokens per configuration, and the deltas."""
    summary: dict[str, Any] = {}
    for configuration in configurations:
        mine = [r for r in runs if r["configuration"] == configuration]
        summary[configuration] = {
            key: _stats([r["result"][key] for r in mine if r["result"][key] is not None])
            for key in ("pass_rate", "outcome_pass_rate", "process_pass_rate")
        }
        summary[configuration]["time_seconds"] = _stats([r["result"]["time_seconds"] for r in mine])
        summary[configuration]["tokens"] = _stats([float(r["result"]["tokens"]) for r in mine])
    if all(c in summary for c in CONFIGURATIONS):
        w, wo = summary["with_skill"], summary["without_skill"]
        summary["delta"] = {
            key: f"{w[key]['mean'] - wo[key]['mean']:+.2f}"
            for key in ("pass_rate", "outcome_pass_rate", "process_pass_rate")
        }
        summary["delta"]["time_seconds"] = f"{w['time_seconds']['mean'] - wo['time_seconds']['mean']:+.1f}"
        summary["delta"]["tokens"] = f"{w['tokens']['mean'] - wo['tokens']['mean']:+.0f}"
    return summary


def aggregate(tasks: list[dict], results: list[tuple], opts: RunOptions) -> dict[str, Any]:
    runs = []
    for task, configuration, k, grading, run in results:
        entry = run_entry(task, configuration, k, grading, run.seconds)
        entry["result"]["errors"] = 0 if run.returncode == 0 else 1
        if run.returncode is None:
            entry["notes"].append(run.stderr.strip())
        elif run.returncode:
            entry["notes"].append(f"agent exited with {run.returncode}")
        runs.append(entry)
    summary = summarize(runs, opts.configurations)
    agent_name = opts.agent_name or opts.agent_cmd
    breakdown = breakdown_of(runs, opts.configurations)
    notes = []
    for configuration in opts.configurations:
        pos = breakdown["positive"].get(configuration)
        neg = breakdown["negative"].get(configuration)
        if pos:
            notes.append(
                f"{configuration}: {pos['tasks_passed']} of {pos['tasks']} positive tasks pass every check "
                f"(mean pass rate {pos['pass_rate']:.2f})"
            )
        if neg:
            notes.append(
                f"{configuration}: {neg['declined']} of {neg['tasks']} negative tasks did not use the skill"
            )
        failures = sum(r["result"]["errors"] for r in runs if r["configuration"] == configuration)
        if failures:
            notes.append(
                f"{configuration}: the agent command failed (non-zero exit or timeout) in {failures} runs"
            )
    return {
        "metadata": {
            "skill_name": SKILL_NAME,
            "skill_version": __version__,
            "agent": agent_name,
            "agent_command": opts.agent_cmd,
            "command": opts.command_line,
            "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "evals_file": _relative(opts.evals),
            "evals_sha256": file_digest(opts.evals),
            "evals_run": list(dict.fromkeys(r["eval_id"] for r in runs)),
            "runs_per_configuration": opts.runs,
            "configurations": list(opts.configurations),
            "grader": f"moe-lc eval grade (deterministic checks, version {GRADER_VERSION})",
        },
        "runs": runs,
        "run_summary": summary,
        "breakdown": breakdown,
        "notes": notes,
    }


def _relative(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def breakdown_of(runs: list[dict[str, Any]], configurations) -> dict[str, Any]:
    """Per category, positive and negative tasks, and lint recall/precision, for each configuration."""
    categories: dict[str, Any] = {}
    for r in runs:
        cat = categories.setdefault(r["category"], {"tasks": set()})
        cat["tasks"].add(r["eval_id"])
    out: dict[str, Any] = {"categories": {}, "positive": {}, "negative": {}, "lint": {}}
    for name, cat in categories.items():
        row: dict[str, Any] = {"tasks": len(cat["tasks"])}
        for c in configurations:
            mine = [r for r in runs if r["category"] == name and r["configuration"] == c]
            if mine:
                row[c] = {
                    "pass_rate": _mean(mine, "pass_rate"),
                    "outcome_pass_rate": _mean(mine, "outcome_pass_rate"),
                    "process_pass_rate": _mean(mine, "process_pass_rate"),
                    "runs_passed": sum(r["task_passed"] for r in mine),
                    "outcome_runs_passed": sum(r["outcome_passed"] for r in mine),
                    "runs": len(mine),
                }
        out["categories"][name] = row
    for c in configurations:
        pos = [r for r in runs if r["configuration"] == c and r["positive"]]
        neg = [r for r in runs if r["configuration"] == c and not r["positive"]]
        if pos:
            out["positive"][c] = {
                "tasks": len({r["eval_id"] for r in pos}),
                "runs": len(pos),
                "tasks_passed": sum(r["task_passed"] for r in pos),
                "outcome_tasks_passed": sum(r["outcome_passed"] for r in pos),
                "pass_rate": _mean(pos, "pass_rate"),
                "outcome_pass_rate": _mean(pos, "outcome_pass_rate"),
                "process_pass_rate": _mean(pos, "process_pass_rate"),
            }
        if neg:
            out["negative"][c] = {
                "tasks": len({r["eval_id"] for r in neg}),
                "runs": len(neg),
                "declined": sum(not r["used_skill"] for r in neg),
                "pass_rate": _mean(neg, "pass_rate"),
                "outcome_pass_rate": _mean(neg, "outcome_pass_rate"),
            }
        lint = [r["lint"] for r in runs if r["configuration"] == c and "lint" in r]
        if lint:
            errors = sum(x["errors"] for x in lint)
            found = sum(x["found"] for x in lint)
            false = sum(x["false_claims"] for x in lint)
            out["lint"][c] = {
                "runs": len(lint),
                "errors": errors,
                "found": found,
                "false_claims": false,
                "recall": round(found / errors, 4) if errors else 0.0,
                "precision": round(found / (found + false), 4) if found + false else 0.0,
            }
    return out


def scores(benchmark: dict[str, Any]) -> list[dict[str, Any]]:
    """What must not change between two runs of a deterministic agent: every run's grade, nothing timed."""
    out = []
    for r in benchmark["runs"]:
        out.append(
            {
                "eval_id": r["eval_id"],
                "configuration": r["configuration"],
                "run_number": r["run_number"],
                "passed": r["result"]["passed"],
                "failed": r["result"]["failed"],
                "total": r["result"]["total"],
                "pass_rate": r["result"]["pass_rate"],
                "expectations": [(e["text"], e["passed"]) for e in r["expectations"]],
            }
        )
    return out


def differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Readable differences between the scores of two benchmarks (empty when they agree)."""
    out = []
    if expected["metadata"].get("evals_sha256") != actual["metadata"].get("evals_sha256"):
        out.append("the evals file changed since the committed benchmark was written")
    want = {(s["eval_id"], s["configuration"], s["run_number"]): s for s in scores(expected)}
    got = {(s["eval_id"], s["configuration"], s["run_number"]): s for s in scores(actual)}
    for key in sorted(want.keys() | got.keys()):
        a, b = want.get(key), got.get(key)
        if a is None or b is None:
            out.append(
                f"{key[0]} [{key[1]} run {key[2]}]: only in {'the new run' if a is None else 'the committed one'}"
            )
        elif a != b:
            out.append(
                f"{key[0]} [{key[1]} run {key[2]}]: {a['passed']}/{a['total']} committed, {b['passed']}/{b['total']} now"
            )
    return out


def command_line(argv: list[str]) -> str:
    return "moe-lc " + " ".join(shlex.quote(a) for a in argv)
