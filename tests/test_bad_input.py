"""Issue 26's cases: inputs that crashed, were read wrongly or got a misleading message, each refused (or
answered) in one line that names the field, through the Python API, the CLI and the MCP face."""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from moe_long_context.cli import build_parser, main
from moe_long_context.errors import InputError
from moe_long_context.faces.registry import TOOLS, TOOLS_BY_NAME, validate_arguments
from moe_long_context.faces.server import run_tool
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory
from moe_long_context.tools.pick_recompute import PickRecomputeRequest, pick_recompute

DEPTH = 3000  # deeper than Python's recursion limit: a recursive reader would crash


def nested(depth: int, leaf=1) -> dict:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def refused_in_one_line(code: int, out: str, err: str, *words: str) -> None:
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err


# --------------------------------------------------------------------------- deep nesting


@pytest.fixture
def deep_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{" + '"a": {' * DEPTH + "}" * DEPTH + "}")
    return path


# the fewest arguments each command needs to read its model
MINIMAL = {"size-cp": ["--seq-len", 8192], "lint": ["--megatron-args=--tensor-model-parallel-size 1"]}


@pytest.mark.parametrize("command", ["models", *(t.command for t in TOOLS)])
def test_deep_config_json_file_is_refused_by_every_command_taking_a_model(capsys, deep_json, command):
    if command == "models":
        argv = ["models", deep_json]
    else:
        needed = {"--gpu": "h100", "--num-gpus": 8, "--seq-len": 8192}
        argv = [
            command,
            "--model",
            deep_json,
            *MINIMAL.get(command, [x for kv in needed.items() for x in kv]),
        ]
    code, out, err = run_cli(capsys, *argv)
    refused_in_one_line(code, out, err, f"model={str(deep_json)!r}", "nested")


def test_deep_inline_model_is_refused_on_every_face(capsys):
    text = '{"model_type": "mixtral", "x": ' + "[" * DEPTH + "]" * DEPTH + "}"
    code, out, err = run_cli(capsys, "size-cp", "--model", text, "--seq-len", 8192)
    refused_in_one_line(code, out, err, "model", "nested")
    tool = TOOLS_BY_NAME["size_cp"]
    with pytest.raises(Exception) as caught:
        tool.call({"model": nested(DEPTH), "seq_len": 8192})
    assert "model" in str(caught.value) and "nested" in str(caught.value)
    assert not isinstance(caught.value, RecursionError)


def test_deep_lint_inputs_are_refused(capsys, tmp_path):
    overrides = tmp_path / "overrides.txt"
    overrides.write_text("model.recompute_modules=" + "[" * DEPTH + "]" * DEPTH + "\n")
    code, out, err = run_cli(
        capsys, "lint", "--bridge-overrides", overrides, "--model", "dsv3", "--num-gpus", 8
    )
    refused_in_one_line(code, out, err, "model.recompute_modules", "nested")
    flow = tmp_path / "config.yaml"
    flow.write_text("model: " + "[" * DEPTH + "]" * DEPTH + "\n")
    code, out, err = run_cli(capsys, "lint", "--config", flow, "--model", "dsv3", "--num-gpus", 8)
    refused_in_one_line(code, out, err, "config", "nested")
    deep = tmp_path / "config.json"
    deep.write_text('{"model": ' + "[" * DEPTH + "]" * DEPTH + "}")
    code, out, err = run_cli(capsys, "lint", "--config", deep, "--model", "dsv3", "--num-gpus", 8)
    refused_in_one_line(code, out, err, "config", "nested")
    code, out, err = run_cli(capsys, "models", flow)
    refused_in_one_line(code, out, err, "model", "nested")


# --------------------------------------------------------------------------- help texts


def _command_paths(parser=None, path=()) -> list[tuple[str, ...]]:
    """Every sub-command, nested ones (moe-lc eval run) included."""
    parser = parser or build_parser()
    out = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue  # an option's choices (moe-lc rules --status) are values, not commands
        for name, sub in action.choices.items():
            if hasattr(sub, "_actions"):
                out += [(*path, name), *_command_paths(sub, (*path, name))]
    return sorted(set(out))


@pytest.mark.parametrize("command", _command_paths(), ids=" ".join)
def test_every_help_text_prints(capsys, command):
    with pytest.raises(SystemExit) as stop:
        main([*command, "--help"])
    assert stop.value.code == 0
    assert "usage: moe-lc" in capsys.readouterr().out


# --------------------------------------------------------------------------- booleans are not numbers


BOOL_FOR_INT = [
    ("size_cp", {"model": "dsv3", "seq_len": True}, "seq_len"),
    ("check_dp_budget", {"model": "dsv3", "num_gpus": 8, "seq_len": True}, "seq_len"),
    ("check_dp_budget", {"model": "dsv3", "num_gpus": True}, "num_gpus"),
    ("check_dp_budget", {"model": "dsv3", "num_gpus": 8, "hierarchical_cp_sizes": [True, 1]}, "hierarchical"),
    ("estimate_memory", {"model": "dsv3", "gpu": "h100", "num_gpus": 8, "seq_len": True}, "seq_len"),
    (
        "estimate_memory",
        {
            "model": "dsv3",
            "gpu": "h100",
            "num_gpus": 8,
            "seq_len": 4096,
            "optimizer_cpu_offload_fraction": True,
        },
        "optimizer_cpu_offload_fraction",
    ),
    ("validate_cuda_graph_shapes", {"model": "dsv3", "seq_len": True}, "seq_len"),
    ("size_cp", {"model": "dsv3", "seq_len": 8192, "sequence_parallel": 1}, "sequence_parallel"),
    ("size_cp", {"model": "dsv3", "seq_len": "8192"}, "seq_len"),
    ("plan_layout", {"model": "dsv3", "gpu": "h100", "num_gpus": 8, "seq_len": 4096, "top_n": True}, "top_n"),
]


@pytest.mark.parametrize(("name", "arguments", "field"), BOOL_FOR_INT, ids=lambda x: str(x)[:40])
def test_a_value_of_the_wrong_json_type_is_refused_not_converted(name, arguments, field):
    tool = TOOLS_BY_NAME[name]
    with pytest.raises(Exception) as caught:
        tool.call(arguments)
    assert field in str(caught.value)
    from mcp.server.mcpserver.exceptions import ToolError

    with pytest.raises(ToolError, match=field):
        run_tool(tool, arguments)


def test_every_request_model_refuses_a_boolean_for_every_number():
    """What MCP and the Python API send is JSON: true is not 1 for any numeric field of any tool."""
    for tool in TOOLS:
        properties = tool.request.model_json_schema()["properties"]
        for name, schema in properties.items():
            types = {s.get("type") for s in schema.get("anyOf", [schema])}
            if types & {"integer", "number"} and "boolean" not in types:
                with pytest.raises(ValidationError) as caught:
                    validate_arguments(tool.request, {"model": "dsv3", name: True})
                assert any(e["loc"][0] == name for e in caught.value.errors()), (tool.name, name)


def test_not_a_number_is_refused_as_not_finite(capsys):
    code, out, err = run_cli(capsys, "estimate-memory", "--model", "dsv3", "--gpu", "h100", "--seq-len", 4096,
                             "--num-gpus", 8, "--overhead-gib", "nan")  # fmt: skip
    refused_in_one_line(code, out, err, "overhead_gib", "finite")
    assert "less than or equal" not in err


# --------------------------------------------------------------------------- silent wrong answers


DSV3_README = dict(model="deepseek-v3", gpu="h100", seq_len=131072, num_gpus=256, cp=32, ep=32, pp=8, vpp=4,
                   gbs=256, pipeline_layout="Et|(tt|)*30mL", precision="fp8-blockwise")  # fmt: skip


def test_pick_recompute_names_a_label_megatron_does_not_know():
    r = pick_recompute(PickRecomputeRequest(**DSV3_README, recompute_modules=["foo"]))
    named = [f for f in r.findings if "'foo'" in f.message]
    assert named and "recompute_modules" in named[0].keys, [f.message for f in r.findings]


def test_pick_recompute_offload_step_fits_the_headroom_budget():
    """README's example: full recompute leaves 95.9 GiB; offloading 70 % of the optimizer brings the peak under
    the 75.154 GiB budget (79.11 GiB less 5 %) on the 256 GPUs given, so that is the first next step."""
    r = pick_recompute(PickRecomputeRequest(**DSV3_README))
    assert not r.fits and r.budget_gib == 75.154
    first = r.next_steps[0]
    assert first.action == "optimizer CPU offload" and first.fits, first
    assert first.peak_gib <= r.budget_gib
    assert "num_gpus" not in first.settings and first.settings["use_precision_aware_optimizer"] is True
    fraction = first.settings["optimizer_cpu_offload_fraction"]
    assert fraction == 0.7  # the smallest step of 5 % that fits: 0.65 leaves more than the budget
    chosen = {**DSV3_README, "recompute_granularity": "full", "recompute_method": "uniform",
              "recompute_num_layers": 1, "use_precision_aware_optimizer": True}  # fmt: skip
    for share, fits in ((fraction, True), (fraction - 0.05, False)):
        peak = estimate_memory(EstimateMemoryRequest(**chosen, optimizer_cpu_offload_fraction=share)).peak_gib
        assert (peak <= r.budget_gib) is fits, (share, peak)


def test_sequence_fix_never_proposes_a_length_megatron_refuses():
    r = TOOLS_BY_NAME["check_dp_budget"].call({"model": "dsv3", "num_gpus": 8, "seq_len": 1, "cp": 2})
    fix = next(f for f in r.findings if f.code == "SEQ_CP_DIVISIBILITY").fix
    assert "seq_len 0" not in fix and "seq_len 4" in fix, fix


# --------------------------------------------------------------------------- misleading messages


def test_unbalanced_parentheses_in_a_layout_are_named():
    r = TOOLS_BY_NAME["check_dp_budget"].call(
        {"model": "dsv3", "num_gpus": 64, "pp": 2, "pipeline_layout": "E((t|"}
    )
    message = next(f for f in r.findings if f.code == "PP_LAYOUT_INVALID").message
    assert "parenthes" in message and "invalid layer character" not in message, message


def test_a_directory_or_a_file_that_is_not_json_as_model(capsys, tmp_path):
    code, out, err = run_cli(capsys, "size-cp", "--model", tmp_path, "--seq-len", 8192)
    refused_in_one_line(code, out, err, "directory", "config.json")
    assert "deepseek-v2-lite" not in err
    garbage = tmp_path / "weights.bin"
    garbage.write_bytes(bytes(range(256)))
    code, out, err = run_cli(capsys, "size-cp", "--model", garbage, "--seq-len", 8192)
    refused_in_one_line(code, out, err, "not")
    assert "deepseek-v2-lite" not in err
    with pytest.raises(InputError, match="directory"):
        TOOLS_BY_NAME["size_cp"].call({"model": str(tmp_path), "seq_len": 8192})


def test_a_config_json_without_its_sizes_names_what_is_missing(capsys):
    code, out, err = run_cli(capsys, "size-cp", "--model", '{"model_type": "glm4_moe"}', "--seq-len", 8192)
    refused_in_one_line(code, out, err, "model.head_dim", "set head_dim in the config.json")
    assert "lacks hidden_size and num_attention_heads" in err and "defaults" in err, err


def test_recompute_modules_without_selective_granularity_are_named_as_unused():
    base = {"model": "dsv3", "gpu": "h100", "num_gpus": 64, "ep": 8, "seq_len": 4096}
    r = estimate_memory(EstimateMemoryRequest(**base, recompute_modules=["moe_act", "foo"]))
    unused = next(f for f in r.findings if f.code == "RECOMPUTE_MODULES_UNUSED")
    assert unused.severity == "warning" and "'foo' is not a label" in unused.message
    assert "recompute_granularity=selective" in unused.fix
    r = estimate_memory(
        EstimateMemoryRequest(**base, recompute_modules=["moe_act"], recompute_granularity="selective")
    )
    assert "RECOMPUTE_MODULES_UNUSED" not in [f.code for f in r.findings]
