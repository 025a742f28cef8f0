"""Recorded runs next to the reference agent, the harder task set, and tasks that wait on another issue's fix."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from moe_long_context.errors import InputError
from moe_long_context.evals.build import build_task
from moe_long_context.evals.recorded import grade_recorded, recorded_differences, spec_from_args
from moe_long_context.evals.report import render_benchmark
from moe_long_context.evals.tasks import BENCHMARK_JSON, TASKS_YAML, load_tasks

TASKS = load_tasks()
NEW_CATEGORIES = ("runs-as-written", "fails-as-written", "public-scripts", "planning-headroom", "throughput")


def _answers(tmp_path, rows) -> str:
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_recorded_run_is_graded_and_shown_with_its_name_date_and_coverage(tmp_path):
    with_skill = _answers(
        tmp_path,
        [
            {
                "id": "cp-qwen3-235b-200k-h100",
                "answer": "CP = 32 (200000 is not divisible by 2 x 64 = 128); 6250 tokens per CP rank; "
                "a2a+p2p with [4, 8].",
                "tool_calls": [{"name": "size_cp", "arguments": {}}],
            }
        ],
    )
    spec = spec_from_args("some agent", "2026-11-30", with_skill, None)
    rec = grade_recorded(spec, TASKS)
    assert rec["tasks_covered"] == 1 and rec["tasks_in_evals"] == len(TASKS)
    assert rec["run_summary"]["with_skill"]["outcome_pass_rate"]["mean"] == 1.0
    benchmark = json.loads(BENCHMARK_JSON.read_text())
    benchmark["recorded_runs"] = [rec]
    page = render_benchmark(benchmark)
    assert "## Recorded run: some agent (2026-11-30)" in page
    assert f"It covers 1 tasks of the {len(TASKS)} in the evals file" in page
    assert recorded_differences(benchmark, benchmark) == []
    changed = json.loads(json.dumps(benchmark))
    changed["recorded_runs"][0]["runs"][0]["expectations"][0]["passed"] = False
    assert recorded_differences(changed, benchmark)


@pytest.mark.parametrize(
    "args",
    [
        ("name", None, "x.jsonl", None),
        (None, "2026-11-30", "x.jsonl", None),
        ("name", "30 Nov", "x.jsonl", None),
    ],
)
def test_half_a_recorded_run_is_refused(args):
    with pytest.raises(InputError):
        spec_from_args(*args)
    assert spec_from_args(None, None, None, None) is None


def test_the_report_command_adds_a_recorded_run(tmp_path):
    answers = _answers(
        tmp_path, [{"id": "neg-bert-sentiment", "answer": "Batch size 32, learning rate 2e-5."}]
    )
    out, bench = tmp_path / "B.md", tmp_path / "b.json"
    cmd = [
        sys.executable,
        "-m",
        "moe_long_context.cli",
        "eval",
        "report",
        str(BENCHMARK_JSON),
        "--out",
        str(out),
    ]
    cmd += [
        "--recorded-name",
        "an agent",
        "--recorded-date",
        "2026-12-01",
        "--recorded-without",
        str(answers),
    ]
    cmd += ["--benchmark-out", str(bench)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "Recorded run: an agent (2026-12-01)" in out.read_text()
    (mine,) = [r for r in json.loads(bench.read_text())["recorded_runs"] if r["name"] == "an agent"]
    assert mine["tasks_covered"] == 1


def test_the_harder_tasks_are_there_in_their_own_categories_each_with_false_claims():
    assert len(TASKS) >= 88
    new = [t for t in TASKS if t["category"] in NEW_CATEGORIES]
    assert len(new) >= 25 and {t["category"] for t in new} == set(NEW_CATEGORIES)
    for task in new:
        precision = [c for c in task["checks"] if c["type"] in ("forbidden", "lint_precision")]
        named = [c for c in precision if c["type"] == "forbidden" or c.get("invented")]
        assert named, f"{task['id']} forbids no false claim"


def test_tasks_waiting_on_an_engine_fix_are_marked_and_their_truth_is_written():
    source = yaml.safe_load(TASKS_YAML.read_text())["tasks"]
    waiting = [t for t in source if t.get("depends_on")]
    assert waiting and all(t["depends_on"].startswith("issue-") for t in waiting)
    for task in waiting:
        lint = [c["lint"] for c in task["checks"] if "lint" in c]
        assert lint and all("planted_today" in spec for spec in lint), task["id"]
        assert any(
            "after_fix" in (v if isinstance(v, dict) else {}) for c in task["checks"] for v in c.values()
        )


def test_a_task_builds_as_the_truth_requires_once_the_engine_gives_it():
    """A depends_on task whose `planted` (the truth) the engine already reports builds with its after_fix checks;
    the same task while the engine still reports planted_today builds without them."""
    source = yaml.safe_load(TASKS_YAML.read_text())
    base = next(t for t in source["tasks"] if t["id"] == "fw-qwen3-235b-200000-tokens-cp64")
    extra = {"forbidden": {"after_fix": True, "text": "Does not call it fine", "pattern": "it\\s+is\\s+fine"}}
    fixed = {**base, "depends_on": "issue-0", "checks": [*base["checks"], extra]}
    fixed["checks"][0] = {"lint": {**base["checks"][0]["lint"], "planted_today": []}}
    waiting = json.loads(json.dumps(fixed))
    waiting["checks"][0]["lint"]["planted"] = ["SEQ_CP_DIVISIBILITY", "EP_DIVIDES_EXPERTS"]
    waiting["checks"][0]["lint"]["planted_today"] = ["SEQ_CP_DIVISIBILITY"]
    for name, task, has_extra in (("fixed", fixed, True), ("waiting", waiting, False)):
        built = build_task(task)
        assert any(c["text"] == "Does not call it fine" for c in built["checks"]) is has_extra, name
        assert [c["code"] for c in built["checks"] if c["type"] == "lint_error"] == ["SEQ_CP_DIVISIBILITY"]
    today_wrong = json.loads(json.dumps(waiting))
    today_wrong["checks"][0]["lint"]["planted_today"] = ["EP_DIVIDES_EXPERTS"]
    with pytest.raises(InputError):
        build_task(today_wrong)
