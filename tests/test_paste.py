"""Every text a user copies is valid where it is pasted: Megatron-LM arguments in bash (quoted), Bridge
overrides in Hydra's override grammar (and, on a command line, in bash first), from the CLI, the MCP text
and the HTML report (tests/test_report.py); and lint notices an unquoted layout string bash would break."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from moe_long_context.cli import main
from moe_long_context.faces.registry import TOOLS_BY_NAME
from moe_long_context.faces.server import run_tool
from paste import bash_syntax_ok, bash_words, hydra_values
from server_cases import DSV3_NO_RECOMPUTE

ROOT = Path(__file__).resolve().parents[1]
DSV3 = {"model": "deepseek-v3", "gpu": "h100", "num_gpus": 256, "seq_len": 131072}


@cache
def plan() -> dict:
    return TOOLS_BY_NAME["plan_layout"].call({**DSV3, "top_n": 3}).model_dump(mode="json")


def _line(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(label)).removeprefix(label).strip()


def test_the_layout_string_is_what_needs_quoting():
    """The premise: the top plan has a layout with | and ( ), which bash breaks unquoted."""
    args = plan()["plans"][0]["megatron_args"]
    layout = args[args.index("--pipeline-model-parallel-layout") + 1]
    assert "|" in layout and "(" in layout
    assert not bash_syntax_ok(" ".join(args))[0]  # what `make run` used to pass to lint


def test_plan_summary_text_pastes_into_bash_and_hydra():
    top = plan()["plans"][0]
    text = run_tool(TOOLS_BY_NAME["plan_layout"], {**DSV3, "top_n": 3}).content[0].text
    assert bash_words(_line(text, "#1 Megatron-LM args (shell words):")) == top["megatron_args"]
    overrides = bash_words(_line(text, "#1 Bridge overrides (shell words):"))
    assert overrides == top["bridge_overrides"]
    values = hydra_values(overrides)
    settings = top["settings"]  # Hydra reads back exactly the plan's own layout string and hierarchy
    assert "(" in settings["pipeline_layout"]
    assert values["model.pipeline_model_parallel_layout"] == settings["pipeline_layout"]
    assert values["model.hierarchical_context_parallel_sizes"] == settings["hierarchical_cp_sizes"]


def test_plan_cli_report_pastes_into_bash_and_hydra(capsys):
    assert main(["plan", *(f"--{k.replace('_', '-')}={v}" for k, v in DSV3.items()), "--top-n=3"]) == 0
    out = capsys.readouterr().out
    blocks = re.findall(r"  Bridge overrides \(shell words\):\n((?:    .*\n?)+)", out)
    assert len(blocks) == len(plan()["plans"])
    for block, p in zip(blocks, plan()["plans"], strict=True):
        words = bash_words(" ".join(line.strip() for line in block.splitlines()))
        assert words == p["bridge_overrides"] and hydra_values(words)


def test_every_plan_override_is_valid_hydra_and_every_flag_list_valid_bash():
    for p in plan()["plans"]:
        assert hydra_values(p["bridge_overrides"])
        assert bash_words(shlex.join(p["megatron_args"])) == p["megatron_args"]


def test_pick_recompute_text_pastes():
    # with the optimizer states on the CPU a selective set fits: a list value that must survive Hydra's quoting
    job = {**DSV3_NO_RECOMPUTE, "optimizer_cpu_offload_fraction": 1.0, "use_precision_aware_optimizer": True}
    result = run_tool(TOOLS_BY_NAME["pick_recompute"], job)
    data, text = result.structured_content, result.content[0].text
    assert data["recompute_granularity"] == "selective" and len(data["recompute_modules"]) > 1
    overrides = bash_words(_line(text, "Bridge overrides (shell words):"))
    assert overrides == data["bridge_overrides"]
    assert hydra_values(overrides)["model.recompute_modules"] == data["recompute_modules"]
    flags = bash_words(" ".join(data["megatron_lm_flags"]))
    assert flags[flags.index("--recompute-modules") + 1 :] == data["recompute_modules"]


UNQUOTED = (
    "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 8 --pipeline-model-parallel-layout "
    "Et|(tt|)*30mL --context-parallel-size 32 --expert-model-parallel-size 32 --seq-length 131072 "
    "--micro-batch-size 1 --global-batch-size 256 --num-layers 61 --mtp-num-layers 1"
)


def test_lint_notices_an_unquoted_layout_and_hands_back_a_quoted_one():
    lint = TOOLS_BY_NAME["lint_config"]
    request = {"model": "deepseek-v3", "gpu": "h100", "num_gpus": 256}
    r = lint.call({**request, "megatron_args": UNQUOTED})
    unquoted = next(f for f in r.findings if f.code == "LAUNCH_BASH_UNQUOTED")
    assert unquoted.severity == "warning" and unquoted.keys == ["--pipeline-model-parallel-layout"]
    assert "Quote the value: --pipeline-model-parallel-layout 'Et|(tt|)*30mL'" in unquoted.fix
    assert bash_syntax_ok(r.corrected)[0], r.corrected
    assert "'Et|(tt|)*30mL'" in r.corrected and "LAUNCH_BASH_UNQUOTED" not in r.remaining_errors
    quoted = lint.call({**request, "megatron_args": UNQUOTED.replace("Et|(tt|)*30mL", "'Et|(tt|)*30mL'")})
    assert "LAUNCH_BASH_UNQUOTED" not in [f.code for f in quoted.findings]
    inline = lint.call({**request, "megatron_args": UNQUOTED.replace("layout Et", "layout=Et")})
    assert "LAUNCH_BASH_UNQUOTED" in [f.code for f in inline.findings]


def test_lint_corrections_paste_in_both_dialects():
    lint = TOOLS_BY_NAME["lint_config"]
    r = lint.call({"megatron_args": UNQUOTED, "model": "deepseek-v3", "gpu": "h100", "num_gpus": 256})
    assert hydra_values(r.corrected_other_dialect)["model.pipeline_model_parallel_layout"] == "Et|(tt|)*30mL"
    overrides = [
        "model.pipeline_model_parallel_layout='Et|(tt|)*30mL'",
        *plan()["plans"][0]["bridge_overrides"],
    ]
    b = lint.call({"bridge_overrides": overrides, "model": "deepseek-v3", "gpu": "h100", "num_gpus": 256})
    assert hydra_values(b.corrected)
    words = bash_words(b.corrected_other_dialect)
    assert words[words.index("--pipeline-model-parallel-layout") + 1] == "Et|(tt|)*30mL"


def test_make_run_lints_the_quoted_arguments():
    """`make run` step 3 pipes the top plan's arguments into lint as a launch script passes them."""
    makefile = (ROOT / "Makefile").read_text()
    snippet = re.search(r'python -c "(import json,shlex,sys;[^"]+)"', makefile).group(1)
    text = subprocess.run(
        [sys.executable, "-c", snippet], input=json.dumps(plan()), capture_output=True, text=True, check=True
    ).stdout
    assert bash_words(text) == plan()["plans"][0]["megatron_args"]
    r = TOOLS_BY_NAME["lint_config"].call(
        {"megatron_args": text, **{k: DSV3[k] for k in ("model", "gpu", "num_gpus")}}
    )
    assert r.valid and "LAUNCH_BASH_UNQUOTED" not in [f.code for f in r.findings]


@pytest.mark.parametrize(
    "value",
    ["Et|(tt|)*30mL", "model.pipeline_model_parallel_layout='Et|(tt|)*30mL'", "[a,b]", "it's", "$HOME"],
)
def test_shell_quote_round_trips(value):
    from moe_long_context.dialects.shell import quote

    assert bash_words(quote(value)) == [value]
