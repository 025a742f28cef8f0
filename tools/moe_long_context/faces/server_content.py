"""What the MCP server offers besides tools: resources (catalogs, rule table, layouts, skill) and a prompt.

Listings come from the engine itself (catalogs, rule table, layouts, registry), so they match the tools.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

from mcp import MCPError
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.types import INVALID_PARAMS, Completion
from pydantic import Field

from ..engine.representative import representative_layouts
from ..engine.rules import rule_table
from ..errors import InputError
from ..model.catalog import gpu_ids, gpus, load_model, models
from .registry import TOOLS

SKILL_NAME = "nemo-mbridge-perf-moe-long-context"
URI = "moe-lc://"

INSTRUCTIONS = (
    "Deterministic checks and numbers for long-context Mixture-of-Experts training on Megatron Bridge 0.6 / "
    "Megatron Core 0.19 / Transformer Engine 2.14. Call size_cp for the context-parallel size, then "
    "check_dp_budget on every layout before recommending it (MoE parallel folding: the product of all "
    "parallel sizes may exceed the GPU count). An 'error' finding is a rule Megatron enforces, with its "
    "source; quote the fixes the tools give instead of guessing. Resources hold the model and GPU catalogs, "
    "the rule table and checked representative layouts. A tool's text is a short summary (verdict, key "
    "numbers, errors with fixes); structuredContent holds the complete result, and detail='full' puts it in "
    "the text."
)


def _json(data: Any) -> str:
    return json.dumps(data, indent=1)


def skill_path() -> Path:
    """SKILL.md at the repository root, which holds this package under tools/ (editable or source install)."""
    return Path(__file__).resolve().parents[3] / "SKILL.md"


def skill_text() -> str:
    """The skill's SKILL.md, or a note saying why it is not available in this installation."""
    path = skill_path()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        text = ""
    if f"name: {SKILL_NAME}" in text.split("\n---", 1)[0]:
        return text
    return (
        f"# {SKILL_NAME}: skill text not available\n\n"
        f"This installation has no SKILL.md (looked for {path}). The skill text ships with the repository, "
        "not with the Python package: install from a clone (`pip install -e .`) to serve it. The tools, the "
        f"catalogs ({URI}catalog/models, {URI}catalog/gpus), the rule table ({URI}rules) and the "
        f"representative layouts ({URI}layouts) are all available.\n"
    )


def rules_data() -> list[dict[str, Any]]:
    return [dataclasses.asdict(rule) | {"severity": rule.severity.value} for rule in rule_table().values()]


def add_resources(server: MCPServer) -> None:
    @server.resource(
        f"{URI}catalog/models",
        name="model-catalog",
        title="Model catalog",
        description="Every catalog model as the engine sees it (architecture, MoE, attention), with sources.",
        mime_type="application/json",
    )
    def model_catalog() -> str:
        return _json([spec.model_dump(mode="json") for spec in models()])

    @server.resource(
        f"{URI}catalog/models/{{model_id}}",
        name="model",
        title="One catalog model",
        description="One model by catalog id or alias (deepseek-v3, dsv3, qwen3-235b-a22b, ...).",
        mime_type="application/json",
    )
    def one_model(model_id: str) -> str:
        try:
            return _json(load_model(model_id).model_dump(mode="json"))
        except InputError as exc:
            raise ResourceNotFoundError(str(exc)) from None

    @server.resource(
        f"{URI}catalog/gpus",
        name="gpu-catalog",
        title="GPU catalog",
        description="Every catalog GPU: memory, throughput, NVLink domain, FP8/FP4 recipes and flex backends.",
        mime_type="application/json",
    )
    def gpu_catalog() -> str:
        return _json([gpu.model_dump(mode="json") for gpu in gpus()])

    @server.resource(
        f"{URI}rules",
        name="rules",
        title="Rule table",
        description="Every rule the engine checks: code, family, severity, when Megatron raises it, source.",
        mime_type="application/json",
    )
    def rules() -> str:
        return _json(rules_data())

    @server.resource(
        f"{URI}rules/upstream",
        name="upstream-checks",
        title="Upstream checks",
        description="Every config-time check of Megatron-LM, Megatron Core, Bridge and TE at the target versions: "
        "file, line, what it requires, and whether a rule models it (or why it does not apply).",
        mime_type="application/json",
    )
    def upstream() -> str:
        from ..engine.rules.upstream import checked, inventory_rows

        return _json({"checked": checked().model_dump(), "checks": inventory_rows()})

    @server.resource(
        f"{URI}layouts",
        name="representative-layouts",
        title="Representative long-context layouts",
        description="Published long-context MoE layouts (DeepSeek-V3 128K/256K on H100, Qwen3-235B 128K on "
        "GB200) as tool arguments, with their source, expected DP/EDP and what this project filled in.",
        mime_type="application/json",
    )
    def layouts() -> str:
        return _json([layout.model_dump(mode="json") for layout in representative_layouts()])

    @server.resource(
        f"{URI}layouts/{{layout_id}}",
        name="layout",
        title="One representative layout's tool arguments",
        description="The arguments of one published layout by id (deepseek-v3-128k-h100, ...), to pass to any "
        "tool as they are.",
        mime_type="application/json",
    )
    def one_layout(layout_id: str) -> str:
        by_id = {layout.id: layout for layout in representative_layouts()}
        if layout_id not in by_id:
            raise ResourceNotFoundError(
                f"layout_id={layout_id!r} is not allowed: one of {', '.join(by_id)} ({URI}layouts lists them)"
            )
        return _json(by_id[layout_id].config)

    @server.resource(
        f"{URI}skill",
        name="skill",
        title="Skill text (SKILL.md)",
        description=f"The {SKILL_NAME} agent skill: how to plan long-context MoE training with these tools.",
        mime_type="text/markdown",
    )
    def skill() -> str:
        return skill_text()


PROMPT_NAME = "plan_long_context_moe"
ModelArg = Annotated[
    str, Field(description="Catalog model id or alias, e.g. deepseek-v3 (completion lists them).")
]
GpuArg = Annotated[str, Field(description="GPU catalog id: h100, h200, b200, b300, gb200 or gb300.")]
GpusArg = Annotated[str, Field(description="GPUs in the job, a whole number, e.g. 256.")]
SeqArg = Annotated[str, Field(description="Sequence length in tokens, a whole number, e.g. 131072.")]


def _whole_number(name: str, value: Any) -> str:
    """A prompt argument that must be a positive whole number; anything else is refused, echoed as given."""
    text = value.strip() if isinstance(value, str) else value
    if text == "":
        return ""
    if not isinstance(text, str) or not text.isdigit() or int(text) < 1:
        raise MCPError(
            INVALID_PARAMS, f"{PROMPT_NAME}: {name}={value!r} is not allowed: a positive whole number"
        )
    return str(int(text))


def planning_prompt(
    model: ModelArg = "", gpu: GpuArg = "", num_gpus: GpusArg = "", seq_len: SeqArg = ""
) -> str:
    """The planning procedure for agents that do not load skills; tools are listed from the registry."""
    given = {
        "model": model.strip(),
        "gpu": gpu.strip(),
        "num_gpus": _whole_number("num_gpus", num_gpus),
        "seq_len": _whole_number("seq_len", seq_len),
    }
    request = ", ".join(f"{k}={v}" for k, v in given.items() if v) or "nothing given yet"
    missing = [k for k, v in given.items() if not v]
    tools = "\n".join(f"- `{tool.name}` ({tool.title}): {tool.description}" for tool in TOOLS)
    ask = f"Ask the user for {', '.join(missing)} first.\n" if missing else ""
    return f"""Plan a long-context Mixture-of-Experts training run on Megatron Bridge / Megatron Core.
Request: {request}.
{ask}
Use the tools of this server for every number and every check; do not estimate by hand:
{tools}

Procedure:
1. Call `size_cp` for the model, GPU and sequence length; keep its cp, cp_comm_type and alternatives.
2. Choose TP, PP, VPP and EP around that CP and call `check_dp_budget` on the full layout with the GPU count
   and a global batch. MoE parallel folding means TP x CP x EP x PP may exceed the GPU count; DP and EDP
   come from the tool. Apply the fixes and alternatives it returns until no finding is an error.
3. Selective recompute uses Megatron Core labels (mla_up_proj, layernorm, moe_act, moe, mlp,
   shared_experts), never the informal up_proj or norm; prefer them to full recompute at long context.
4. Before enabling CUDA graphs, call `validate_cuda_graph_shapes` with the same layout and recompute.
5. Compare with the checked layouts in the resource {URI}layouts when the model is one of them.

Answer with the layout, the numbers the tools returned (DP, EDP, microbatches, tokens per shard), each
remaining warning and its fix, and the Megatron Bridge overrides to set.
"""


def add_prompts(server: MCPServer) -> None:
    server.prompt(
        name=PROMPT_NAME,
        title="Plan long-context MoE training",
        description="Step-by-step planning of a long-context MoE run with this server's tools "
        "(for agents that do not load the skill).",
    )(planning_prompt)


def completion_values(argument: str, prefix: str) -> list[str]:
    """Catalog ids (and model aliases) starting with ``prefix`` for a model or GPU argument; else none."""
    if argument in ("model", "model_id"):
        known = sorted({name for spec in models() for name in (spec.id, *spec.aliases)})
    elif argument == "gpu":
        known = gpu_ids()
    else:
        return []
    return [name for name in known if name.lower().startswith(prefix.strip().lower())]


def add_completions(server: MCPServer) -> None:
    @server.completion()
    async def complete(ref, argument, context) -> Completion:
        values = completion_values(argument.name, argument.value)
        return Completion(values=values[:100], total=len(values), has_more=len(values) > 100)
