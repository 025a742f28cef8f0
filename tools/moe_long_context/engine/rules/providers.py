"""What a family's Megatron Bridge 0.6.2 model provider refuses when it builds the model, beyond Megatron Core's own
checks: MiMo-V2-Flash asserts CP = 1 and TP at most its smaller KV-head count (``MiMoV2FlashModelProvider.provide``),
and Gemma-4's MoE forward refuses CUDA graphs, shared-expert overlap and selective layernorm recompute
(``_validate_gemma4_moe_orchestration``, called from ``Gemma4ModelProvider.finalize``). These families exist only
through Bridge's custom layers, so the rules hold for every launcher. Step-3.5 also needs a per-layer RoPE base that
Megatron Core 0.19.2 lacks (a warning: the model builds and trains, with other numerics).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...model.specs import ModelSpec
from ..context import Context
from ..findings import Finding
from .table import check, finding

# Families whose Bridge provider allows no context parallelism, and those whose TP may not exceed the fewest
# KV heads of any layer shape.
NO_CONTEXT_PARALLEL = {"mimo_v2_flash": "MiMo-V2-Flash"}
TP_WITHIN_KV_HEADS = {"mimo_v2_flash": "MiMo-V2-Flash"}
GEMMA4_MOE = "gemma4"


def max_cp(model: ModelSpec) -> int | None:
    """The largest CP the family's Bridge provider builds (None: no limit beyond Megatron's)."""
    return 1 if model.family in NO_CONTEXT_PARALLEL else None


def max_tp(model: ModelSpec) -> int | None:
    """The largest TP the family's Bridge provider builds (None: no limit beyond Megatron's)."""
    if model.family not in TP_WITHIN_KV_HEADS:
        return None
    return min(s.num_query_groups for s in model.softmax_attention_shapes)


@check("cp")
def provider_context_parallel(ctx: Context) -> Iterator[Finding]:
    limit = max_cp(ctx.model)
    if limit is not None and ctx.cfg.cp > limit:
        name = NO_CONTEXT_PARALLEL[ctx.model.family]
        yield finding(
            "PROVIDER_NO_CP",
            f"{name} cannot use context parallelism: Bridge's provider asserts CP <= 1 when it builds the model "
            f"(CP={ctx.cfg.cp}).",
            "Set CP=1 and shard the sequence another way (TP with sequence parallelism, or recompute / offload "
            "the activations); at long context the per-GPU activations then grow with the whole sequence.",
            ["cp"],
        )


@check("layout")
def provider_tp_kv_heads(ctx: Context) -> Iterator[Finding]:
    limit = max_tp(ctx.model)
    if limit is not None and ctx.cfg.tp > limit:
        name = TP_WITHIN_KV_HEADS[ctx.model.family]
        yield finding(
            "PROVIDER_TP_KV_HEADS",
            f"{name} needs TP <= its fewest KV heads ({limit}); TP={ctx.cfg.tp} (Bridge's provider asserts it).",
            f"Use TP in {[t for t in (1, 2, 4, 8) if t <= limit]}.",
            ["tp"],
        )


@check("launch")
def step35_rope_per_layer(ctx: Context) -> Iterator[Finding]:
    if ctx.model.family == "step3p5":
        yield finding(
            "STEP35_ROPE_PER_LAYER",
            "Megatron Core 0.19.2 has no per-layer RoPE (rotary_base_per_layer is Megatron-LM PR #4473, dev branch "
            "only): Bridge 0.6.2 builds Step-3.5-Flash with the first layer's rotary base for every layer, so the "
            "sliding-window layers lose their own base and the model no longer computes what the checkpoint did.",
            "Train Step-3.5 on a Megatron Core with rotary_base_per_layer (Bridge's Step-3.5 README asks for "
            "Megatron-LM's dev branch); memory and step time are unaffected.",
            [],
        )


@check("graphs")
def gemma4_moe_cuda_graphs(ctx: Context) -> Iterator[Finding]:
    if ctx.model.family == GEMMA4_MOE and ctx.cfg.cuda_graph_impl != "none":
        yield finding(
            "GEMMA4_MOE_CUDA_GRAPHS",
            f"Gemma-4 MoE's own forward (separate router, shared and routed inputs) refuses "
            f"cuda_graph_impl={ctx.cfg.cuda_graph_impl!r} when Bridge finalizes the provider.",
            "Set cuda_graph_impl none (and no cuda_graph_modules).",
            ["cuda_graph_impl"],
        )


@check("moe")
def gemma4_moe_shared_expert_overlap(ctx: Context) -> Iterator[Finding]:
    if ctx.model.family == GEMMA4_MOE and ctx.cfg.moe_shared_expert_overlap:
        yield finding(
            "GEMMA4_MOE_SHARED_EXPERT_OVERLAP",
            "Gemma-4 MoE refuses moe_shared_expert_overlap=True: its shared expert has its own input norm.",
            "Set moe_shared_expert_overlap false.",
            ["moe_shared_expert_overlap"],
        )


@check("recompute")
def gemma4_moe_layernorm_recompute(ctx: Context) -> Iterator[Finding]:
    if (
        ctx.model.family == GEMMA4_MOE
        and ctx.cfg.recompute_granularity == "selective"
        and "layernorm" in ctx.recompute_modules
    ):
        yield finding(
            "GEMMA4_MOE_LAYERNORM_RECOMPUTE",
            "Gemma-4 MoE refuses selective layernorm recompute (its MoE block normalizes the router, shared and "
            "routed inputs separately).",
            "Drop layernorm from recompute_modules (moe_act, mlp or moe recompute are accepted).",
            ["recompute_modules"],
        )
