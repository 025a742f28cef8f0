"""Recorded runs: answers an agent gave earlier (JSONL, the grader's input format), graded next to a live run.

A recorded run is named and dated by whoever adds it (``--recorded-name``, ``--recorded-date``): the grader
cannot know which agent wrote a file or when. It may cover only some of the tasks; BENCHMARK.md says how many.
Grading is the same deterministic grader, so a recorded run's scores are as reproducible as the live run's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from .grader import grade_records, read_answers
from .runner import CONFIGURATIONS, breakdown_of, run_entry, summarize
from .tasks import REPO, file_digest

DATE = re.compile(r"\d{4}-\d\d-\d\d")


@dataclass(frozen=True)
class RecordedSpec:
    name: str
    date: str
    files: dict[str, Path]  # configuration -> answers.jsonl


def spec_from_args(name: str | None, date: str | None, with_skill: Path | None, without: Path | None):
    """The command line's recorded run, or None when none is given; half a specification is refused."""
    files = {c: p for c, p in (("with_skill", with_skill), ("without_skill", without)) if p}
    if not files and not name and not date:
        return None
    if not files or not name or not date:
        raise InputError.plain(
            "a recorded run needs --recorded-name, --recorded-date and at least one of --recorded-with / "
            "--recorded-without"
        )
    if not DATE.fullmatch(date):
        raise InputError("--recorded-date", date, "a date as YYYY-MM-DD")
    return RecordedSpec(name, date, files)


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO.parent))
    except ValueError:
        return str(path)


def grade_recorded(spec: RecordedSpec, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The recorded run as benchmark.json holds it: what it covers, its summary and breakdown (outcome and
    process apart) and each answer's expectations."""
    runs = []
    for configuration in CONFIGURATIONS:
        path = spec.files.get(configuration)
        if path is None:
            continue
        counts: dict[str, int] = {}
        for task, grading in grade_records(tasks, read_answers(path)):
            k = counts[task["id"]] = counts.get(task["id"], 0) + 1
            entry = run_entry(task, configuration, k, grading)
            entry["expectations"] = [
                {"text": e["text"], "passed": e["passed"], "kind": e["kind"]} for e in entry["expectations"]
            ]
            runs.append(entry)
    configurations = [c for c in CONFIGURATIONS if c in spec.files]
    covered = list(dict.fromkeys(r["eval_id"] for r in runs))
    return {
        "name": spec.name,
        "date": spec.date,
        "files": {c: _relative(p) for c, p in spec.files.items()},
        "files_sha256": {c: file_digest(p) for c, p in spec.files.items()},
        "configurations": configurations,
        "tasks_covered": len(covered),
        "tasks_in_evals": len(tasks),
        "evals_run": covered,
        "run_summary": summarize(runs, configurations),
        "breakdown": breakdown_of(runs, configurations),
        "runs": runs,
    }


def recorded_differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Differences in the recorded runs' scores between two benchmarks. A run the new benchmark lacks (its
    answers file is not on this machine) is not compared."""
    out = []
    want = {r["name"]: r for r in expected.get("recorded_runs", [])}
    for run in actual.get("recorded_runs", []):
        old = want.get(run["name"])
        if old is None:
            out.append(f"recorded run {run['name']!r}: only in the new run")
            continue
        a = {(r["eval_id"], r["configuration"], r["run_number"]): r["expectations"] for r in old["runs"]}
        b = {(r["eval_id"], r["configuration"], r["run_number"]): r["expectations"] for r in run["runs"]}
        for key in sorted(a.keys() | b.keys()):
            if a.get(key) != b.get(key):
                out.append(f"recorded run {run['name']!r}: {key[0]} [{key[1]}] graded differently")
    return out
