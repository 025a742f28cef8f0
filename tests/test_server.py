"""MCP face in process: tools generated from the registry, results, errors, resources, prompt, completion."""

from __future__ import annotations

import dataclasses
import json
import time

import jsonschema
import pytest
from mcp import Client, MCPError
from mcp.types import PromptReference, ResourceTemplateReference

from moe_long_context.dialects.overrides import bridge_override_list
from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.representative import representative_layouts
from moe_long_context.engine.rules import rule_table
from moe_long_context.faces import server as server_module
from moe_long_context.faces import server_content
from moe_long_context.faces.registry import TOOLS, TOOLS_BY_NAME
from moe_long_context.faces.server import server
from server_cases import BAD_CALLS, VALID_CALLS

pytestmark = pytest.mark.anyio


def error_text(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


async def test_tools_list_is_the_registry():
    async with Client(server) as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == [t.name for t in TOOLS]
    for mcp_tool, tool in zip(listed, TOOLS, strict=True):
        assert (mcp_tool.title, mcp_tool.description) == (tool.title, tool.description)
        schema = mcp_tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        # flat: no nested request object; plus detail, which only the MCP face reads
        assert set(schema["properties"]) == set(tool.request.model_fields) | {"detail"}
        for name, prop in schema["properties"].items():
            if "$ref" in prop:  # a shared definition (on/off switches, sizes) carries the description
                prop = schema["$defs"][prop["$ref"].rsplit("/", 1)[-1]]
            assert prop.get("description") or prop.get("enum"), f"{tool.name}.{name} has no description"
        assert mcp_tool.output_schema["type"] == "object"
        assert set(mcp_tool.output_schema["properties"]) == set(tool.result.model_fields)
        a = mcp_tool.annotations
        # destructive/idempotent hints mean something only for tools that are not read-only (MCP spec)
        assert (a.read_only_hint, a.open_world_hint, a.idempotent_hint, a.destructive_hint) == (
            True,
            False,
            None,
            None,
        )


def _numbers(schema, path=""):
    if isinstance(schema, dict):
        if schema.get("type") in ("integer", "number"):
            yield path, schema
        for key, value in schema.items():
            yield from _numbers(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from _numbers(value, f"{path}[{i}]")


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_every_numeric_argument_is_bounded(tool):
    for path, number in _numbers(tool.request.model_json_schema()):
        assert "minimum" in number or "exclusiveMinimum" in number, f"{tool.name}{path} has no lower bound"
        assert "maximum" in number or "exclusiveMaximum" in number, f"{tool.name}{path} has no upper bound"


@pytest.mark.parametrize(("name", "arguments", "expected"), VALID_CALLS, ids=[c[0] for c in VALID_CALLS])
async def test_valid_calls_return_the_engine_result(name, arguments, expected):
    async with Client(server) as client:
        result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    data = result.structured_content
    assert {k: data[k] for k in expected} == expected
    tool = TOOLS_BY_NAME[name]
    assert data == tool.call(arguments).model_dump(mode="json")  # the server adds nothing of its own
    assert result.content[0].text.startswith(f"{name}: ")  # the default text is the summary
    async with Client(server) as client:
        full = await client.call_tool(name, {**arguments, "detail": "full"})
    assert full.structured_content == data and json.loads(full.content[0].text) == data


def test_every_tool_has_a_value_checked_call():
    missing = set(TOOLS_BY_NAME) - {c[0] for c in VALID_CALLS}
    assert not missing, f"add a valid call with checked values for {sorted(missing)} to tests/server_cases.py"


@pytest.mark.parametrize(("name", "arguments", "words"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
async def test_bad_calls_are_readable_tool_errors(name, arguments, words):
    async with Client(server) as client:
        text = error_text(await client.call_tool(name, arguments))
    assert text.startswith(f"{name}: ")
    for word in words:
        assert word in text
    assert "Traceback" not in text and "errors.pydantic.dev" not in text


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
async def test_every_tool_refuses_missing_and_unknown_arguments(tool):
    required = [n for n, f in tool.request.model_fields.items() if f.is_required()]
    async with Client(server) as client:
        missing = error_text(await client.call_tool(tool.name, {}))
        unknown = error_text(await client.call_tool(tool.name, {"no_such_argument": 1}))
    assert all(f"{name} is required" in missing for name in required)
    assert "no_such_argument is not an argument of this tool" in unknown


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
async def test_every_tool_answers_the_representative_layouts(tool):
    """Tools added later are exercised too: each gets the layout fields its request accepts."""
    fields = tool.request.model_fields
    required = {n for n, f in fields.items() if f.is_required()}
    configs = [c for lay in representative_layouts() for c in lay.configs()]
    if not required <= set(configs[0]):
        pytest.skip(f"{tool.name} needs {sorted(required - set(configs[0]))}, which a layout does not give")
    async with Client(server) as client:
        schema = next(t for t in (await client.list_tools()).tools if t.name == tool.name).output_schema
        for config in configs:
            arguments = {k: v for k, v in config.items() if k in fields}
            if tool.name == "lint_config":  # it reads a launch, so give it the layout as Bridge overrides
                arguments["bridge_overrides"] = bridge_override_list(TrainingConfig(**config))
            result = await client.call_tool(tool.name, arguments)
            assert not result.is_error, result.content[0].text
            jsonschema.validate(result.structured_content, schema)


async def test_unknown_tool_names_the_tools():
    async with Client(server) as client:
        text = error_text(await client.call_tool("plan_everything", {}))
    assert "Unknown tool: 'plan_everything'" in text and "size_cp" in text


async def test_an_internal_error_shows_its_type_and_message_and_the_server_goes_on(monkeypatch):
    def broken(request):
        raise ZeroDivisionError("division by zero in the fake engine")

    monkeypatch.setitem(TOOLS_BY_NAME, "size_cp", dataclasses.replace(TOOLS_BY_NAME["size_cp"], fn=broken))
    async with Client(server) as client:
        text = error_text(await client.call_tool("size_cp", {"model": "dsv3", "seq_len": 8192}))
        after = await client.call_tool("check_dp_budget", {"model": "dsv3", "num_gpus": 8})
    assert "internal error ZeroDivisionError: division by zero in the fake engine" in text
    assert "not a problem with the arguments" in text
    assert not after.is_error


async def test_a_tool_that_does_not_answer_is_cut_off(monkeypatch):
    def stuck(request):
        time.sleep(2)

    monkeypatch.setattr(server_module, "TOOL_TIME_LIMIT_S", 0.2)
    monkeypatch.setitem(TOOLS_BY_NAME, "size_cp", dataclasses.replace(TOOLS_BY_NAME["size_cp"], fn=stuck))
    started = time.monotonic()
    async with Client(server) as client:
        text = error_text(await client.call_tool("size_cp", {"model": "dsv3", "seq_len": 8192}))
    assert "no answer within" in text and time.monotonic() - started < 1.5


async def test_oversized_arguments_are_refused():
    huge = {"model_type": "mixtral", "padding": "x" * (server_module.MAX_ARGUMENTS_BYTES + 1)}
    async with Client(server) as client:
        text = error_text(await client.call_tool("size_cp", {"model": huge, "seq_len": 8192}))
    assert f"more than the {server_module.MAX_ARGUMENTS_BYTES} this server accepts" in text


async def test_resources_serve_the_engine_data():
    async with Client(server) as client:
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}

        async def read(uri):
            return (await client.read_resource(uri)).contents[0].text

        rules = json.loads(await read("moe-lc://rules"))
        layouts = json.loads(await read("moe-lc://layouts"))
        models = json.loads(await read("moe-lc://catalog/models"))
        gpus = json.loads(await read("moe-lc://catalog/gpus"))
        one = json.loads(await read("moe-lc://catalog/models/dsv3"))
        seed = json.loads(await read("moe-lc://layouts/deepseek-v3-128k-h100"))
        with pytest.raises(
            MCPError, match="layout_id='dsv3-128k' is not allowed: one of deepseek-v3-128k-h100"
        ):
            await read("moe-lc://layouts/dsv3-128k")
        upstream = json.loads(await read("moe-lc://rules/upstream"))
        with pytest.raises(MCPError, match="did you mean 'deepseek-v3'"):
            await read("moe-lc://catalog/models/dsv9")
        with pytest.raises(MCPError, match=r"DeepSeek-V4 cannot run on Megatron Core 0\.19\.2"):
            await read("moe-lc://catalog/models/dsv4")
    assert uris == {
        "moe-lc://catalog/models",
        "moe-lc://catalog/gpus",
        "moe-lc://rules",
        "moe-lc://rules/upstream",
        "moe-lc://layouts",
        "moe-lc://skill",
    }
    assert templates == {"moe-lc://catalog/models/{model_id}", "moe-lc://layouts/{layout_id}"}
    assert seed == next(lay.config for lay in representative_layouts() if lay.id == "deepseek-v3-128k-h100")
    assert [r["code"] for r in rules] == list(rule_table())
    assert {"file", "line", "function", "message", "status", "rule", "reason"} <= set(upstream["checks"][0])
    assert upstream["checked"]["upstream"] == sum(c["status"] == "modelled" for c in upstream["checks"])
    assert {"code", "severity", "source", "family", "title", "when"} <= set(rules[0])
    assert [lay["id"] for lay in layouts] == [lay.id for lay in representative_layouts()]
    assert "deepseek-v3" in {m["id"] for m in models} and "gb200" in {g["id"] for g in gpus}
    assert one["id"] == "deepseek-v3" and one["num_layers"] == 61


async def test_skill_resource_serves_skill_md_or_says_it_is_missing(monkeypatch, tmp_path):
    async with Client(server) as client:
        text = (await client.read_resource("moe-lc://skill")).contents[0].text
        assert text == server_content.skill_path().read_text(encoding="utf-8")
        monkeypatch.setattr(server_content, "skill_path", lambda: tmp_path / "SKILL.md")
        missing = (await client.read_resource("moe-lc://skill")).contents[0].text
    assert text.startswith("---\nname: nemo-mbridge-perf-moe-long-context\n")
    assert "skill text not available" in missing and str(tmp_path / "SKILL.md") in missing


async def test_planning_prompt_lists_every_tool_and_the_request():
    async with Client(server) as client:
        prompts = (await client.list_prompts()).prompts
        full = await client.get_prompt(
            "plan_long_context_moe",
            {"model": "deepseek-v3", "gpu": "h100", "num_gpus": "256", "seq_len": "131072"},
        )
        partial = await client.get_prompt("plan_long_context_moe", {"model": "qwen3-235b-a22b"})
    assert [p.name for p in prompts] == ["plan_long_context_moe"]
    text = full.messages[0].content.text
    assert "model=deepseek-v3, gpu=h100, num_gpus=256, seq_len=131072" in text and "Ask the user" not in text
    assert all(f"`{tool.name}`" in text for tool in TOOLS)
    assert "Ask the user for gpu, num_gpus, seq_len first." in partial.messages[0].content.text


async def test_completion_of_model_and_gpu_ids():
    prompt = PromptReference(type="ref/prompt", name="plan_long_context_moe")
    template = ResourceTemplateReference(type="ref/resource", uri="moe-lc://catalog/models/{model_id}")
    async with Client(server) as client:
        models = await client.complete(prompt, {"name": "model", "value": "qwen3"})
        gpus = await client.complete(prompt, {"name": "gpu", "value": "GB"})
        ids = await client.complete(template, {"name": "model_id", "value": "deepseek"})
        other = await client.complete(prompt, {"name": "seq_len", "value": "1"})
    assert set(models.completion.values) >= {"qwen3-235b-a22b", "qwen3-30b-a3b", "qwen3-next-80b-a3b"}
    assert all(v.startswith("qwen3") for v in models.completion.values)
    assert gpus.completion.values == ["gb200", "gb300"]
    assert "deepseek-v3" in ids.completion.values
    assert other.completion.values == []
