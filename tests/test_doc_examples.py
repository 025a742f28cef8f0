"""Every example in README.md, SKILL.md and references/ runs here and gives what the text says.

README's ``sh`` blocks are read line by line and every command is accounted for: the CLI examples run as
written through bash (so their quoting is real) in a folder holding the files they name, and their exit
code and the values written under them (``#   exit N: key value, ...``, read from ``--json``) are checked;
``make run`` runs; the other make goals run ``make -n`` (each has its own test: make test is this suite,
conformance, check-node and the evals theirs); the benchmarks run with small counts; the install blocks are
tests/test_readme_install.py's; the servers start and answer. The examples written in prose (SKILL.md's
three, README's error messages) are called as they describe. references/ holds no commands: its numbers are
checked by tests/test_skill_docs.py, and a command added there fails this test until it is run here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
from scripts import readme_install

from moe_long_context.engine.pipeline import parse_layout
from moe_long_context.faces.registry import TOOLS_BY_COMMAND, TOOLS_BY_NAME
from moe_long_context.faces.server import run_tool, server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
SKILL = (ROOT / "SKILL.md").read_text(encoding="utf-8")


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def commands(block: str) -> list[tuple[str, str]]:
    """(command, what the lines under it say) for each command of a block: continuations joined, a trailing
    comment dropped, the ``#   exit ...`` lines after it kept as its expectation."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in block.splitlines():
        if line.startswith("#"):
            if out:
                out[-1] = (out[-1][0], (out[-1][1] + " " + line.lstrip("# ")).strip())
            continue
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            command = re.sub(r"\s+#\s.*$", "", pending).strip()
            if command:
                out.append((" ".join(command.split()), ""))
            pending = ""
    return out


VALUE = r'"[^"]*"|\[[^\]]*\]|[^\s,()]+'
EXPECTATION = re.compile(rf"(?:finding (?P<code>[A-Z0-9_]+))|(?P<key>[a-z_][\w.]*) (?P<value>{VALUE})")


def expectation(text: str) -> tuple[int, list[tuple[str, object]]]:
    """``exit N[ ...]: key value, key value, finding CODE (remarks)`` -> (N, [(key, value) or ('finding', code)])."""
    m = re.match(r"exit (\d+)[^:]*:?(.*)", text)
    assert m, f"an example without its expected exit code: {text!r}"
    body = re.sub(r"\([^)]*\)", "", m.group(2))  # remarks in parentheses
    checks: list[tuple[str, object]] = []
    for text_item in _items(body):
        item = EXPECTATION.fullmatch(text_item)
        assert item, f"not a check (key value, or finding CODE; remarks go in parentheses): {text_item!r}"
        if item["code"]:
            checks.append(("finding", item["code"]))
        else:
            raw = item["value"]
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = raw
            checks.append((item["key"], value))
    return int(m.group(1)), checks


def _items(body: str) -> list[str]:
    """Comma-separated items, a comma inside [ ] or quotes not separating."""
    items, depth, quoted, current = [], 0, False, ""
    for ch in body:
        depth += (ch == "[") - (ch == "]") if not quoted else 0
        quoted ^= ch == '"'
        if ch == "," and not depth and not quoted:
            items.append(current)
            current = ""
        else:
            current += ch
    return [i.strip() for i in [*items, current] if i.strip()]


def lookup(data: object, path: str) -> object:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder with the files the examples name: launch.sh, config.json, answers and recorded runs."""
    folder = tmp_path_factory.mktemp("examples")
    shutil.copy(ROOT / "tests/data/dsv3_128k_h100.sh", folder / "launch.sh")
    shutil.copy(ROOT / "tests/data/hf/glm-4.6.json", folder / "config.json")
    (folder / "evals").mkdir()
    shutil.copy(ROOT / "evals/benchmark.json", folder / "evals/benchmark.json")
    task = json.loads((ROOT / "evals/evals.json").read_text())[0]["id"]
    for name, used in (("answers.jsonl", True), ("with.jsonl", True), ("without.jsonl", False)):
        answer = {"id": task, "answer": "CP 32 with a2a+p2p [8, 4]", "tool_calls": [], "used_skill": used}
        (folder / name).write_text(json.dumps(answer) + "\n")
    agent = folder / "bin" / "my-agent"
    agent.parent.mkdir()
    agent.write_text("#!/bin/sh\ncat > /dev/null\necho 'CP 32 with a2a+p2p, hierarchical sizes [8, 4].'\n")
    agent.chmod(0o755)
    return folder


def bash(command: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{cwd / 'bin'}:{BIN}:{os.environ['PATH']}"}
    for key in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"):  # make run as a user types it
        env.pop(key, None)
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


# --------------------------------------------------------------------------- README's sh blocks


def readme_commands() -> list[tuple[str, str]]:
    return [c for block in sh_blocks(README) for c in commands(block)]


def kind(command: str) -> str:
    """Which test runs a README command."""
    words = command.split()
    if words[0] == "moe-lc" and words[1] in TOOLS_BY_COMMAND:
        return "tool"
    if words[0] == "moe-lc" and words[1] in ("models", "gpus", "rules"):
        return "catalog"
    if words[0] == "moe-lc":
        return words[1]  # serve, eval
    if words[0] == "make":
        return "make run" if words[1] == "run" else "make"
    if "benchmarks." in command:
        return "benchmark"
    return "install"


def test_every_readme_command_is_run_by_a_test():
    found = {kind(c) for c, _ in readme_commands()}
    assert found == {"tool", "catalog", "serve", "eval", "make run", "make", "benchmark", "install"}
    install = {c for c, _ in readme_commands() if kind(c) == "install"}
    blocks = readme_install.install_blocks()  # tests/test_readme_install.py runs both blocks as written
    assert install == {
        " ".join(line.split("#")[0].split()) for b in blocks.values() for line in b.splitlines()
    }


TOOL_EXAMPLES = [c for c in readme_commands() if kind(c[0]) in ("tool", "catalog")]


@pytest.mark.parametrize(("command", "expected"), TOOL_EXAMPLES, ids=[c[:60] for c, _ in TOOL_EXAMPLES])
def test_readme_cli_example(workdir, command, expected):
    proc = bash(command, workdir)
    assert "Traceback" not in proc.stderr, proc.stderr
    if kind(command) == "catalog":
        assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
        return
    code, checks = expectation(expected)
    assert proc.returncode == code, (command, proc.returncode, proc.stderr[-2000:])
    if not checks:
        return
    data = json.loads(bash(command + " --json", workdir).stdout)
    for key, value in checks:
        if key == "finding":
            assert value in [f["code"] for f in data["findings"]], (command, value)
        elif isinstance(value, float):
            assert lookup(data, key) == pytest.approx(value, abs=5e-4), (command, key)
        else:
            assert lookup(data, key) == value, (command, key, lookup(data, key))
    if "--report" in command:
        report = workdir / command.split("--report ")[1].split()[0]
        assert report.read_text().startswith("<!DOCTYPE html>")


def test_readme_failing_examples_sit_next_to_their_fix():
    """An example that exits 1 names its error, and the command next to it is the same one, fixed (exit 0)."""
    examples = [c for c in readme_commands() if kind(c[0]) == "tool"]
    failing = [i for i, (_, expected) in enumerate(examples) if expectation(expected)[0] == 1]
    assert len(failing) == 2  # check-dp-budget without the layout, validate-cuda-graphs without account-for
    for i in failing:
        command = examples[i][0]
        assert "finding" in [k for k, _ in expectation(examples[i][1])[1]]
        fixed = [examples[j][0] for j in (i - 1, i + 1) if 0 <= j < len(examples)
                 and expectation(examples[j][1])[0] == 0 and examples[j][0].split()[1] == command.split()[1]]  # fmt: skip
        assert fixed and set(command.split()) < set(fixed[0].split()), command


def test_make_run_runs_as_the_readme_says(tmp_path):
    proc = bash("make run", ROOT, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for step in range(1, 5):
        assert f"### {step}." in out
    lint = out.split("### 3.")[1].split("### 4.")[0]
    assert re.search(r"^valid\s+True$", lint, re.M), lint[:2000]  # the top plan's quoted arguments lint clean
    assert (ROOT / "build" / "plan.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("goal", sorted({c.split()[1] for c, _ in readme_commands() if kind(c) == "make"}))
def test_readme_make_goal_exists(goal):
    """The long goals (the suite itself, conformance, node checks, evals) have their own tests; here: that
    each is a goal of the Makefile whose recipe expands."""
    proc = bash(f"make -n {goal}", ROOT)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr


BENCHMARKS = {
    "benchmarks.estimate_memory": ["--repeat", "2"],
    "benchmarks.plan_layout": ["--repeat", "1", "--cold-runs", "1", "--cli-runs", "0"],
    "benchmarks.bench_server": ["--calls", "2", "--starts", "1"],
}


@pytest.mark.parametrize("script", sorted(BENCHMARKS))
def test_readme_benchmarks_run(script):
    """As written, with small counts (their timings are the machine's, not the text's)."""
    assert any(script in c for c, _ in readme_commands())
    proc = subprocess.run(
        [sys.executable, "-m", script, *BENCHMARKS[script]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0 and "ms" in proc.stdout, proc.stderr[-2000:]


def test_readme_eval_examples(workdir):
    """grade and report run as written; run as written too, with one task and its outputs kept in the folder
    (as written it rewrites the repository's BENCHMARK.md)."""
    evals = [c for c, _ in readme_commands() if kind(c) == "eval"]
    assert [c.split()[2] for c in evals] == ["grade", "run", "report"]
    grade, run, report = evals
    proc = bash(grade, workdir)
    assert proc.returncode == 0 and (workdir / "graded" / "summary.json").exists(), proc.stderr
    proc = bash(report, workdir)
    assert proc.returncode == 0 and "my agent" in (workdir / "BENCHMARK.md").read_text(), proc.stderr
    task = json.loads((workdir / "answers.jsonl").read_text())["id"]
    extra = f" --ids {task} --out runs --benchmark-md runs/BENCHMARK.md --results runs/benchmark.json"
    proc = bash(run + extra, workdir)
    assert proc.returncode == 0 and (workdir / "runs" / "benchmark.json").exists(), proc.stderr[-2000:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_readme_serve_examples():
    """stdio as .mcp.json runs it, and streamable HTTP at the address given (another free port here)."""
    serves = [c for c, _ in readme_commands() if kind(c) == "serve"]
    assert serves == ["moe-lc serve", "moe-lc serve --http 127.0.0.1:8765"]

    async def stdio():
        params = StdioServerParameters(command=str(BIN / "moe-lc"), args=["serve"])
        async with Client(params, mode="legacy") as client:
            return len((await client.list_tools()).tools)

    assert anyio.run(stdio) == len(TOOLS_BY_NAME)
    port = _free_port()
    proc = subprocess.Popen(
        [str(BIN / "moe-lc"), "serve", "--http", f"127.0.0.1:{port}"], stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.2)

        async def http():
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
                return len((await client.list_tools()).tools)

        assert anyio.run(http) == len(TOOLS_BY_NAME)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --------------------------------------------------------------------------- examples in prose


def test_readme_error_examples_are_what_the_server_says():
    from mcp.server.mcpserver.exceptions import ToolError

    quoted = re.findall(r"`(size_cp: model=[^`]+)`", " ".join(README.split()))
    assert len(quoted) == 2
    for text in quoted:
        model = re.match(r"size_cp: model='([^']+)'", text).group(1)
        with pytest.raises(ToolError) as caught:
            run_tool(TOOLS_BY_NAME["size_cp"], {"model": model, "seq_len": 8192})
        said = str(caught.value)
        head, _, tail = text.partition("...")
        assert said.startswith(head.strip()) and said.endswith(tail.strip()), (text, said)
    with pytest.raises(ToolError, match="seq_len=True is not allowed"):
        run_tool(TOOLS_BY_NAME["size_cp"], {"model": "deepseek-v3", "seq_len": True})


def test_readme_prompt_example():
    quoted = re.search(r"`(seq_len='abc' is not allowed: [^`]+)`", README).group(1)

    async def ask():
        async with Client(server) as client:
            args = {"model": "deepseek-v3", "gpu": "h100", "num_gpus": "256", "seq_len": "abc"}
            with pytest.raises(MCPError) as caught:
                await client.get_prompt("plan_long_context_moe", args)
            return str(caught.value)

    assert quoted in anyio.run(ask)


def test_skill_example_plan_deepseek_v3():
    """ "Call plan_layout with deepseek-v3, h100, 256 GPUs, 131072 tokens": plans with their peak against the
    79.11 GiB of an H100, the published layout compared, and each plan's overrides."""
    example = SKILL.split('**"DeepSeek-V3 at 128K on 256 H100s: what layout?"**')[1].split("**")[0]
    assert "`deepseek-v3`, `h100`, 256\nGPUs, 131072 tokens" in example and "79.11 GiB" in example
    r = TOOLS_BY_NAME["plan_layout"].call(
        {"model": "deepseek-v3", "gpu": "h100", "num_gpus": 256, "seq_len": 131072}
    )
    assert r.valid and r.plans and r.references
    assert all(p.memory.usable_gib == 79.11 and p.bridge_overrides and p.megatron_args for p in r.plans)


def test_skill_example_why_does_this_launch_fail():
    """The errors it names, with their flags and fixes, and the refusals of what is not a launch."""
    example = SKILL.split('**"Why does this launch fail?"**')[1].split("**")[0]
    for code in ("RECOMPUTE_UNKNOWN_MODULE", "PP_LAYERS_NOT_DIVISIBLE"):
        assert f"`{code}`" in example
    script = (ROOT / "tests/data/dsv3_128k_h100.sh").read_text()
    broken = script.replace("mla_up_proj layernorm", "up_proj layernorm").replace(
        "--pipeline-model-parallel-layout 'Et|(tt|)*30mL'", ""
    )
    lint = TOOLS_BY_NAME["lint_config"]
    r = lint.call({"megatron_args": broken, "gpu": "h100"})
    found = {f.code: f for f in r.findings}
    assert found["RECOMPUTE_UNKNOWN_MODULE"].keys == ["--recompute-modules"]
    assert "'mla_up_proj'" in found["RECOMPUTE_UNKNOWN_MODULE"].fix
    layout = re.search(r"pipeline_layout=(\S+)", found["PP_LAYERS_NOT_DIVISIBLE"].fix).group(1)
    parse_layout(layout)  # the layout string to use
    assert r.not_checked and r.corrected_memory is not None and r.remaining_errors == []
    assert "mla_up_proj" in r.corrected and not re.search(r"(?<!mla_)up_proj", r.corrected)
    from moe_long_context.errors import InputError

    for bad in ("", "no flag here", "/path/to/launch.sh", "--tensor-model-parallel-size two"):
        with pytest.raises(InputError) as caught:
            lint.call({"megatron_args": bad, "model": "deepseek-v3"})
        assert "\n" not in str(caught.value)
    assert "--cuda-graph-modules" in example  # Megatron Core 0.19 defines it: no unknown-flag error
    r = lint.call({"megatron_args": script + " --cuda-graph-impl transformer_engine --cuda-graph-modules attn",
                   "gpu": "h100"})  # fmt: skip
    assert "LM_UNKNOWN_FLAG" not in [f.code for f in r.findings]


def test_skill_example_cuda_graphs_qwen3():
    """Captures with transformer_engine attn, moe_router, moe_preprocess; moe recompute conflicts."""
    from server_cases import QWEN3_128K

    example = SKILL.split('**"Can I use CUDA graphs with Qwen3-235B at 128K on GB200?"**')[1]
    assert all(f"`{m}`" in example for m in ("transformer_engine", "attn", "moe_router", "moe_preprocess"))
    graphs = TOOLS_BY_NAME["validate_cuda_graph_shapes"]
    args = {k: v for k, v in QWEN3_128K.items() if k in graphs.request.model_fields}
    r = graphs.call(args)
    assert r.valid and r.cuda_graph_modules == ["attn", "moe_router", "moe_preprocess"]
    assert r.captured_shapes and r.static_requirements  # the static shape it freezes, what must stay fixed
    r = graphs.call({**args, "recompute_granularity": "selective", "recompute_modules": ["moe"]})
    assert "GRAPH_MOE_RECOMPUTE_ROUTER" in [f.code for f in r.findings]


def test_references_hold_no_command_that_is_not_run():
    for page in (ROOT / "references").glob("*.md"):
        text = page.read_text(encoding="utf-8")
        if text.startswith("<!-- Generated"):
            continue  # rules.md, tools.md, families.md: made from the engine
        assert "```" not in text, f"{page.name}: a code block; run its commands in tests/test_doc_examples.py"
        assert not re.search(r"`moe-lc [a-z]", text), f"{page.name}: a command; run it in this test"


def test_every_layout_resource_the_docs_name_is_served():
    named = set()
    for doc in (
        "SKILL.md",
        "card.yaml",
        *(f"references/{p.name}" for p in (ROOT / "references").glob("*.md")),
    ):
        named |= set(re.findall(r"moe-lc://layouts/([\w.-]+)", (ROOT / doc).read_text()))
    named.discard("ID")
    assert len(named) >= 7

    async def read_all():
        async with Client(server) as client:
            return {n: json.loads((await client.read_resource(f"moe-lc://layouts/{n}")).contents[0].text)
                    for n in named}  # fmt: skip

    for name, arguments in anyio.run(read_all).items():
        assert TOOLS_BY_NAME["estimate_memory"].call(arguments).peak_gib, name
