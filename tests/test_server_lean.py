"""What every MCP session pays for: the size of tools/list, the summary text, and the prompt's arguments.

Sizes are measured on the JSON the server sends, read back through an in-process MCP client.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from mcp import Client, MCPError

from moe_long_context.dialects.shell import shell_join
from moe_long_context.engine.representative import representative_layouts
from moe_long_context.faces import server as server_module
from moe_long_context.faces import summary
from moe_long_context.faces.registry import TOOLS, TOOLS_BY_NAME
from moe_long_context.faces.schemas import FINDINGS, compact_input_schema, compact_output_schema
from moe_long_context.faces.server import server
from server_cases import VALID_CALLS

pytestmark = pytest.mark.anyio

TOOLS_LIST_BUDGET = 31_000  # bytes of JSON for the whole tools/list, every tool included (30.8 KB with LoRA)
PER_TOOL_BUDGET = 6_000  # one tool's definition; keeps room for tools still to come
PLAN_SUMMARY_BUDGET = 8_000  # plan_layout's default text

DSV3_PLAN = {"model": "deepseek-v3", "gpu": "h100", "num_gpus": 256, "seq_len": 131072}


async def _listed():
    async with Client(server) as client:
        return await client.list_tools()


def _wire(model) -> str:
    return model.model_dump_json(by_alias=True, exclude_none=True)


async def test_tools_list_fits_the_budget():
    listed = await _listed()
    assert len(_wire(listed)) < TOOLS_LIST_BUDGET, f"tools/list is {len(_wire(listed))} bytes"
    for tool in listed.tools:
        assert len(_wire(tool)) < PER_TOOL_BUDGET, f"{tool.name} is {len(_wire(tool))} bytes"
        assert len(tool.description) <= 320, f"{tool.name}: {len(tool.description)} characters of description"
        assert "Use " in tool.description and "Returns " in tool.description, tool.name


def _resolve(schema: dict, prop: dict) -> dict:
    if "$ref" in prop:
        return schema["$defs"][prop["$ref"].rsplit("/", 1)[-1]]
    return prop


def _model_property(prop: dict) -> dict:
    """The request model's property without its optional-null branch, as the compact schema states it."""
    options = [o for o in prop.get("anyOf", []) if o != {"type": "null"}]
    return {**prop, **options[0]} if len(options) == 1 else prop


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
async def test_compact_schema_keeps_every_argument_default_and_choice(tool):
    full = tool.request.model_json_schema()
    listed = next(t for t in (await _listed()).tools if t.name == tool.name).input_schema
    assert set(listed["properties"]) - {"detail"} == set(full["properties"])
    assert listed.get("required", []) == full.get("required", [])
    for name, prop in full["properties"].items():
        before, after = _model_property(prop), _resolve(listed, listed["properties"][name])
        if before.get("default") is not None:
            assert after.get("default") == before["default"], name
        assert after.get("enum") == before.get("enum"), name
        assert after.get("minimum") == before.get("minimum"), name
        assert after.get("type", "any") == before.get("type", after.get("type", "any")), name


def _calls() -> list[tuple[str, dict]]:
    calls = [(name, arguments) for name, arguments, _ in VALID_CALLS]
    for layout in representative_layouts():
        for config in layout.configs():
            for tool in TOOLS:
                arguments = {k: v for k, v in config.items() if k in tool.request.model_fields}
                if all(n in arguments for n, f in tool.request.model_fields.items() if f.is_required()):
                    calls.append((tool.name, arguments))
    return calls


async def test_compact_schemas_accept_every_call_the_tests_and_layouts_make():
    schemas = {t.name: t.input_schema for t in (await _listed()).tools}
    for name, arguments in _calls():
        jsonschema.validate({**arguments, "detail": "full"}, schemas[name])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"model": "deepseek-v3", "seq_len": 131072, "tp": 0}, schemas["size_cp"])


@pytest.mark.parametrize(("name", "arguments", "expected"), VALID_CALLS, ids=[c[0] for c in VALID_CALLS])
async def test_summary_and_full_result_for_every_tool(name, arguments, expected):
    async with Client(server) as client:
        short = await client.call_tool(name, arguments)
        full = await client.call_tool(name, {**arguments, "detail": "full"})
    assert not short.is_error and not full.is_error
    assert short.structured_content == full.structured_content  # the complete result either way
    data = full.structured_content
    assert json.loads(full.content[0].text) == data
    text = short.content[0].text
    assert text.startswith(f"{name}: ") and text.endswith(summary.FOOTER)
    assert len(text) < len(full.content[0].text)
    for finding in data["findings"]:
        assert finding["code"] in text
        if finding["severity"] == "error":
            assert finding["message"] in text and (finding["fix"] or "") in text
    for key, value in expected.items():  # the values the tests check are in the text too
        if isinstance(value, int) and not isinstance(value, bool):
            assert str(value) in text, (key, value)


async def test_plan_layout_summary_is_short_and_quotable():
    async with Client(server) as client:
        result = await client.call_tool("plan_layout", DSV3_PLAN)
        biggest = await client.call_tool("plan_layout", {**DSV3_PLAN, "num_gpus": 1024, "top_n": 20})
    data = result.structured_content
    text = result.content[0].text
    assert len(text.encode()) < PLAN_SUMMARY_BUDGET < len(json.dumps(data))
    assert len(biggest.content[0].text.encode()) < PLAN_SUMMARY_BUDGET
    top = data["plans"][0]
    assert f"#1 {top['layout']}" in text and f"{top['throughput']['tflops_per_gpu']:.0f} TFLOP/s/GPU" in text
    assert shell_join(top["bridge_overrides"]) in text and shell_join(top["megatron_args"]) in text
    for ref in data["references"]:  # the comparison with the published layout
        assert ref["layout"] in text and ref["verdict"] in text


async def test_detail_takes_summary_or_full_only():
    async with Client(server) as client:
        result = await client.call_tool("size_cp", {"model": "dsv3", "seq_len": 8192, "detail": "all"})
    assert result.is_error
    assert result.content[0].text == "size_cp: detail='all' is not allowed: one of 'summary', 'full'"


def test_a_tool_without_its_own_summary_gets_the_generic_one():
    data = {
        "valid": False,
        "tokens_per_s": 1234.5,
        "layout": "TP1 CP8",
        "terms": {"gemm": 1.0},
        "findings": [
            {
                "severity": "error",
                "code": "X_BAD",
                "message": "x is bad",
                "fix": "set x",
                "keys": [],
                "source": "",
            }
        ],
    }
    text = summary.summarize("estimate_something", data)
    assert text.splitlines()[0] == "estimate_something: NOT valid (error findings below)"
    assert "tokens_per_s=1234.5" in text and "layout=TP1 CP8" in text and "terms" not in text
    assert "- X_BAD: x is bad\n  fix: set x" in text


def test_compact_input_schema_shares_definitions_only_when_they_pay():
    schema = TOOLS_BY_NAME["size_cp"].request.model_json_schema()
    compact = compact_input_schema(schema)
    assert "$defs" not in compact  # size_cp has one size argument: inline is shorter
    assert compact["properties"]["tp"]["default"] == 1
    memory = compact_input_schema(TOOLS_BY_NAME["estimate_memory"].request.model_json_schema())
    assert memory["properties"]["tp"] == {"$ref": "#/$defs/n"}
    assert memory["properties"]["fp8_param_gather"] == {"$ref": "#/$defs/f"}


async def test_every_prompt_argument_is_described():
    async with Client(server) as client:
        prompts = (await client.list_prompts()).prompts
    for prompt in prompts:
        assert prompt.description
        for argument in prompt.arguments:
            assert argument.description, f"{prompt.name}.{argument.name} has no description"


@pytest.mark.parametrize(("argument", "value"), [("seq_len", "abc"), ("num_gpus", "-8"), ("seq_len", "128k")])
async def test_prompt_echoes_a_wrong_value_as_given(argument, value):
    async with Client(server) as client:
        with pytest.raises(MCPError) as error:
            await client.get_prompt("plan_long_context_moe", {argument: value})
    assert str(error.value) == (
        f"plan_long_context_moe: {argument}={value!r} is not allowed: a positive whole number"
    )


def test_output_schema_types_follow_refs_and_leave_any_open():
    schema = {
        "properties": {
            "kind": {"$ref": "#/$defs/Kind"},
            "blob": {},
            "maybe": {"anyOf": [{"$ref": "#/$defs/Kind"}, {"type": "null"}]},
            "nested": {"$ref": "#/$defs/Inner"},
            "findings": {"type": "array", "items": {"$ref": "#/$defs/Inner"}},
        },
        "$defs": {
            "Kind": {"enum": ["a", "b"], "type": "string", "title": "Kind"},
            "Inner": {"properties": {"x": {"type": "integer"}}, "type": "object"},
        },
    }
    assert compact_output_schema(schema) == {
        "type": "object",
        "properties": {
            "kind": {"type": "string"},
            "blob": {},
            "maybe": {"type": ["string", "null"]},
            "nested": {"type": "object"},
            "findings": {"type": "array", "description": FINDINGS},
        },
    }


ERRONEOUS = [  # configurations Megatron refuses: the tools answer, with error findings
    (
        "check_dp_budget",
        {"model": "dsv3", "gpu": "h100", "num_gpus": 100, "seq_len": 131072, "tp": 3, "cp": 7},
    ),
    ("estimate_memory", {"model": "dsv3", "gpu": "h100", "num_gpus": 8, "seq_len": 131072, "tp": 3}),
    ("pick_recompute", {"model": "dsv3", "gpu": "h100", "num_gpus": 8, "seq_len": 131072, "tp": 3}),
    (
        "validate_cuda_graph_shapes",
        {"model": "dsv3", "num_gpus": 8, "seq_len": 131072, "cuda_graph_impl": "full_iteration"},
    ),
    (
        "lint_config",
        {"megatron_args": "--tensor-model-parallel-size 3 --foo 1", "model": "dsv3", "num_gpus": 8},
    ),
    ("lint_config", {"config": {"model": {"tensor_model_parallel_size": 3}}, "model": "dsv3", "num_gpus": 8}),
]


@pytest.mark.parametrize(
    ("name", "arguments"), ERRONEOUS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ERRONEOUS)]
)
async def test_summary_of_a_refused_configuration_names_every_error_and_its_fix(name, arguments):
    async with Client(server) as client:
        result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content[0].text
    data, text = result.structured_content, result.content[0].text
    errors = [f for f in data["findings"] if f["severity"] == "error"]
    assert errors and "NOT valid" in text.splitlines()[0]
    for f in errors:
        assert f"- {f['code']}: {f['message']}" in text and (f["fix"] is None or f"fix: {f['fix']}" in text)
    assert "None" not in text.replace("gbs None", "")  # unset numbers read as '-', not None


@pytest.mark.parametrize("arguments", [a for n, a in ERRONEOUS if n == "lint_config"])
async def test_lint_summary_gives_the_corrected_configuration(arguments):
    async with Client(server) as client:
        result = await client.call_tool("lint_config", arguments)
    corrected, text = result.structured_content["corrected"], result.content[0].text
    lines = corrected.splitlines() if isinstance(corrected, str) else corrected
    if isinstance(corrected, dict):
        lines = [f"{key}: {json.dumps(value)}" for key, value in corrected.items()]
    assert lines and all(f"  {line}" in text for line in lines)


async def test_a_failing_summary_still_sends_the_result(monkeypatch):
    def broken(name, data):
        raise KeyError("a summary bug")

    monkeypatch.setattr(server_module, "summarize", broken)
    async with Client(server) as client:
        result = await client.call_tool("size_cp", {"model": "dsv3", "seq_len": 131072})
    assert not result.is_error and json.loads(result.content[0].text) == result.structured_content


async def test_a_plan_layout_with_no_plan_says_why_in_its_summary():
    async with Client(server) as client:
        result = await client.call_tool("plan_layout", {**DSV3_PLAN, "model": "glm-5", "num_gpus": 7})
    data, text = result.structured_content, result.content[0].text
    assert not result.is_error and data["plans"] == [] and data["no_plan_reason"]
    assert f"no plan: {data['no_plan_reason']}" in text
    assert all(f"{why} x{n}" in text for why, n in data["excluded"].items())
    assert f"GBS {data['gbs']} for every plan" in text
