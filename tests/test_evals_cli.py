"""`moe-lc eval grade / run / build / report`: files in skill-creator's layout, and clean refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from moe_long_context.cli import main
from moe_long_context.evals.report import render_benchmark
from moe_long_context.evals.tasks import BENCHMARK_JSON, BENCHMARK_MD, REPO

RIGHT = (
    "size_cp: CP = 32, cp_comm_type a2a+p2p with hierarchical_cp_sizes [8, 4]; 4096 tokens per CP rank. "
    "EP folds into DP x CP."
)

# A stand-in agent: right with the skill (and says it called size_cp), vague without it.
FAKE_AGENT = f"""
import json, os, sys
question = sys.stdin.read()
skill = os.environ["MOE_LC_EVAL_WITH_SKILL"] == "1"
if "131072-token" in question and skill:
    print({RIGHT!r})
    calls = [{{"name": "size_cp", "arguments": {{"seq_len": 131072}}}}]
elif "vLLM" in question:
    print("This is about vLLM serving; the long-context MoE skill does not apply.")
    calls = []
else:
    print("Use context parallelism and selective recompute.")
    calls = []
with open(os.environ["MOE_LC_EVAL_TRANSCRIPT"], "w") as out:
    json.dump({{"tool_calls": calls, "used_skill": bool(calls), "total_tokens": 100 if skill else 10}}, out)
"""
IDS = "cp-dsv3-128k-h100,neg-vllm-llama-70b-serving,lint-kimi-k2-config"


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_grade_writes_grading_json(tmp_path, capsys):
    answers = tmp_path / "answers.jsonl"
    records = [
        {"id": "cp-dsv3-128k-h100", "answer": RIGHT, "tool_calls": [{"name": "size_cp", "arguments": {}}]},
        {"id": "cp-dsv3-128k-h100", "answer": "CP = 64"},
    ]
    answers.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    code, out, _ = run(capsys, "eval", "grade", str(answers), "--out", str(tmp_path / "g"))
    assert code == 0 and "1 of 2 answers pass every check" in out
    first = json.loads((tmp_path / "g/eval-cp-dsv3-128k-h100/run-1/grading.json").read_text())
    second = json.loads((tmp_path / "g/eval-cp-dsv3-128k-h100/run-2/grading.json").read_text())
    assert first["summary"]["failed"] == 0 and second["summary"]["passed"] < second["summary"]["total"]
    summary = json.loads((tmp_path / "g/summary.json").read_text())
    assert summary["tasks_passed"] == 1 and summary["answers"] == 2


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "a readable JSONL file"),
        ("{oops\n", "answers.jsonl:1: not JSON"),
        ('{"id": "no-such-task", "answer": ""}\n', "unknown task id 'no-such-task'"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, content, words):
    path = tmp_path / "answers.jsonl"
    if content is not None:
        path.write_text(content)
    code, _, err = run(capsys, "eval", "grade", str(path))
    assert code == 2 and words in err and err.count("\n") == 1


def test_run_writes_the_workspace_benchmark_and_page(tmp_path, capsys):
    agent = tmp_path / "agent.py"
    agent.write_text(FAKE_AGENT)
    md, results = tmp_path / "BENCHMARK.md", tmp_path / "benchmark.json"
    argv = ["eval", "run", "--agent-cmd", f"{sys.executable} {agent}", "--agent-name", "fake", "--ids", IDS,
            "--out", str(tmp_path / "ws"), "--benchmark-md", str(md), "--results", str(results), "--jobs", "2"]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    it = tmp_path / "ws/iteration-1"
    for task_id in IDS.split(","):
        meta = json.loads((it / f"eval-{task_id}/eval_metadata.json").read_text())
        assert meta["eval_id"] == task_id and meta["prompt"] and meta["assertions"]
        for configuration in ("with_skill", "without_skill"):
            run_dir = it / f"eval-{task_id}/{configuration}/run-1"
            assert (run_dir / "outputs/answer.md").read_text()
            timing = json.loads((run_dir / "timing.json").read_text())
            assert set(timing) == {"total_tokens", "duration_ms", "total_duration_seconds"}
            grading = json.loads((run_dir / "grading.json").read_text())
            assert {"expectations", "summary"} <= set(grading)
    bench = json.loads(results.read_text())
    assert bench == json.loads((it / "benchmark.json").read_text())
    summary = bench["run_summary"]
    assert set(summary["with_skill"]) == {
        "pass_rate",
        "outcome_pass_rate",
        "process_pass_rate",
        "time_seconds",
        "tokens",
    }
    assert set(summary["with_skill"]["pass_rate"]) == {"mean", "stddev", "min", "max"}
    assert summary["delta"]["pass_rate"].startswith("+") and summary["with_skill"]["tokens"]["mean"] == 100
    run_keys = {"eval_id", "configuration", "run_number", "result", "expectations", "notes"}
    assert all(run_keys <= set(r) for r in bench["runs"]) and len(bench["runs"]) == 6
    assert [r["eval_id"] for r in bench["runs"][:2]] == [
        "cp-dsv3-128k-h100"
    ] * 2  # task order, not finish order
    cp = next(
        r for r in bench["runs"] if r["eval_id"] == "cp-dsv3-128k-h100" and r["configuration"] == "with_skill"
    )
    assert cp["task_passed"] and cp["result"]["tool_calls"] == 1
    assert bench["breakdown"]["negative"]["with_skill"]["declined"] == 1
    assert bench["breakdown"]["lint"]["with_skill"] == {"runs": 1, "errors": 4, "found": 0, "false_claims": 0,
                                                         "recall": 0.0, "precision": 0.0}  # fmt: skip
    page = md.read_text()
    assert page == render_benchmark(bench)
    assert run(capsys, "eval", "report", str(results), "--out", str(md), "--check")[0] == 0
    md.write_text(page + "edited by hand\n")
    assert run(capsys, "eval", "report", str(results), "--out", str(md), "--check")[0] == 1
    assert "| Lint: launch scripts and override lists | 1 |" in page and "Agent: `fake`" in page
    # the same run again agrees with itself; a tampered copy does not
    code, out, _ = run(capsys, *argv[:-6], "--out", str(tmp_path / "ws"), "--check-against", str(results))
    assert code == 0 and "scores match" in out
    bench["runs"][0]["result"]["passed"] -= 1
    results.write_text(json.dumps(bench))
    code, _, err = run(capsys, *argv[:-6], "--out", str(tmp_path / "ws"), "--check-against", str(results))
    assert code == 1 and "cp-dsv3-128k-h100 [with_skill run 1]" in err


def test_run_refuses_unknown_ids_and_configurations(tmp_path, capsys):
    base = ["eval", "run", "--agent-cmd", "true", "--out", str(tmp_path)]
    code, _, err = run(capsys, *base, "--ids", "nope")
    assert code == 2 and "unknown task id 'nope'" in err
    code, _, err = run(capsys, *base, "--configurations", "with_skil")
    assert code == 2 and "--configurations" in err


def test_a_failing_agent_is_graded_not_fatal(tmp_path, capsys):
    argv = ["eval", "run", "--agent-cmd", "exit 3", "--ids", "cp-dsv3-128k-h100", "--out", str(tmp_path),
            "--configurations", "with_skill", "--results", str(tmp_path / "b.json"), "--benchmark-md", str(tmp_path / "b.md")]  # fmt: skip
    code, _, _ = run(capsys, *argv)
    bench = json.loads((tmp_path / "b.json").read_text())
    assert (
        code == 0
        and bench["runs"][0]["result"]["errors"] == 1
        and bench["runs"][0]["result"]["pass_rate"] == 0
    )
    assert "delta" not in bench["run_summary"]
    assert "the agent command failed (non-zero exit or timeout) in 1 runs" in " ".join(bench["notes"])


def test_build_check_and_report_errors(capsys, tmp_path):
    assert run(capsys, "eval", "build", "--check")[0] == 0
    code, _, err = run(capsys, "eval", "report", str(tmp_path / "missing.json"))
    assert code == 2 and "readable" in err


def test_eval_without_a_sub_command_shows_help(capsys):
    code, out, _ = run(capsys, "eval")
    assert code == 2 and "grade" in out and "reference-agent" in out


def test_paths_in_the_package_point_at_the_repository():
    assert BENCHMARK_JSON.parent == REPO / "evals" and Path(BENCHMARK_MD) == REPO / "BENCHMARK.md"
    assert (REPO / "pyproject.toml").exists()


def test_the_eval_commands_do_not_import_the_mcp_sdk():
    import subprocess

    code = (
        "import sys, moe_long_context.cli, moe_long_context.evals.runner, moe_long_context.evals.report; "
        "moe_long_context.cli.build_parser(); print('mcp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
