"""The grader against human labels: real LLM answers (with and without the skill) whose every graded expectation
was read by hand. The data sits beside the clone (../shared/evals-calibration/, as in CI); elsewhere the test is
skipped and says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moe_long_context.evals.grader import grade, read_answers
from moe_long_context.evals.tasks import REPO, load_tasks

CALIBRATION = REPO.parent / "shared" / "evals-calibration"
AGREEMENT = 0.98


def _labels() -> list[dict]:
    if not (CALIBRATION / "labels_A.json").exists():
        pytest.skip(f"{CALIBRATION} is not here: the grader calibration data sits beside the clone in CI")
    return json.loads((CALIBRATION / "labels_A.json").read_text())


def disagreements() -> tuple[int, list[str]]:
    """(expectations compared, one line per expectation where the grader and the human reading differ)."""
    labels = _labels()
    tasks = {t["id"]: t for t in load_tasks()}
    records = {}
    for condition in ("with", "without"):
        for record in read_answers(CALIBRATION / f"answers_{condition}_A.jsonl"):
            records[(record["id"], condition)] = record
    compared, lines = 0, []
    for item in labels:
        grading = grade(tasks[item["id"]], records[(item["id"], item["condition"])])
        by_text = {e["text"]: e for e in grading["expectations"]}
        for label in item["labels"]:
            compared += 1
            got = by_text.get(label["text"])
            if got is None:
                lines.append(f"{item['id']} [{item['condition']}] {label['text']!r}: no longer graded")
            elif got["passed"] != label["human_passed"]:
                lines.append(
                    f"{item['id']} [{item['condition']}] {label['text']!r}: grader {got['passed']}, human "
                    f"{label['human_passed']} ({label['note']}) -- grader evidence: {got['evidence'][:200]}"
                )
    return compared, lines


def test_the_grader_agrees_with_the_human_labels():
    compared, lines = disagreements()
    agreement = 1 - len(lines) / compared
    report = "\n".join(lines)
    print(f"agreement {agreement:.1%} on {compared} expectations; disagreements:\n{report or 'none'}")
    assert agreement >= AGREEMENT, (
        f"agreement {agreement:.1%} < {AGREEMENT:.0%} on {compared} expectations:\n{report}"
    )


def test_every_labelled_expectation_is_still_graded():
    """The calibration labels are keyed by expectation text: a task edit that renames one loses its label."""
    _, lines = disagreements()
    assert not [line for line in lines if "no longer graded" in line]


def test_the_calibration_answers_cover_the_tasks_the_readme_names():
    _labels()
    ids = {r["id"] for r in read_answers(CALIBRATION / "answers_with_A.jsonl")}
    assert len(ids) == 31 and ids <= {t["id"] for t in load_tasks()}
    assert Path(CALIBRATION / "README.md").read_text().count("31 of the tasks") == 1
