"""Fuzzed arguments, drawn from each tool's own request model, through every face: the Python API (the
registry), the CLI, the MCP server in process and an MCP client over stdio.

Arguments are mostly in range (bounds and catalog ids) with up to three hostile values: numbers past the
bounds, booleans and strings for numbers, NaN and infinities, huge and empty values, lone surrogates, lists
and objects nested 250 and 3000 levels, and unknown keys. Every call must

- answer within CALL_TIME_LIMIT_S, as a result or a refusal (no traceback, no engine bug reported as an
  "internal error");
- refuse in one line that names an argument (the CLI: exit 2 and one line on stderr);
- refuse whatever the input schema forbids: the request model's JSON schema (references/tools.md), and the
  compact schema tools/list sends (which leaves out nulls: an explicit null means unset).

MOE_LC_FUZZ_EXAMPLES sets the examples per tool and face (default 12, a run of well under a minute in
``make test``); ``make fuzz`` runs 400.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Iterator
from functools import cache

import anyio
import anyio.from_thread
import jsonschema
import pydantic_core
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError, StdioServerParameters
from pydantic import ValidationError

from moe_long_context.cli import main as cli_main
from moe_long_context.errors import InputError
from moe_long_context.faces.registry import TOOLS
from moe_long_context.faces.server import input_schema, server
from moe_long_context.model.catalog import gpu_ids, model_ids

CALL_TIME_LIMIT_S = 20
EXAMPLES = int(os.environ.get("MOE_LC_FUZZ_EXAMPLES", "12"))
HF_KEYS = (
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "n_routed_experts",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "vocab_size",
    "kv_lora_rank",
    "q_lora_rank",
    "first_k_dense_replace",
    "sliding_window",
)


class DeepDict(dict):
    """An object nested ``depth`` levels whose repr stays short (a failing example is printed)."""

    def __repr__(self) -> str:
        return f"<object nested {nesting(self)} levels>"


class DeepList(list):
    def __repr__(self) -> str:
        return f"<list nested {nesting(self)} levels>"


def nesting(value: object) -> int:
    depth = 0
    while isinstance(value, dict | list) and value:
        value, depth = (next(iter(value.values())) if isinstance(value, dict) else value[0]), depth + 1
    return depth


def nested(depth: int, leaf: object = 1, kind: type = dict) -> object:
    value = leaf
    for _ in range(depth - 1):
        value = {"a": value} if kind is dict else [value]
    return DeepDict(a=value) if kind is dict else DeepList([value])


extreme_numbers = st.sampled_from(
    [0, -1, -(2**63), 2**63, 2**70, 10**30, 2**31 - 1, 1e308, -1e308, 0.5, 4096.0, float("nan"), float("inf"),
     float("-inf")]
)  # fmt: skip
hostile = st.sampled_from(
    [True, False, None, "", " ", "\ud800", "a\udfffb", "x" * 100_000, "131072", "true", "null", [], {}, [[]],
     nested(250), nested(250, kind=list), nested(3000), nested(3000, kind=list), {"model_type": nested(300)},
     ["a\ud800"], "Et|(tt|)*30mL\x00", "../../../etc/passwd", "-", "--tp"]
)  # fmt: skip
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=40),
    st.lists(st.integers(), max_size=4),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
    hostile,
)
hf_config = st.fixed_dictionaries(
    {
        "model_type": st.sampled_from(
            ["deepseek_v3", "qwen3_moe", "qwen3_next", "gpt_oss", "mixtral", "llama", "glm4_moe"]
        )
    },
    optional={key: st.one_of(st.integers(-4, 300), extreme_numbers, junk) for key in HF_KEYS[1:]},
)
text = st.text(alphabet="Et|()*0123456789mL,", max_size=40) | st.text(max_size=30)
CATALOG = {"model": st.sampled_from([*model_ids(), "dsv3"]), "gpu": st.sampled_from(gpu_ids())}


def in_range(schema: dict, name: str = "") -> st.SearchStrategy:
    """Values of the type a (sub)schema declares, inside its bounds (so calls reach the engine)."""
    if name in CATALOG:
        return CATALOG[name] | in_range(schema)
    if "anyOf" in schema:
        return st.one_of([in_range(s) for s in schema["anyOf"]])
    if "enum" in schema or "const" in schema:
        return st.sampled_from(schema.get("enum") or [schema["const"]])
    kind = schema.get("type")
    if kind in ("integer", "number"):
        low, high = int(schema.get("minimum", -(2**20))), int(schema.get("maximum", 2**20))
        powers = [2**k for k in range(40) if low <= 2**k <= high]
        ints = (
            st.integers(low, min(high, low + 64)) | st.sampled_from(powers or [low]) | st.integers(low, high)
        )
        return ints | st.floats(low, high) if kind == "number" else ints
    if kind == "string":
        return text
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(in_range(schema.get("items", {})), max_size=schema.get("maxItems", 8))
    if kind == "object":
        return hf_config
    return st.none()


def beyond(schema: dict) -> st.SearchStrategy:
    """Values just past a numeric schema's bounds (or anything hostile for other schemas)."""
    numeric = [s for s in schema.get("anyOf", [schema]) if s.get("type") in ("integer", "number")]
    edges = [
        b + d for s in numeric for b in (s.get("minimum"), s.get("maximum")) if b is not None for d in (-1, 1)
    ]
    return st.sampled_from(edges) if edges else junk


@cache
def _properties(tool) -> tuple[dict, frozenset]:
    schema = tool.request.model_json_schema()
    return schema["properties"], frozenset(schema.get("required", ()))


@st.composite
def arguments(draw, tool) -> dict:
    """Mostly in-range arguments with up to three hostile values, sometimes an unknown key."""
    props, required = _properties(tool)
    bad = set(draw(st.lists(st.sampled_from(sorted(props)), max_size=3, unique=True)))
    args = {}
    for name, prop in props.items():
        if name in bad:
            args[name] = draw(beyond(prop) | extreme_numbers | junk)
        elif name in required or draw(st.integers(0, 3)) == 0:
            args[name] = draw(in_range(prop, name))
    if draw(st.integers(0, 4)) == 0:
        args[draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in props))] = draw(junk)
    return args


# --------------------------------------------------------------------------- the oracle


@cache
def _validators(tool) -> tuple[jsonschema.Draft202012Validator, jsonschema.Draft202012Validator]:
    model = tool.request.model_json_schema()
    wire = input_schema(tool)
    return jsonschema.Draft202012Validator(model), jsonschema.Draft202012Validator(wire)


def forbidden(tool, args: dict) -> bool:
    """Whether the request model's JSON schema, or the compact wire schema (nulls left out), forbids args."""
    model, wire = _validators(tool)
    try:
        return not model.is_valid(args) or not wire.is_valid({k: v for k, v in args.items() if v is not None})
    except RecursionError:  # a value nested past what the validator walks: no schema allows that
        return True


def names_an_argument(tool, message: str, args: dict) -> bool:
    names = [*args, *tool.request.model_fields, "arguments"]
    return any(isinstance(n, str) and n and n in message for n in names)


def check_refusal(tool, args: dict, message: str) -> None:
    assert message and "internal error" not in message and "no answer within" not in message, message
    assert "Traceback" not in message, message
    assert names_an_argument(tool, message, args), f"{tool.name}: refusal names no argument: {message}"


def timed(fn, *a):
    start = time.monotonic()
    out = fn(*a)
    assert time.monotonic() - start < CALL_TIME_LIMIT_S, f"no answer within {CALL_TIME_LIMIT_S} s"
    return out


# --------------------------------------------------------------------------- the faces


def through_python_api(tool, args: dict) -> None:
    try:
        result = timed(tool.call, args)
    except (ValidationError, InputError) as exc:
        check_refusal(tool, args, str(exc))
        return
    assert not forbidden(tool, args), f"{tool.name} accepted what its schema forbids: {args!r:.300}"
    assert "findings" in type(result).model_fields


def through_mcp(portal, client: Client, tool, args: dict, *, over_json: bool) -> None:
    try:  # what the SDK client can send: it serializes the request first (and cannot, 3000 levels deep)
        args = pydantic_core.to_jsonable_python(args)  # as the server receives it
        if (
            over_json
        ):  # on the wire: JSON text, which cannot carry a lone surrogate, and the SDK writes inf/NaN null
            args = pydantic_core.from_json(pydantic_core.to_json(args, inf_nan_mode="null"))
    except (ValueError, RecursionError, pydantic_core.PydanticSerializationError):
        assume(False)

    async def call():
        with anyio.fail_after(CALL_TIME_LIMIT_S):
            try:
                return await client.call_tool(tool.name, args)
            except MCPError as exc:  # a JSON-RPC error: a message too deep to read (faces/wire.py)
                return exc

    result = portal.call(call)
    if isinstance(result, MCPError):
        assert result.error.code in (-32600, -32602), result
        return
    if result.is_error:
        check_refusal(tool, args, result.content[0].text)
        return
    assert not forbidden(tool, args), f"{tool.name} accepted what its schema forbids: {args!r:.300}"
    assert isinstance(result.structured_content, dict) and "findings" in result.structured_content


def _cli_value(value: object) -> str | None:
    """A value as the CLI's text: lists comma-joined, objects as JSON; None when text cannot carry it."""
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (ValueError, RecursionError):
            return None
    if isinstance(value, list):
        if any(isinstance(v, dict | list) for v in value):
            return None  # a list flag takes comma-separated words
        items = [_cli_value(v) for v in value]
        return None if any(i is None or "," in i or not i.strip() for i in items) else ",".join(items)
    return None if value is None else str(value)


def _faithful(value: object, schema: dict) -> bool:
    """Whether the CLI's text of ``value`` means the same JSON value (so the schema can judge it)."""
    kinds = {s.get("type") for s in schema.get("anyOf", [schema])} - {None, "null"}
    if isinstance(value, bool):
        return "boolean" in kinds
    if isinstance(value, int):
        return bool(kinds & {"integer", "number"})
    if isinstance(value, float):
        return "number" in kinds and value == value and abs(value) != float("inf")
    if isinstance(value, str):
        return kinds == {"string"} and "\x00" not in value
    return False


def through_cli(tool, args: dict) -> None:
    props, _ = _properties(tool)
    argv, judged = [tool.command], {}
    for name, value in args.items():
        if name not in props:
            continue  # argparse's own refusal of an unknown flag (usage and exit 2) is not ours to test
        flag = "--" + name.replace("_", "-")
        if props[name].get("type") == "boolean" or {"type": "boolean"} in props[name].get("anyOf", []):
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag[2:])
                judged[name] = value
            continue
        shown = _cli_value(value)
        if shown is None:
            continue
        argv.append(f"{flag}={shown}")
        if _faithful(value, props[name]):
            judged[name] = value
    out, err, stdin = io.StringIO(), io.StringIO(), sys.stdin
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        sys.stdin = io.StringIO("")  # '-' reads the launch from stdin: an empty one here
        try:
            code = timed(cli_main, argv)
        except SystemExit as stop:  # argparse: a missing value after a flag
            code = stop.code
        finally:
            sys.stdin = stdin
    message = err.getvalue()
    assert code in (0, 1, 2), (argv, code, message)
    assert "Traceback" not in message, message
    if code == 2:
        assert message.count("\n") == 1 or message.startswith("usage:"), message
        if not message.startswith("usage:"):
            check_refusal(tool, args, message.replace("-", "_"))
    elif len(judged) == len([a for a in argv[1:] if a.startswith("--")]):  # every flag's value judged
        assert not forbidden(tool, judged), f"moe-lc {tool.command} accepted what the schema forbids: {argv}"


def fuzz(tool, examples: int, check) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(args=arguments(tool))
    def one_call(args):
        check(tool, args)

    one_call()


@pytest.fixture(scope="module")
def in_process() -> Iterator[tuple]:
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(server)) as client,
    ):
        yield portal, client


@pytest.fixture(scope="module")
def over_stdio() -> Iterator[tuple]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "moe_long_context.server"])
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(params, mode="legacy")) as client,
    ):
        yield portal, client
        assert [t.name for t in portal.call(client.list_tools).tools] == [t.name for t in TOOLS]


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_python_api(tool):
    fuzz(tool, EXAMPLES, through_python_api)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_cli(tool):
    fuzz(tool, EXAMPLES, through_cli)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_mcp_in_process(in_process, tool):
    portal, client = in_process
    fuzz(tool, EXAMPLES, lambda t, a: through_mcp(portal, client, t, a, over_json=False))


@pytest.mark.slow
@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_mcp_over_stdio(over_stdio, tool):
    portal, client = over_stdio
    fuzz(tool, max(2, EXAMPLES // 2), lambda t, a: through_mcp(portal, client, t, a, over_json=True))
