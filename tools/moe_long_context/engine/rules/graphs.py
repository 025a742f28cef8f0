"""CUDA-graph checks: implementation and modules, dropless MoE, recompute and offload interplay, shapes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..context import Context
from ..findings import Finding
from .table import check, finding

CUDA_GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")


@dataclass
class GraphSetting:
    """cuda_graph_impl and cuda_graph_modules after Megatron's normalisation of deprecated values."""

    impl: str
    modules: list[str]
    notes: list[Finding] = field(default_factory=list)

    @property
    def on(self) -> bool:
        return self.impl != "none"

    @property
    def whole_layer(self) -> bool:
        """Per-layer capture of the whole layer (empty module list)."""
        return self.impl in ("local", "transformer_engine") and not self.modules

    @property
    def full(self) -> bool:
        """'Full cudagraph' in Megatron's sense: full_iteration, or an empty per-layer scope."""
        return self.impl == "full_iteration" or not self.modules


def normalize(ctx: Context) -> GraphSetting:
    impl = ctx.cfg.cuda_graph_impl
    raw = list(ctx.cfg.cuda_graph_modules or [])
    setting = GraphSetting(impl, [])
    if raw == ["full"]:
        setting.notes.append(
            finding(
                "GRAPH_SCOPE_RENAMED",
                "cuda_graph_modules=['full'] is deprecated; an empty list captures the whole layer.",
                "Pass no modules (empty list) instead of 'full'.",
                ["cuda_graph_modules"],
            )
        )
        return setting
    for name in raw:
        if name == "full_iteration" and impl in ("none", "local", "full_iteration"):
            setting.impl = "full_iteration"
            setting.notes.append(
                finding(
                    "GRAPH_SCOPE_RENAMED",
                    "cuda_graph_modules 'full_iteration' is deprecated: Megatron Core 0.19 migrates it to "
                    "cuda_graph_impl=full_iteration.",
                    "Set cuda_graph_impl=full_iteration and leave cuda_graph_modules empty.",
                    ["cuda_graph_modules", "cuda_graph_impl"],
                )
            )
        elif name not in CUDA_GRAPH_MODULES or name == "full":
            setting.notes.append(
                finding(
                    "GRAPH_MODULE_UNKNOWN",
                    f"cuda_graph_modules has {name!r}, which is not a CudaGraphModule"
                    + (" here ('full' must be alone)" if name == "full" else "")
                    + (
                        f" (it cannot combine with cuda_graph_impl={impl})"
                        if name == "full_iteration"
                        else ""
                    )
                    + ".",
                    "Use attn, mlp, moe, moe_router, moe_preprocess or mamba.",
                    ["cuda_graph_modules"],
                )
            )
        elif name not in setting.modules:
            setting.modules.append(name)
    return setting


@check("graphs")
def implementation(ctx: Context) -> Iterator[Finding]:
    g = normalize(ctx)
    yield from g.notes
    c = ctx.cfg
    if not g.on:
        return
    if g.impl == "full_iteration" and g.modules:
        yield finding(
            "GRAPH_FULL_ITERATION_MODULES",
            f"cuda_graph_impl=full_iteration with cuda_graph_modules={g.modules}: full-iteration capture takes "
            "the whole step and no module list.",
            "Leave cuda_graph_modules empty, or use cuda_graph_impl=transformer_engine for scoped capture.",
            ["cuda_graph_modules", "cuda_graph_impl"],
        )
    if g.impl == "full_iteration" and c.check_for_nan_in_loss:
        yield finding(
            "GRAPH_FULL_ITERATION_NAN_CHECK",
            "full_iteration graphs with the NaN check in the loss on.",
            "Set check_for_nan_in_loss=false (--no-check-for-nan-in-loss-and-grad; Bridge "
            "rerun_state_machine.check_for_nan_in_loss=False).",
            ["check_for_nan_in_loss", "cuda_graph_impl"],
        )
    # Bridge-only: Megatron Core and Megatron-LM accept scoped local graphs.
    if g.impl == "local" and c.launcher == "bridge":
        yield finding(
            "GRAPH_LOCAL_SCOPED_BRIDGE",
            "cuda_graph_impl=local for training: Megatron Bridge 0.6 accepts local only for full-iteration or "
            "inference graphs.",
            "Use cuda_graph_impl=transformer_engine for per-layer capture, or full_iteration for the whole step.",
            ["cuda_graph_impl"],
        )
    if g.impl == "transformer_engine" and c.expandable_segments and c.nccl_graph_register:
        yield finding(
            "GRAPH_EXPANDABLE_SEGMENTS",
            "transformer_engine graphs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and NCCL graph "
            "registration on (illegal memory access).",
            "Export NCCL_GRAPH_REGISTER=0, or drop expandable_segments.",
            ["expandable_segments", "nccl_graph_register"],
        )
    yield finding(
        "GRAPH_RNG_TRACKER",
        "CUDA graphs need the TE RNG tracker.",
        "Megatron-LM enables --te-rng-tracker itself; in Bridge set model.use_te_rng_tracker=true.",
        ["cuda_graph_impl"],
    )


@check("graphs")
def moe_modules(ctx: Context) -> Iterator[Finding]:
    g = normalize(ctx)
    c, m = ctx.cfg, ctx.model
    if g.impl not in ("local", "transformer_engine"):
        return
    mods = set(g.modules)
    if g.impl == "local" and mods & {"moe_router", "moe_preprocess"}:
        mods |= {"moe_router", "moe_preprocess"}  # the local impl captures both together
    if {"moe", "moe_router"} <= mods:
        yield finding(
            "GRAPH_MOE_AND_ROUTER",
            "cuda_graph_modules has both moe and moe_router.",
            "Keep moe_router (+ moe_preprocess) for dropless MoE, or moe alone for drop-and-pad MoE.",
            ["cuda_graph_modules"],
        )
    if "moe_preprocess" in mods and "moe_router" not in mods:
        yield finding(
            "GRAPH_PREPROCESS_NEEDS_ROUTER",
            "moe_preprocess is captured without moe_router.",
            "Add moe_router to cuda_graph_modules.",
            ["cuda_graph_modules"],
        )
    if "mlp" in mods and m.all_layers_moe:
        yield finding(
            "GRAPH_MLP_ALL_MOE",
            f"cuda_graph_modules has mlp but every layer of {m.name} is MoE (no dense MLP to capture).",
            "Drop mlp; capture moe_router + moe_preprocess (dropless) or moe (drop-and-pad).",
            ["cuda_graph_modules"],
        )
    drop_pad = (
        c.moe_capacity_factor is not None
        and c.moe_capacity_factor >= 0
        and c.moe_pad_expert_input_to_capacity
    )
    if not drop_pad:
        if "moe" in mods:
            yield finding(
                "GRAPH_MOE_NEEDS_DROP_PAD",
                "The moe graph module with dropless MoE: token counts per expert change every step, so the "
                "expert computation cannot be captured.",
                "Capture moe_router and moe_preprocess instead (and attn), or switch to drop-and-pad MoE "
                "(moe_capacity_factor and moe_pad_expert_input_to_capacity).",
                ["cuda_graph_modules", "moe_capacity_factor", "moe_pad_expert_input_to_capacity"],
            )
        capacity = c.moe_capacity_factor is not None and c.moe_capacity_factor >= 0
        # MCore 0.19.2 also names the deprecated moe_router_padding_for_fp8 here, which
        # moe_router_padding_for_quantization does not set: router padding alone passes.
        if c.dispatcher == "alltoall" and capacity and "moe_preprocess" in mods:
            yield finding(
                "GRAPH_PREPROCESS_D2H",
                "moe_preprocess capture with the alltoall dispatcher and a capacity factor: the preprocess step "
                "syncs device to host.",
                "Drop moe_preprocess (keep moe_router), or use drop-and-pad or a flex dispatcher.",
                ["cuda_graph_modules", "dispatcher"],
            )
    if c.ep_overlap and g.impl == "transformer_engine" and mods & {"moe", "mlp"}:
        yield finding(
            "GRAPH_EP_OVERLAP_MODULES",
            "EP all-to-all overlap with transformer_engine graphs that capture moe or mlp.",
            "Capture attn and moe_router (+ moe_preprocess) only, or turn EP overlap off.",
            ["cuda_graph_modules", "ep_overlap"],
        )


@check("graphs")
def recompute_and_offload(ctx: Context) -> Iterator[Finding]:
    g = normalize(ctx)
    c = ctx.cfg
    if not g.on:
        return
    if c.recompute_granularity == "full" and g.impl != "full_iteration":
        yield finding(
            "GRAPH_FULL_RECOMPUTE",
            f"Full recompute with cuda_graph_impl={g.impl}: Megatron Core 0.19 supports full recompute only "
            "with full-iteration graphs.",
            "Use cuda_graph_impl=full_iteration (with check_for_nan_in_loss=false), or selective recompute.",
            ["recompute_granularity", "cuda_graph_impl"],
        )
    if (
        c.recompute_granularity == "selective"
        and g.impl == "transformer_engine"
        and "moe" in ctx.recompute_modules
        and "moe_router" in g.modules
    ):
        yield finding(
            "GRAPH_MOE_RECOMPUTE_ROUTER",
            "moe recompute with a transformer_engine moe_router graph.",
            "Drop moe from recompute_modules (moe_act is the usual replacement), or stop capturing moe_router.",
            ["recompute_modules", "cuda_graph_modules"],
        )
    offload = set(c.activation_offload or [])
    if offload:
        moe_only = offload <= {"expert_fc1", "moe_act", "fused_group_mlp"}
        allowed = g.impl in ("transformer_engine", "full_iteration") or (
            g.impl == "local" and moe_only and "moe" not in g.modules and bool(g.modules)
        )
        if not allowed:
            yield finding(
                "GRAPH_ACTIVATION_OFFLOAD",
                f"Activation offload of {sorted(offload)} with cuda_graph_impl={g.impl} and modules {g.modules}.",
                "Use cuda_graph_impl=transformer_engine or full_iteration with activation offload.",
                ["activation_offload", "cuda_graph_impl"],
            )
        elif "moe" in g.modules:
            yield finding(
                "GRAPH_ACTIVATION_OFFLOAD",
                "Activation offload with the moe graph module (token-drop MoE capture).",
                "Stop capturing moe, or turn activation offload off.",
                ["activation_offload", "cuda_graph_modules"],
            )


@check("graphs")
def static_shapes(ctx: Context) -> Iterator[Finding]:
    g = normalize(ctx)
    c = ctx.cfg
    if c.packed_sequences and c.pad_cu_seqlens and not c.pad_to_max_length:
        yield finding(
            "GRAPH_PACKED_CU_SEQLENS",
            "pad_cu_seqlens=true requires pad_to_max_length=true.",
            "Set pad_to_max_length=true.",
            ["pad_cu_seqlens", "pad_to_max_length"],
        )
    if not g.on:
        return
    if c.variable_seq_lengths:
        yield finding(
            "GRAPH_STATIC_SHAPES",
            "variable_seq_lengths with CUDA graphs: captured graphs replay the shapes "
            "[seq/CP(/TP), MBS, hidden] they were captured with.",
            "Pad every sample to seq_len (pad_to_max_length), or run eager.",
            ["variable_seq_lengths", "cuda_graph_impl"],
        )
    uses_training_graphs = g.impl in ("full_iteration", "transformer_engine")
    if c.packed_sequences and uses_training_graphs:
        if not c.pad_to_max_length:
            yield finding(
                "GRAPH_PACKED_PAD_TO_MAX",
                f"Packed sequences with cuda_graph_impl={g.impl} but pad_to_max_length off.",
                "Set pad_to_max_length=true on the dataset.",
                ["packed_sequences", "pad_to_max_length"],
            )
        captures_attention = g.impl == "full_iteration" or not g.modules or "attn" in g.modules
        if captures_attention and not c.pad_cu_seqlens:
            yield finding(
                "GRAPH_PACKED_CU_SEQLENS",
                "The graph captures packed attention but cu_seqlens are not padded to a fixed length.",
                "Set packed_sequence_specs.pad_cu_seqlens=true (with pad_to_max_length), or leave attn out "
                "of cuda_graph_modules.",
                ["pad_cu_seqlens", "cuda_graph_modules"],
            )
