"""More Megatron Core TransformerConfig / ModelParallelConfig checks (split from mcore_config_checks.py): fused
kernels and muP, router expert bias and device-limited routing, graphed selective recompute, p2p warm-up/flush
overlap. Each is upstream's condition, guards included; line numbers are in rules_transformer_config.yaml.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import Context
from ..findings import Finding
from .graphs import normalize
from .table import check, finding


@check("launch")
def kernels_and_mup(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:2837-2838 (DSA: no RoPE fusion), :2147-2151 (fused residual RMSNorm needs RMSNorm),
    :2189-2191 (fused single QKV RoPE: no output gate), :2196-2201 (muP base width > 0, unset: the hidden size).
    apply_rope_fusion unset is a Bridge recipe's own value, not judged; Megatron-LM's is on."""
    c, m = ctx.cfg, ctx.model
    if m.has_dsa and c.apply_rope_fusion:
        fix = "Add --no-rope-fusion." if c.launcher == "megatron-lm" else "Set model.apply_rope_fusion=false."
        yield finding(
            "DSA_ROPE_FUSION",
            f"{m.name} uses DSA (DeepSeek sparse attention) with RoPE fusion on"
            + (" (Megatron-LM's default)" if c.launcher == "megatron-lm" else "")
            + ": Megatron Core asserts DSAttention runs without apply_rope_fusion.",
            fix,
            ["apply_rope_fusion"],
        )
    if c.fused_residual_rmsnorm and m.normalization != "RMSNorm":
        yield finding(
            "FUSED_KERNEL_NEEDS",
            f"fused_residual_rmsnorm on {m.name}, which uses {m.normalization}: Megatron Core fuses the residual "
            "only into RMSNorm.",
            "Drop fused_residual_rmsnorm.",
            ["fused_residual_rmsnorm"],
        )
    if c.fused_single_qkv_rope and m.attention_output_gate:
        yield finding(
            "FUSED_KERNEL_NEEDS",
            f"fused_single_qkv_rope on {m.name}, whose attention has an output gate: Megatron Core does not support "
            "gated attention in the fused QKV + RoPE kernel.",
            "Drop fused_single_qkv_rope.",
            ["fused_single_qkv_rope"],
        )
    if c.use_mup and c.mup_base_hidden_size is not None and c.mup_base_hidden_size <= 0:
        yield finding(
            "MUP_BASE_HIDDEN_SIZE",
            f"use_mup with mup_base_hidden_size={c.mup_base_hidden_size}: Megatron Core asserts a positive base width.",
            f"Set mup_base_hidden_size > 0 (unset: the hidden size, {m.hidden_size}).",
            ["use_mup", "mup_base_hidden_size"],
        )


@check("moe")
def expert_bias_score(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:2284-2292: ``moe_router_enable_expert_bias`` needs ``moe_router_score_function`` in
    (sigmoid, sqrtsoftplus). The score function unset is the model's own (Bridge); Megatron-LM's default is
    softmax. The expert bias unset is a Bridge recipe's own value, not judged."""
    c, m = ctx.cfg, ctx.model
    if not c.moe_router_enable_expert_bias:
        return
    score = c.moe_router_score_function or m.moe_router_score_function
    if score not in ("sigmoid", "sqrtsoftplus"):
        yield finding(
            "MOE_EXPERT_BIAS_SCORE",
            f"moe_router_enable_expert_bias with the {score} router score function: Megatron Core's aux-loss-free "
            "expert bias works only with sigmoid or sqrtsoftplus scores.",
            "Set the router score function to sigmoid (--moe-router-score-function sigmoid), or turn the expert "
            "bias off.",
            ["moe_router_enable_expert_bias", "moe_router_score_function"],
        )


@check("graphs")
def graphed_selective_recompute(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:2567-2595, inside ``cuda_graph_impl != "none"`` and selective recompute: the router
    jitter is random, so a graphed MoE cannot be recomputed with it (:2567-2572); GTP with local graphs over the
    MoE under FP8/FP4 cannot recompute non-overlapped shared experts (:2574-2595). full_cudagraph is
    full_iteration or no modules (the whole layer)."""
    c, m = ctx.cfg, ctx.model
    if c.cuda_graph_impl == "none" or c.recompute_granularity != "selective":
        return
    g, recomputed = normalize(ctx), ctx.recompute_modules
    if c.moe_input_jitter_eps is not None and (g.full or "moe" in g.modules) and "moe" in recomputed:
        yield finding(
            "GRAPH_RECOMPUTE_MOE_RANDOM",
            f"moe_input_jitter_eps={c.moe_input_jitter_eps} with a graphed MoE ({g.impl}, modules "
            f"{g.modules or 'the whole layer'}) that moe recompute also recomputes: Megatron Core asserts graphed "
            "recompute takes no random numbers.",
            "Drop moe_input_jitter_eps, or moe from recompute_modules.",
            ["moe_input_jitter_eps", "cuda_graph_modules", "recompute_modules"],
        )
    shards = c.tensor_parallel_num_weight_shards
    gtp = shards // c.tp if shards else 1
    if (
        gtp > 1
        and c.cuda_graph_impl == "local"
        and c.precision != "bf16"
        and m.moe_shared_expert_intermediate_size is not None
        and not c.moe_shared_expert_overlap
        and (g.full or "moe" in g.modules or "moe_router" in g.modules)
        and "shared_experts" in recomputed
    ):
        yield finding(
            "GRAPH_GTP_SHARED_EXPERT_RECOMPUTE",
            f"GTP ({gtp} weight shards per TP rank) with local CUDA graphs capturing the shared experts under "
            f"{c.precision}: Megatron Core cannot recompute shared_experts there (te_checkpoint needs .backward(), "
            "the local graph warm-up uses .grad()).",
            "Drop shared_experts from recompute_modules, or use cuda_graph_impl=full_iteration.",
            ["recompute_modules", "cuda_graph_impl", "tensor_parallel_num_weight_shards"],
        )


@check("moe")
def topk_limited_devices(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:2339-2344: ``if self.moe_router_group_topk: if self.moe_router_topk_limited_devices:
    raise``. Only Bridge sets it (Megatron-LM has no flag); its group top-k is the model's."""
    c, m = ctx.cfg, ctx.model
    if c.moe_router_topk_limited_devices and m.moe_router_group_topk:
        yield finding(
            "MOE_TOPK_LIMITED_DEVICES",
            f"moe_router_topk_limited_devices={c.moe_router_topk_limited_devices} on {m.name}, which routes by group "
            f"(moe_router_group_topk={m.moe_router_group_topk}): Megatron Core refuses the deprecated setting.",
            "Drop moe_router_topk_limited_devices (group-limited routing replaces it).",
            ["moe_router_topk_limited_devices"],
        )


@check("pipeline")
def p2p_warmup_flush(ctx: Context) -> Iterator[Finding]:
    """model_parallel_config.py:571-576: ``overlap_p2p_comm_warmup_flush`` needs ``overlap_p2p_comm and not
    batch_p2p_comm``. Megatron-LM: overlap is on only with virtual stages and without --no-overlap-p2p-communication
    (LM arguments.py:966-979), batch_p2p_comm = not overlap (argument_utils.py:307). Bridge: without virtual
    stages (PP > 1 and VPP > 1) both CommOverlapConfig and Megatron Core's defaults leave overlap off; what an
    override list writes, or VPP with a recipe's comm_overlap, is the recipe's and not judged."""
    c = ctx.cfg
    if not c.overlap_p2p_comm_warmup_flush:
        return
    if c.launcher == "megatron-lm":
        refused = c.overlap_p2p_comm is False or ctx.vpp is None
    else:
        unwritten = c.overlap_p2p_comm is None and c.batch_p2p_comm is None
        refused = unwritten and not (c.pp > 1 and ctx.vpp is not None)
    if refused:
        yield finding(
            "PIPELINE_P2P_WARMUP_FLUSH",
            f"overlap_p2p_comm_warmup_flush with PP={c.pp}, VPP={ctx.vpp}: p2p overlap is off (it needs virtual "
            "pipeline stages), and Megatron Core overlaps warm-up and flush only with overlap_p2p_comm and no "
            "batch_p2p_comm.",
            "Use virtual pipeline stages with p2p overlap, or drop overlap_p2p_comm_warmup_flush.",
            ["overlap_p2p_comm_warmup_flush", "vpp", "pp"],
        )


_CAPACITY_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")


@check("moe")
def load_balancing(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:1652-1658 (a list of types needs a coefficient list of the same length) and
    :1660-1684 (a capacity factor, negative meaning none, works only with aux_loss, seq_aux_loss, global_aux_loss
    or none). Unset types or coefficients are a Bridge recipe's own, not judged."""
    c = ctx.cfg
    types, coeff = c.moe_router_load_balancing_type, c.moe_aux_loss_coeff
    if (
        isinstance(types, list)
        and coeff is not None
        and not (isinstance(coeff, list) and len(coeff) == len(types))
    ):
        yield finding(
            "MOE_LOAD_BALANCING_CONFIG",
            f"moe_router_load_balancing_type={types} with moe_aux_loss_coeff={coeff}: Megatron Core asserts one "
            "aux-loss coefficient per load-balancing type.",
            f"Give {len(types)} coefficients (--moe-aux-loss-coeff takes a list).",
            ["moe_router_load_balancing_type", "moe_aux_loss_coeff"],
        )
    if c.moe_capacity_factor is None or c.moe_capacity_factor < 0 or types is None:
        return
    bad = [t for t in (types if isinstance(types, list) else [types]) if t not in _CAPACITY_BALANCING]
    if bad:
        yield finding(
            "MOE_LOAD_BALANCING_CONFIG",
            f"moe_capacity_factor={c.moe_capacity_factor} with {', '.join(bad)} load balancing: Megatron Core's "
            "capacity factor works only with aux_loss, seq_aux_loss, global_aux_loss or none.",
            "Use one of those load-balancing types, or drop the capacity factor (dropless MoE).",
            ["moe_capacity_factor", "moe_router_load_balancing_type"],
        )


@check("moe")
def top1_pre_softmax(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:2328-2336: ``moe_router_topk == 1 and moe_router_score_function == "softmax" and not
    moe_router_pre_softmax and moe_router_load_balancing_type != "sinkhorn"`` raises (a softmax over one score has
    a zero gradient). Unset pre-softmax or load balancing is a Bridge recipe's own, not judged."""
    c, m = ctx.cfg, ctx.model
    types = c.moe_router_load_balancing_type
    if m.moe_router_topk != 1 or c.moe_router_pre_softmax is not False or types is None:
        return
    score = c.moe_router_score_function or m.moe_router_score_function
    if score == "softmax" and types != "sinkhorn":
        yield finding(
            "MOE_TOP1_PRE_SOFTMAX",
            f"{m.name} routes each token to one expert with a softmax router and no moe_router_pre_softmax: "
            "Megatron Core refuses it (a softmax over one score has a zero gradient).",
            "Add --moe-router-pre-softmax (Bridge model.moe_router_pre_softmax=true).",
            ["moe_router_pre_softmax", "moe_router_score_function", "moe_router_load_balancing_type"],
        )
