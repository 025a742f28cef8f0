"""CLI face: flags from the request models, JSON identical to the tool result, clean refusals."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from moe_long_context.cli import main
from moe_long_context.tools.size_cp import SizeCpRequest, size_cp

DSV3 = ["--model", "deepseek-v3", "--gpu", "h100", "--seq-len", "131072"]
LAYOUT = [*DSV3, "--num-gpus", "256", "--cp", "32", "--ep", "32", "--pp", "8", "--vpp", "4", "--gbs", "64"]


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_output_is_the_tool_result(capsys):
    code, out, _ = run(capsys, "size-cp", *DSV3, "--json")
    assert code == 0
    expected = size_cp(SizeCpRequest(model="deepseek-v3", gpu="h100", seq_len=131072)).model_dump(mode="json")
    assert json.loads(out) == expected


def test_readable_report_and_exit_code_for_errors(capsys):
    code, out, _ = run(capsys, "check-dp-budget", *LAYOUT)
    assert code == 1  # 61 layers do not split over PP 8 x VPP 4
    assert "PP_LAYERS_NOT_DIVISIBLE" in out and "fix: Use one of: pipeline_layout=Et|(tt|)*30mL" in out
    code, out, _ = run(capsys, "check-dp-budget", *LAYOUT, "--pipeline-layout", "Et|(tt|)*30mL")
    assert code == 0 and "TP1 CP32 PP8 VPP4 EP32 ETP1 DP1 EDP1" in out


def test_booleans_and_lists(capsys):
    code, out, _ = run(
        capsys,
        "check-dp-budget",
        "--model",
        "qwen3-235b-a22b",
        "--num-gpus",
        "64",
        "--tp",
        "2",
        "--no-sequence-parallel",
        "--json",
    )
    assert code == 1 and "MOE_TP_NEEDS_SP" in out
    code, out, _ = run(
        capsys,
        "validate-cuda-graphs",
        "--model",
        "qwen3-30b-a3b",
        "--seq-len",
        "8192",
        "--cuda-graph-impl",
        "transformer_engine",
        "--cuda-graph-modules",
        "attn,moe_router,moe_preprocess",
        "--json",
    )
    assert code == 0
    assert json.loads(out)["cuda_graph_modules"] == ["attn", "moe_router", "moe_preprocess"]


def test_list_flags_on_a_tool_with_several_list_fields(capsys):
    code, out, _ = run(
        capsys,
        "validate-cuda-graphs",
        *DSV3,
        "--recompute-granularity",
        "selective",
        "--recompute-modules",
        "mla_up_proj,layernorm,moe",
        "--cuda-graph-impl",
        "transformer_engine",
        "--cuda-graph-modules",
        "attn,moe_router",
        "--json",
    )
    assert code == 1  # moe recompute with a TE moe_router graph
    assert "GRAPH_MOE_RECOMPUTE_ROUTER" in out


def test_inline_config_json_model(capsys):
    cfg = json.dumps(
        {
            "model_type": "mixtral",
            "num_hidden_layers": 8,
            "hidden_size": 1024,
            "intermediate_size": 2048,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "vocab_size": 32000,
        }
    )
    code, out, _ = run(capsys, "size-cp", "--model", cfg, "--seq-len", "65536", "--json")
    assert code == 0 and json.loads(out)["cp"] == 16


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["size-cp", "--model", "dsv4", "--seq-len", "8"], "model='dsv4' is not allowed"),
        (["check-dp-budget", "--model", "dsv3", "--num-gpus", "0"], "num_gpus='0' is not allowed"),
        (["check-dp-budget", "--model", "dsv3", "--num-gpus", "8", "--tp", "x"], "tp='x' is not allowed"),
        (["check-dp-budget", "--model", "dsv3"], "num_gpus is required"),
        (["size-cp", "--model", "dsv3", "--seq-len", "8", "--gpu", "a100"], "gpu='a100' is not allowed"),
        (
            ["validate-cuda-graphs", "--model", "dsv3", "--seq-len", "8", "--cuda-graph-impl", "cudnn"],
            "cuda_graph_impl='cudnn' is not allowed",
        ),
        (["size-cp", "--model", "{bad json", "--seq-len", "8"], "valid JSON"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_catalog_commands(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0 and "deepseek-v3" in out and "671.0B" in out
    code, out, _ = run(capsys, "models", "dsv3", "--json")
    assert json.loads(out)["num_layers"] == 61
    code, out, _ = run(capsys, "gpus")
    assert "gb300" in out
    code, out, _ = run(capsys, "rules", "--json")
    assert any(r["code"] == "LAYOUT_WORLD_DIVISIBILITY" for r in json.loads(out))


def test_console_script_runs_as_a_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "moe_long_context.cli", "size-cp", *DSV3, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cp"] == 32
