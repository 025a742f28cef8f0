"""Fuzzed tool arguments, drawn from each tool's own input schema, never crash or hang the server.

Every property gets values of its declared type (including bounds +-1 and catalog ids), numbers far out of
range, values of the wrong type, and calls carry unknown keys. Each call must come back within a few
seconds as a result or a readable tool error; an engine exception surfacing as an internal error also fails.
MOE_LC_FUZZ_EXAMPLES sets the examples per tool in process (default 300; a fifth of it over stdio).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters

from moe_long_context.faces.registry import TOOLS
from moe_long_context.faces.server import server
from moe_long_context.model.catalog import gpu_ids, model_ids

CALL_TIME_LIMIT_S = 10
EXAMPLES = int(os.environ.get("MOE_LC_FUZZ_EXAMPLES", "300"))
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

extreme_numbers = st.sampled_from(
    [0, -1, -(2**63), 2**63, 10**30, 2**31 - 1, 1e308, -1e308, 0.5, float("nan")]
)
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=40),
    st.lists(st.integers(), max_size=4),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
)
hf_config = st.fixed_dictionaries(
    {
        "model_type": st.sampled_from(
            ["deepseek_v3", "qwen3_moe", "qwen3_next", "gpt_oss", "mixtral", "llama"]
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
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
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


@st.composite
def arguments(draw, tool) -> dict:
    """Mostly in-range arguments with up to three hostile values, sometimes an unknown key."""
    props = tool.request.model_json_schema()["properties"]
    required = set(tool.request.model_json_schema().get("required", ()))
    hostile = set(draw(st.lists(st.sampled_from(sorted(props)), max_size=3, unique=True)))
    args = {}
    for name, prop in props.items():
        if name in hostile:
            args[name] = draw(beyond(prop) | extreme_numbers | junk)
        elif name in required or draw(st.integers(0, 3)) == 0:
            args[name] = draw(in_range(prop, name))
    if draw(st.integers(0, 4)) == 0:
        args[draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in props))] = draw(junk)
    return args


async def _call(client: Client, name: str, args: dict):
    with anyio.fail_after(CALL_TIME_LIMIT_S):
        return await client.call_tool(name, args)


def check_answer(result) -> None:
    if result.is_error:
        text = result.content[0].text
        assert text and "internal error" not in text and "no answer within" not in text, text
    else:
        assert isinstance(result.structured_content, dict) and "findings" in result.structured_content


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


def fuzz(portal, client, tool, examples: int) -> None:
    """Call ``tool`` with ``examples`` fuzzed argument sets through ``client`` (running in ``portal``)."""

    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(args=arguments(tool))
    def one_call(args):
        check_answer(portal.call(_call, client, tool.name, args))

    one_call()


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_fuzzed_arguments_in_process(in_process, tool):
    fuzz(*in_process, tool, examples=EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_fuzzed_arguments_over_stdio(over_stdio, tool):
    fuzz(*over_stdio, tool, examples=max(1, EXAMPLES // 5))
