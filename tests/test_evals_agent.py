"""The reference agent over a real stdio MCP session, and the committed benchmark it produced.

One server process answers every question here (the runner starts one per question, as any agent command
would); the answers are graded and compared with evals/benchmark.json, which BENCHMARK.md is rendered from.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from moe_long_context.evals import agent
from moe_long_context.evals.grader import grade, task_passed
from moe_long_context.evals.report import render_benchmark
from moe_long_context.evals.runner import scores
from moe_long_context.evals.tasks import (
    BENCHMARK_JSON,
    BENCHMARK_MD,
    EVALS_JSON,
    REPO,
    file_digest,
    load_tasks,
)

pytestmark = pytest.mark.slow
TASKS = load_tasks()


async def answer_all() -> dict[str, dict]:
    command, args = agent.server_command()
    out = {}
    async with Client(StdioServerParameters(command=command, args=args), mode="legacy") as client:

        async def call_tool(name, arguments):
            result = await client.call_tool(name, arguments)
            if result.is_error:
                raise agent.ToolFailed(result.content[0].text)
            return result.structured_content

        async def read_resource(uri):
            return (await client.read_resource(uri)).contents[0].text

        for task in TASKS:
            session = await agent.open_session(client.list_tools, call_tool, read_resource)
            text, used = await agent.answer_with_skill(task["question"], session)
            out[task["id"]] = {
                "id": task["id"],
                "answer": text,
                "tool_calls": session.calls,
                "used_skill": used,
            }
    return out


@pytest.fixture(scope="module")
def with_skill():
    import anyio

    return anyio.run(answer_all)


def test_passes_positive_tasks_and_declines_negative_ones(with_skill):
    positive = [t for t in TASKS if t["expected_skill"]]
    passed = [t["id"] for t in positive if task_passed(grade(t, with_skill[t["id"]]))]
    assert len(passed) >= 0.95 * len(positive), sorted({t["id"] for t in positive} - set(passed))
    for t in TASKS:
        record = with_skill[t["id"]]
        if t["expected_skill"] is None:
            assert not record["used_skill"] and not record["tool_calls"], t["id"]
            assert "does not apply" in record["answer"]
        else:
            assert record["used_skill"] and record["tool_calls"], t["id"]


def test_without_the_skill_it_is_a_tool_less_baseline():
    answers = {t["id"]: agent.answer_without_skill(t["question"]) for t in TASKS}
    positive = [t for t in TASKS if t["expected_skill"]]
    summaries = [grade(t, {"id": t["id"], "answer": answers[t["id"]]})["summary"] for t in positive]
    rates = [s["pass_rate"] for s in summaries]
    # rules of thumb earn credit for the false claims they avoid (precision), but not a task, and no tool use
    assert sum(rates) / len(rates) < 0.35 and not any(r == 1.0 for r in rates)
    assert all(s["process"]["passed"] == 0 for s in summaries)


def test_the_agent_does_not_read_the_tasks():
    source = Path(agent.__file__).read_text()
    tree = ast.parse(source)
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"tasks", "grader", "build", "runner"}, imported
    assert "evals.json" not in source and "tasks.yaml" not in source


def test_the_committed_benchmark_is_the_runners_output_for_this_agent(with_skill):
    committed = json.loads(BENCHMARK_JSON.read_text())
    m = committed["metadata"]
    assert m["agent"] == "moe-lc eval reference-agent" and m["agent_command"] == "moe-lc eval reference-agent"
    assert m["evals_sha256"] == file_digest(EVALS_JSON), "evals.json changed: run `make evals` and commit"
    assert m["runs_per_configuration"] == 1 and m["configurations"] == ["with_skill", "without_skill"]
    makefile = (REPO / "Makefile").read_text()
    ci_form = re.search(r"^EVALS_RUN := (.+)$", makefile, re.M).group(1)
    live = "moe-lc " + " ".join(shlex.quote(a) for a in shlex.split(ci_form)[1:])
    assert m["command"] == live or m["command"].startswith(live + " --recorded-name ")
    # make evals adds the calibration answers as the recorded LLM run (31 tasks, with and without the skill)
    recorded = committed.get("recorded_runs", [])
    assert [(r["tasks_covered"], r["configurations"]) for r in recorded] in (
        [],
        [(31, ["with_skill", "without_skill"])],
    )
    assert bool(recorded) == ("--recorded-name" in m["command"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", m["timestamp"])
    # the scores are the ones this agent and this grader give today (times aside)
    fresh = {"runs": []}
    for t in TASKS:
        for configuration, record in (
            ("with_skill", with_skill[t["id"]]),
            (
                "without_skill",
                {"id": t["id"], "answer": agent.answer_without_skill(t["question"]), "tool_calls": []},
            ),
        ):
            g = grade(t, record)
            fresh["runs"].append({"eval_id": t["id"], "configuration": configuration, "run_number": 1,
                                  "result": g["summary"], "expectations": g["expectations"]})  # fmt: skip
    assert scores(fresh) == scores(committed), "scores changed: run `make evals` and commit"
    # and the page is the rendering of that file
    assert BENCHMARK_MD.read_text() == render_benchmark(committed), "BENCHMARK.md is not the runner's output"


def test_reference_agent_command(tmp_path):
    import subprocess

    question = next(t for t in TASKS if t["id"] == "cp-dsv3-128k-h100")["question"]
    transcript = tmp_path / "t.json"
    env = {"PATH": "/usr/bin:/bin", "MOE_LC_EVAL_TRANSCRIPT": str(transcript), "MOE_LC_EVAL_WITH_SKILL": "1"}
    cmd = [sys.executable, "-m", "moe_long_context.cli", "eval", "reference-agent"]
    out = subprocess.run(
        cmd, input=question, capture_output=True, text=True, env=env, check=True, timeout=120
    )
    assert "CP = 32" in out.stdout
    assert [c["name"] for c in json.loads(transcript.read_text())["tool_calls"]] == ["size_cp"]
    env["MOE_LC_EVAL_WITH_SKILL"] = "0"
    out = subprocess.run(cmd, input=question, capture_output=True, text=True, env=env, check=True, timeout=60)
    assert json.loads(transcript.read_text())["tool_calls"] == [] and "no tools used" in out.stdout
    empty = subprocess.run(cmd, input=" ", capture_output=True, text=True, env=env, check=False, timeout=60)
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1


def test_the_reference_agent_reads_the_lora_targets_the_engine_places():
    """The agent is an MCP client and keeps its own copy of the names; they must be the engine's."""
    from moe_long_context.evals.agent_question import LORA_TARGETS as READ
    from moe_long_context.model.lora import LORA_TARGETS

    assert READ == LORA_TARGETS
