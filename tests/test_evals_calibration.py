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
# Expectations whose value the engine changed on purpose after the answers were recorded: the recorded answers
# (and their human labels) speak of the old value, so they are left out of the comparison, each with the reason.
CHANGED_SINCE_RECORDING = {
    ("rc-pick-dsv3-128k", "States the peak after recompute, 76.925 GiB (within 10%)"): (
        "pick_recompute now picks the cheapest set that fits with the 5 % headroom (67.6 GiB), not the first "
        "set that fits (76.9 GiB)"
    ),
    # the memory model's measured allocator cache and memory outside PyTorch (issue 25) moved these peaks
    **{
        key: "the peaks now include the measured allocator cache and memory outside PyTorch"
        for key in (
            ("off-graphs-memory-dsv3", "States the saving of 14.974 GiB (within 10%)"),
            ("off-graphs-memory-dsv3", "States the peak with offload, 53.52 GiB (within 10%)"),
            ("rc-mla-up-proj-qwen3", "States the peak after recompute, 65.9 GiB (within 10%)"),
            ("rc-pick-dsv3-128k", "States the peak without recompute, 152.129 GiB (within 10%)"),
        )
    },
    ("rc-pick-dsv3-128k", "Recommends layernorm"): (
        "with the measured overhead no selective set fits without optimizer offload; the task now asks with 100 % "
        "offload, where pick_recompute chooses mla_up_proj, mlp and moe"
    ),
}


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
            if (item["id"], label["text"]) in CHANGED_SINCE_RECORDING:
                continue
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
    """The calibration labels are keyed by expectation text: a task edit that renames one loses its label. Only
    the expectations listed in CHANGED_SINCE_RECORDING may be gone, and each of those must really be gone."""
    _, lines = disagreements()
    assert not [line for line in lines if "no longer graded" in line]
    tasks = {t["id"]: t for t in load_tasks()}
    for (task_id, text), why in CHANGED_SINCE_RECORDING.items():
        record = next(r for r in read_answers(CALIBRATION / "answers_with_A.jsonl") if r["id"] == task_id)
        texts = {e["text"] for e in grade(tasks[task_id], record)["expectations"]}
        assert text not in texts, f"{task_id}: {text!r} is graded again; drop it from the list ({why})"


def test_the_calibration_answers_cover_the_tasks_the_readme_names():
    _labels()
    ids = {r["id"] for r in read_answers(CALIBRATION / "answers_with_A.jsonl")}
    assert len(ids) == 31 and ids <= {t["id"] for t in load_tasks()}
    assert Path(CALIBRATION / "README.md").read_text().count("31 of the tasks") == 1
