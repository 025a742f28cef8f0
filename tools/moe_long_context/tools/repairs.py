"""Repairs: for each error code, the smallest change of engine fields that resolves it.

Used by lint_config to build a corrected configuration ("each fix applied, nothing else changed").
A repair returns a dict of fields to set, or None when no change can be chosen without the user
(for example a model that does not fit any layout). Choices mirror the fix text of the findings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..engine.context import Context
from ..engine.pipeline import propose_splits
from ..engine.rules.recompute import INFORMAL_LABELS

Patch = dict[str, Any] | None
SPLIT_FIELDS = (
    "pipeline_layout",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
)


def _layout(ctx: Context) -> Patch:
    from .check_dp_budget import nearest_alternatives

    alts = nearest_alternatives(ctx, limit=1)
    return dict(alts[0].settings) if alts else None


def _split(ctx: Context) -> Patch:
    proposals = propose_splits(ctx.model.num_layers, ctx.cfg.pp, ctx.vpp, ctx.mtp_layers)
    usable = [p for p in proposals if p.settings]
    if not usable:
        return None
    cleared = {"pipeline_layout": None, "account_for_embedding_in_pipeline_split": False,
               "account_for_loss_in_pipeline_split": False, "num_layers_in_first_pipeline_stage": None,
               "num_layers_in_last_pipeline_stage": None}  # fmt: skip
    settings = {**cleared, **usable[0].settings}
    if "pipeline_layout" in usable[0].settings and ctx.cfg.launcher == "megatron-lm":
        settings["vpp"] = None  # Megatron-LM derives VPP from the layout and refuses both
    return settings


def _tp_within_kv_heads(ctx: Context) -> Patch:
    from ..engine.rules.providers import max_tp

    limit = max_tp(ctx.model)
    return {"tp": max(t for t in (1, 2, 4, 8) if t <= limit)} if limit else None


def _gbs(ctx: Context) -> Patch:
    c, dp = ctx.cfg, ctx.layout.dp
    if dp is None:
        return None
    unit = c.mbs * dp
    m = max(1, round((c.gbs or unit) / unit))
    if ctx.vpp and ctx.vpp > 1:
        m = max(c.pp, math.ceil(m / c.pp) * c.pp)
    return {"gbs": m * unit}


def _seq(ctx: Context) -> Patch:
    """The nearest sequence length that splits over 2 x CP, CP x TP (SP) and the FP8 GEMM row multiple."""
    from ..engine.rules.precision import ROW_MULTIPLE, gathered_multiple

    c = ctx.cfg
    shard = c.cp * (c.tp if ctx.sequence_parallel else 1)
    step = math.lcm(
        2 * c.cp if c.cp > 1 else 1,
        shard * ROW_MULTIPLE.get(c.precision, 1),
        c.cp * (gathered_multiple(c.precision, ctx.gpu) or 1),
    )
    return {"seq_len": max(step, round(c.seq_len / step) * step)}


def _comm_type(ctx: Context) -> Patch:
    from .size_cp import comm_type_for

    if ctx.cfg.cp == 1:  # e.g. a2a+p2p without sizes at CP = 1: no comm type is needed at all
        return {"cp_comm_type": None, "hierarchical_cp_sizes": None}
    comm, hierarchy, _ = comm_type_for(ctx.model, ctx.gpu, ctx.cfg.tp, ctx.cfg.cp, ctx.cfg.packed_sequences)
    if comm is None:
        return None
    return {"cp_comm_type": comm, "hierarchical_cp_sizes": hierarchy}


def _without(field: str, *names: str) -> Callable[[Context], Patch]:
    def repair(ctx: Context) -> Patch:
        current = list(getattr(ctx.cfg, field) or [])
        kept = [n for n in current if n not in names]
        return {field: kept} if kept != current else None

    return repair


def _recompute_labels(ctx: Context) -> Patch:
    from ..engine.config import RECOMPUTE_MODULES

    fixed = []
    for name in ctx.recompute_modules:
        real = name if name in RECOMPUTE_MODULES else INFORMAL_LABELS.get(name)
        if real and real not in fixed:
            fixed.append(real)
    return {"recompute_modules": fixed}


def _graph_modules_known(ctx: Context) -> Patch:
    from ..engine.rules.graphs import CUDA_GRAPH_MODULES

    mods = [m for m in ctx.cfg.cuda_graph_modules or [] if m in CUDA_GRAPH_MODULES]
    return {"cuda_graph_modules": mods}


def _dropless_graphs(ctx: Context) -> Patch:
    mods = [m for m in ctx.cfg.cuda_graph_modules or [] if m != "moe"]
    for extra in ("moe_router", "moe_preprocess"):
        if extra not in mods:
            mods.append(extra)
    return {"cuda_graph_modules": mods}


def _moe_recompute_vs_router(ctx: Context) -> Patch:
    mods = [m for m in ctx.recompute_modules if m != "moe"]
    if ctx.cfg.moe_grouped_gemm and "moe_act" not in mods:
        mods.append("moe_act")
    return {"recompute_modules": mods}


def _dispatcher_for_gpu(ctx: Context) -> Patch:
    gpu = ctx.gpu
    if gpu is None:
        return {"dispatcher": "alltoall"}
    if gpu.is_nvl72 and "hybridep" in gpu.flex_backends:
        return {"dispatcher": "flex-hybridep"}
    return {"dispatcher": "alltoall"}


def _precision_for_gpu(ctx: Context) -> Patch:
    gpu = ctx.gpu
    if gpu is None:
        return None
    for recipe in ("mxfp8", "fp8-blockwise", "fp8-tensorwise"):
        if recipe in gpu.quant_recipes:
            return {"precision": recipe}
    return {"precision": "bf16"}


def _offload_modules(ctx: Context) -> Patch:
    mods = list(ctx.cfg.activation_offload or [])
    if "attn_proj" in mods and "core_attn" not in mods:
        mods.append("core_attn")
    if "fused_group_mlp" in mods:
        mods = [m for m in mods if m not in ("expert_fc1", "moe_act")]
    return {"activation_offload": mods}


def _ep_overlap_recompute(ctx: Context) -> Patch:
    c = ctx.cfg
    patch: dict[str, Any] = {"recompute_method": None, "recompute_num_layers": None}
    if c.recompute_granularity == "full":
        patch["recompute_granularity"] = "selective"
        patch["recompute_modules"] = [
            m for m in ("layernorm", "moe_act") if m != "moe_act" or c.moe_grouped_gemm
        ]
    else:
        patch["recompute_modules"] = [m for m in ctx.recompute_modules if m != "moe"]
    return patch


REPAIRS: dict[str, Callable[[Context], Patch]] = {
    # layout
    "LAYOUT_WORLD_DIVISIBILITY": _layout,
    "EXPERT_WORLD_DIVISIBILITY": _layout,
    "EP_DIVIDES_EXPERTS": _layout,
    "TP_DIVIDES_HEADS": _layout,
    "QUERY_GROUPS_TP": _layout,
    "GDN_HEADS_TP_CP": _layout,
    "MOE_BIAS_NEEDS_ETP1": lambda ctx: {"etp": 1},
    "MOE_TP_NEEDS_SP": lambda ctx: {"sequence_parallel": True},
    # pipeline and batch
    "VPP_NEEDS_PP": lambda ctx: {"vpp": None},
    "PP_LAYERS_NOT_DIVISIBLE": _split,
    "PP_LAYERS_NOT_DIVISIBLE_VPP": _split,
    "PP_UNEVEN_NOT_DIVISIBLE": _split,
    "PP_UNEVEN_WITH_ACCOUNT_FOR": _split,
    "PP_LAYOUT_INVALID": _split,
    "PP_LAYOUT_CONFLICT": _split,
    "PP_LAYOUT_VPP_MISMATCH": lambda ctx: {"vpp": ctx.split.vpp},
    "GBS_DIVISIBILITY": _gbs,
    "PACKED_MBS_ONE": lambda ctx: {"mbs": 1},
    "VPP_MICROBATCHES": _gbs,
    # sequence and context parallelism
    "SEQ_CP_DIVISIBILITY": _seq,
    "SEQ_CP_TP_DIVISIBILITY": _seq,
    "PRECISION_SHAPE": _seq,
    "CP_A2A_HEADS": _comm_type,
    "CP_MLA_COMM_TYPE": _comm_type,
    "CP_SLIDING_WINDOW_COMM_TYPE": _comm_type,
    "CP_SINKS_COMM_TYPE": _comm_type,
    "CP_THD_COMM_TYPE": _comm_type,
    "CP_HIERARCHY_REQUIRED": _comm_type,
    "CP_HIERARCHY_PRODUCT": _comm_type,
    # CUDA graphs
    "GRAPH_MODULE_UNKNOWN": _graph_modules_known,
    "GRAPH_FULL_ITERATION_MODULES": lambda ctx: {"cuda_graph_modules": []},
    "GRAPH_FULL_ITERATION_NAN_CHECK": lambda ctx: {"check_for_nan_in_loss": False},
    "GRAPH_LOCAL_SCOPED_BRIDGE": lambda ctx: {"cuda_graph_impl": "transformer_engine"},
    "GRAPH_MOE_AND_ROUTER": _without("cuda_graph_modules", "moe"),
    "GRAPH_PREPROCESS_NEEDS_ROUTER": lambda ctx: {
        "cuda_graph_modules": [*(ctx.cfg.cuda_graph_modules or []), "moe_router"]
    },
    "GRAPH_MLP_ALL_MOE": _without("cuda_graph_modules", "mlp"),
    "GRAPH_MOE_NEEDS_DROP_PAD": _dropless_graphs,
    "GRAPH_PREPROCESS_D2H": _without("cuda_graph_modules", "moe_preprocess"),
    "GRAPH_FULL_RECOMPUTE": lambda ctx: {
        "cuda_graph_impl": "full_iteration",
        "cuda_graph_modules": [],
        "check_for_nan_in_loss": False,
    },
    "GRAPH_MOE_RECOMPUTE_ROUTER": _moe_recompute_vs_router,
    "GRAPH_ACTIVATION_OFFLOAD": lambda ctx: {
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_modules": [m for m in ctx.cfg.cuda_graph_modules or [] if m != "moe"],
    },
    "GRAPH_EP_OVERLAP_MODULES": _without("cuda_graph_modules", "moe", "mlp"),
    "GRAPH_EXPANDABLE_SEGMENTS": lambda ctx: {"nccl_graph_register": False},
    "OFFLOAD_ENV_MISSING": lambda ctx: {"nvte_cpu_offload_v1": True},
    "GRAPH_STATIC_SHAPES": lambda ctx: {"variable_seq_lengths": False},
    "GRAPH_PACKED_PAD_TO_MAX": lambda ctx: {"pad_to_max_length": True},
    "GRAPH_PACKED_CU_SEQLENS": lambda ctx: {"pad_to_max_length": True, "pad_cu_seqlens": True},
    # recompute
    "RECOMPUTE_UNKNOWN_MODULE": _recompute_labels,
    "RECOMPUTE_METHOD_REQUIRED": lambda ctx: {
        "recompute_method": ctx.cfg.recompute_method or "uniform",
        "recompute_num_layers": ctx.cfg.recompute_num_layers or 1,
    },
    "RECOMPUTE_SELECTIVE_NUM_LAYERS": lambda ctx: {"recompute_num_layers": None},
    "RECOMPUTE_SELECTIVE_METHOD": lambda ctx: {"recompute_method": None},
    "RECOMPUTE_MOE_ACT_GROUPED_GEMM": lambda ctx: {"moe_grouped_gemm": True},
    "RECOMPUTE_MLA_UP_PROJ": _without("recompute_modules", "mla_up_proj"),
    "RECOMPUTE_GDN_NORM_OUT": _without("recompute_modules", "gdn_norm_out"),
    "RECOMPUTE_SHARED_EXPERT_OVERLAP": lambda ctx: {"moe_shared_expert_overlap": False},
    "RECOMPUTE_FP8_DELAYED": lambda ctx: {"precision": "fp8-tensorwise"},
    "RECOMPUTE_EP_OVERLAP": _ep_overlap_recompute,
    "RECOMPUTE_MOE_OFFLOAD": _without("recompute_modules", "moe"),
    "OFFLOAD_MODULE_RULES": _offload_modules,
    "OFFLOAD_NEEDS_MODULES": lambda ctx: {"activation_offload": None, "nvte_cpu_offload_v1": None},
    # MoE
    "DISPATCHER_GPU": _dispatcher_for_gpu,
    "DISPATCHER_TPXEP": lambda ctx: {"dispatcher": "alltoall"},
    "DISPATCHER_DEEPEP_PAD": lambda ctx: {"dispatcher": "alltoall"},
    "DISPATCHER_ALLGATHER_VARLEN": lambda ctx: {"dispatcher": "alltoall"},
    "DISPATCHER_ALLGATHER_PADDING": lambda ctx: (
        {"dispatcher": "alltoall"}
        if ctx.cfg.precision != "bf16"
        else {"moe_router_padding_for_quantization": False}
    ),
    "DISPATCHER_SHARED_OVERLAP": lambda ctx: {"dispatcher": "alltoall"},
    "MOE_PAD_NEEDS_CAPACITY": lambda ctx: {"moe_capacity_factor": 1.0},
    "EP_OVERLAP_RULES": lambda ctx: {"ep_overlap": False},
    # precision and optimizer
    "PRECISION_GPU": _precision_for_gpu,
    "PRECISION_PARAM_GATHER": lambda ctx: {"fp8_param_gather": False},
    "OFFLOAD_NEEDS_PRECISION_AWARE": lambda ctx: {
        "use_precision_aware_optimizer": True,
        "use_distributed_optimizer": True,
    },
    "PRECISION_AWARE_NEEDS_DISTOPT": lambda ctx: {"use_distributed_optimizer": True},
    "OFFLOAD_FP8_PARAM_GATHER": lambda ctx: {"fp8_param_gather": False},
    # front ends
    "LM_CROSS_ENTROPY_TE": lambda ctx: {"cross_entropy_fusion": "native"},
    "LM_TP_COMM_OVERLAP_NEEDS_SP": lambda ctx: (
        {"sequence_parallel": True} if ctx.cfg.tp > 1 else {"tp_comm_overlap": False}
    ),
    "DELAY_WGRAD_NEEDS_EP_OVERLAP": lambda ctx: {"delay_wgrad_compute": False},
    # what a family's Bridge provider refuses (rules/providers.py)
    "PROVIDER_NO_CP": lambda ctx: {"cp": 1, "cp_comm_type": None, "hierarchical_cp_sizes": None},
    "PROVIDER_TP_KV_HEADS": _tp_within_kv_heads,
    "GEMMA4_MOE_CUDA_GRAPHS": lambda ctx: {"cuda_graph_impl": "none", "cuda_graph_modules": None},
    "GEMMA4_MOE_SHARED_EXPERT_OVERLAP": lambda ctx: {"moe_shared_expert_overlap": False},
    "GEMMA4_MOE_LAYERNORM_RECOMPUTE": _without("recompute_modules", "layernorm"),
    # hybrid stacks (rules/mamba.py, rules/hybrid_blocks.py)
    "HYBRID_VPP_BRIDGE": lambda ctx: {"vpp": None},
    "HYBRID_VPP_NEEDS_PIPES": lambda ctx: {"vpp": None},
    "HYBRID_LM_SPLIT_FLAGS": lambda ctx: {
        "pipeline_layout": None,
        "account_for_embedding_in_pipeline_split": False,
        "account_for_loss_in_pipeline_split": False,
    },
    "LATENT_MOE_SHARED_EXPERT_OVERLAP": lambda ctx: {"moe_shared_expert_overlap": False},
    "DSA_ROPE_FUSION": lambda ctx: {"apply_rope_fusion": False},
    "FINETUNE_CP_PER_TOKEN_LOSS": lambda ctx: {"calculate_per_token_loss": True},
}


# Rules with more than one fix: each alternative as (what it does, the repair), in order of preference (the
# smallest change first). lint_config keeps the first one that resolves the error without a new one and fits
# the GPU with headroom, and reports the others with the GiB they would need.
def _recompute_without_moe_keep_graphs(ctx: Context) -> Patch:
    return _moe_recompute_vs_router(ctx)


def _graphs_attn_only(ctx: Context) -> Patch:
    mods = [
        m for m in ctx.cfg.cuda_graph_modules or [] if m not in ("moe", "moe_router", "moe_preprocess", "mlp")
    ]
    if not mods:
        mods = ["attn"]
    return {"cuda_graph_modules": mods}


def _ep_overlap_off(ctx: Context) -> Patch:
    return {"ep_overlap": False}


ALTERNATIVES: dict[str, list[tuple[str, Callable[[Context], Patch]]]] = {
    "RECOMPUTE_EP_OVERLAP": [
        ("keep EP overlap and change the recompute", _ep_overlap_recompute),
        ("keep the recompute and turn EP overlap off", _ep_overlap_off),
    ],
    "GRAPH_MOE_RECOMPUTE_ROUTER": [
        ("recompute moe_act instead of moe and keep the router graphs", _recompute_without_moe_keep_graphs),
        ("keep moe recompute and capture only attention in CUDA graphs", _graphs_attn_only),
    ],
    "GRAPH_PREPROCESS_NEEDS_ROUTER": [
        ("capture moe_router as well", REPAIRS["GRAPH_PREPROCESS_NEEDS_ROUTER"]),
        ("stop capturing moe_preprocess", _without("cuda_graph_modules", "moe_preprocess")),
    ],
    "RECOMPUTE_MOE_OFFLOAD": [
        ("drop moe from the recompute modules", _without("recompute_modules", "moe")),
        ("keep moe recompute and turn activation offload off", lambda ctx: {"activation_offload": None}),
    ],
}


def _layout_options(ctx: Context) -> list[tuple[str, Callable[[Context], Patch]]]:
    """The nearest accepted layouts, nearest first."""
    from .check_dp_budget import nearest_alternatives

    out = []
    for alt in nearest_alternatives(ctx, limit=6):
        settings = dict(alt.settings)
        label = "layout " + " ".join(
            f"{k.upper()}={v}" for k, v in settings.items() if k in ("tp", "cp", "pp", "ep")
        )
        out.append((label, lambda _ctx, s=settings: s))
    return out


_LAYOUT_CODES = {code for code, fn in REPAIRS.items() if fn is _layout}


def repair_options(code: str, ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    """Every fix for an error code that changes something, as (description, fields to set), preferred first."""
    if code in _LAYOUT_CODES:
        options = _layout_options(ctx)
    else:
        options = ALTERNATIVES.get(code) or ([("the rule's fix", REPAIRS[code])] if code in REPAIRS else [])
    out = []
    for label, fn in options:
        patch = fn(ctx)
        patch = {k: v for k, v in (patch or {}).items() if getattr(ctx.cfg, k) != v}
        if patch and all(patch != other for _, other in out):
            out.append((label, patch))
    return out


def repair_patch(code: str, ctx: Context) -> Patch:
    fn = REPAIRS.get(code)
    return fn(ctx) if fn else None
