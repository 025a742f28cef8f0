"""evals/evals.json: schema, coverage, and every expected value recomputed by the engine."""

from __future__ import annotations

import copy
import json
from collections import Counter

import jsonschema
import pytest

from moe_long_context.errors import InputError
from moe_long_context.evals.build import build, evaluate, render, run_call
from moe_long_context.evals.tasks import EVALS_JSON, SCHEMA_JSON, load_tasks, schema, validate
from moe_long_context.faces.registry import TOOLS_BY_NAME
from moe_long_context.model.catalog import models

TASKS = load_tasks()
POSITIVE = [t for t in TASKS if t["expected_skill"]]
NEGATIVE = [t for t in TASKS if t["expected_skill"] is None]


def results_of(task):
    return {name: run_call(call) for name, call in task["engine_calls"].items()}


def test_the_schema_is_valid_draft_2020_12_and_accepts_the_file():
    jsonschema.Draft202012Validator.check_schema(schema())
    assert schema()["$schema"].endswith("2020-12/schema")
    validate(json.loads(EVALS_JSON.read_text()))


@pytest.mark.parametrize(
    "break_it, words",
    [
        (lambda ts: ts[0].pop("expected_behavior"), "expected_behavior"),
        (lambda ts: ts[0].update(category="misc"), "category"),
        (
            lambda ts: next(t for t in reversed(ts) if t["expected_skill"] is None)["checks"].pop(1),
            "needs skill_not_used",
        ),  # a negative task must check the skill was not used
        (lambda ts: ts[0]["checks"].append({"type": "number", "text": "x", "value": 3}), "checks"),
        (
            lambda ts: ts[0]["checks"].append({"type": "required", "text": "x", "pattern": "(unclosed"}),
            "checks",
        ),
        (lambda ts: ts.append(copy.deepcopy(ts[0])), "repeats the task id"),
        (lambda ts: ts.__delitem__(slice(39, None)), "(top level)"),
    ],
)
def test_the_schema_refuses_broken_files(break_it, words):
    tasks = copy.deepcopy(TASKS)
    break_it(tasks)
    with pytest.raises(InputError) as exc:
        validate(tasks)
    assert words in str(exc.value)


def test_negative_tasks_are_null_skill_and_positive_tasks_have_precision_checks():
    assert NEGATIVE and all(t["category"] == "negative" for t in NEGATIVE)
    for t in POSITIVE:
        kinds = {c["type"] for c in t["checks"]}
        assert kinds & {"forbidden", "lint_precision"}, t["id"]
        assert kinds & {"required", "number", "layouts", "lint_error"}, t["id"]
    assert all(t["expected_script"] is None for t in TASKS)


def test_coverage_of_the_brief():
    assert len(TASKS) >= 40 and len(NEGATIVE) >= 8
    counts = Counter(t["category"] for t in TASKS)
    for category in schema()["$defs"]["task"]["properties"]["category"]["enum"]:
        assert counts[category] >= 3, category
    planned = {t["engine_calls"]["plan"]["arguments"]["model"] for t in TASKS if t["category"] == "planning"}
    assert planned == {m.id for m in models()}  # planning from scratch for every catalog model
    lengths = {c["arguments"].get("seq_len") for t in TASKS for c in t["engine_calls"].values()}
    assert {200000, 100000, 49152} <= lengths  # sequence lengths that are not powers of two
    layers = {m.id: m.num_layers for m in models()}
    uneven = {layers[c["arguments"]["model"]] for t in TASKS if t["category"] == "pipeline"
              for c in t["engine_calls"].values()}  # fmt: skip
    assert {61, 94} <= uneven
    dialects = {k for t in TASKS if t["category"] == "lint" for k in t["engine_calls"]["lint"]["arguments"]}
    assert {"megatron_args", "bridge_overrides", "config"} <= dialects


def test_the_committed_file_is_what_the_engine_builds_today():
    assert render(build()) == EVALS_JSON.read_text(), "run `moe-lc eval build` and commit evals/evals.json"


@pytest.mark.parametrize(
    "task", [t for t in TASKS if any(c["type"] == "number" for c in t["checks"])], ids=str
)
def test_every_expected_number_is_the_engines(task):
    results = results_of(task)
    for check in (c for c in task["checks"] if c["type"] == "number"):
        assert "source" in check, f"{check['text']}: a number must come from an engine call"
        assert evaluate(results, check["source"]["expr"]) == check["value"], check["text"]


@pytest.mark.parametrize("task", [t for t in TASKS if t["category"] == "lint"], ids=lambda t: t["id"])
def test_lint_tasks_expect_exactly_the_engines_errors(task):
    call = task["engine_calls"]["lint"]
    pasted = (
        call["arguments"].get("megatron_args")
        or call["arguments"].get("bridge_overrides")
        or call["arguments"]["config"]
    )
    assert pasted in task["question"]
    result = TOOLS_BY_NAME["lint_config"].call(call["arguments"])
    engine = {f.code for f in result.findings if f.severity == "error"}
    expected = {c["code"] for c in task["checks"] if c["type"] == "lint_error"}
    assert expected == engine and len(engine) >= 3  # several errors each, every one confirmed
    precision = next(c for c in task["checks"] if c["type"] == "lint_precision")
    assert set(precision["reported_codes"]) == {f.code for f in result.findings}


def test_build_refuses_a_planted_error_the_engine_does_not_report(tmp_path):
    source = (EVALS_JSON.parent / "tasks.yaml").read_text()
    broken = source.replace(
        "planted: [VPP_NEEDS_PP, CP_HIERARCHY_REQUIRED, MOE_PAD_NEEDS_CAPACITY]",
        "planted: [VPP_NEEDS_PP, CP_HIERARCHY_REQUIRED, MOE_PAD_NEEDS_CAPACITY, EP_DIVIDES_EXPERTS]",
    )
    assert broken != source
    (tmp_path / "tasks.yaml").write_text(broken)
    with pytest.raises(InputError, match=r"lint-mixtral-megatron-lm.*not the engine's errors"):
        build(tmp_path / "tasks.yaml")


def test_schema_file_is_the_one_loaded():
    assert json.loads(SCHEMA_JSON.read_text()) == schema()


@pytest.mark.parametrize(
    "text, words",
    [
        ("tasks: [\n  - {id: x\n", "valid YAML"),
        ("[]\n", "a 'tasks' list"),
        ("tasks:\n  - {id: x, category: cp-sizing}\n", "task 'x': KeyError"),
        (
            "tasks:\n  - id: y\n    category: cp-sizing\n    question: q\n    ground_truth: '${cp.nope}'\n"
            "    expected_behavior: [b]\n    checks: []\n    calls:\n"
            "      cp: {tool: size_cp, arguments: {model: deepseek-v3, seq_len: 8192}}\n",
            "task 'y': KeyError 'nope'",
        ),
    ],
)
def test_build_refuses_broken_sources_with_one_line(tmp_path, text, words):
    (tmp_path / "tasks.yaml").write_text(text)
    with pytest.raises(InputError) as exc:
        build(tmp_path / "tasks.yaml")
    assert words in str(exc.value) and "\n" not in str(exc.value)
