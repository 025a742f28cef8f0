"""Megatron Core TransformerConfig / ModelParallelConfig checks on the settings only they read.

TransformerConfig.__post_init__ and ModelParallelConfig.__post_init__ (Megatron Core 0.19.2
megatron/core/transformer/transformer_config.py, megatron/core/model_parallel_config.py) run for every
Megatron-LM and Megatron Bridge launch. Each check here is upstream's condition, guards included, on the
engine's fields (engine/config.py TransformerConfigArgs and the shared ones); line numbers are in the rule
table (rules_transformer_config.yaml).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..config import FP8_RECIPES
from ..context import Context
from ..findings import Finding
from .table import check, finding

_MOE_OFFLOAD = {"expert_fc1", "moe_act", "fused_group_mlp"}


def _backend(dispatcher: str) -> str:
    """moe_flex_dispatcher_backend as Megatron Core holds it: the flex backend, else its default deepep."""
    return dispatcher[5:] if dispatcher.startswith("flex-") else "deepep"


# ---------------------------------------------------------------- moe


@check("moe")
def overlap_knobs(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:2759-2776: overlap_dispatch_backward_with_experts_wgrad needs EP overlap and
    delay_wgrad_compute off; ep_overlap_early_attn_memory_release needs EP overlap."""
    c = ctx.cfg
    if c.overlap_dispatch_backward_with_experts_wgrad and (c.ep_overlap or c.delay_wgrad_compute):
        on = [
            n for n, v in (("ep_overlap", c.ep_overlap), ("delay_wgrad_compute", c.delay_wgrad_compute)) if v
        ]
        yield finding(
            "MOE_EXPERTS_WGRAD_OVERLAP",
            f"overlap_dispatch_backward_with_experts_wgrad with {' and '.join(on)}: Megatron Core asserts the "
            "dispatch-backward / experts-wgrad overlap runs without EP all-to-all overlap and without delayed wgrad.",
            "Keep one overlap: drop overlap_dispatch_backward_with_experts_wgrad, or turn "
            f"{' and '.join(on)} off.",
            ["overlap_dispatch_backward_with_experts_wgrad", *on],
        )
    if c.ep_overlap_early_attn_memory_release and not c.ep_overlap:
        yield finding(
            "MOE_EARLY_ATTN_RELEASE",
            "ep_overlap_early_attn_memory_release without EP all-to-all overlap: Megatron Core asserts "
            "overlap_moe_expert_parallel_comm is on.",
            "Turn ep_overlap on (--overlap-moe-expert-parallel-comm), or drop ep_overlap_early_attn_memory_release.",
            ["ep_overlap_early_attn_memory_release", "ep_overlap"],
        )


@check("moe")
def rank_capacity_and_paged_stash(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:1693-1706 (rank capacity needs hybridep/ncclep, hybridep the op fuser) and
    :1905-1921 (paged stash needs the rank capacity, excludes cpu_offloading and MoE offload modules)."""
    c = ctx.cfg
    backend = _backend(c.dispatcher)
    if c.moe_expert_rank_capacity_factor is not None:
        if backend not in ("hybridep", "ncclep"):
            yield finding(
                "MOE_RANK_CAPACITY_BACKEND",
                f"moe_expert_rank_capacity_factor={c.moe_expert_rank_capacity_factor} with the {c.dispatcher} "
                f"dispatcher (flex backend {backend}): Megatron Core needs moe_flex_dispatcher_backend hybridep or "
                "ncclep.",
                "Use dispatcher=flex-hybridep or flex-ncclep, or drop moe_expert_rank_capacity_factor.",
                ["moe_expert_rank_capacity_factor", "dispatcher"],
            )
        elif backend == "hybridep" and c.use_transformer_engine_op_fuser is False:
            yield finding(
                "MOE_RANK_CAPACITY_BACKEND",
                f"moe_expert_rank_capacity_factor={c.moe_expert_rank_capacity_factor} with the hybridep backend "
                "without use_transformer_engine_op_fuser: Megatron Core refuses it.",
                "Turn use_transformer_engine_op_fuser on (--use-transformer-engine-op-fuser).",
                ["moe_expert_rank_capacity_factor", "dispatcher", "use_transformer_engine_op_fuser"],
            )
    if not c.moe_paged_stash:
        return
    lm_unset_known = c.launcher == "megatron-lm"  # unset under Bridge: the recipe's own factor, not judged
    problems = []
    if c.cpu_offloading:
        problems.append("it cannot run with the legacy cpu_offloading")
    if c.moe_expert_rank_capacity_factor is None and lm_unset_known:
        problems.append("it needs moe_expert_rank_capacity_factor")
    clash = sorted(_MOE_OFFLOAD & set(c.activation_offload or []))
    if clash:
        problems.append(f"it covers {', '.join(clash)}, which must not be offloaded as well")
    if problems:
        yield finding(
            "MOE_PAGED_STASH",
            f"moe_paged_stash: {'; '.join(problems)} (Megatron Core raises).",
            "Set moe_expert_rank_capacity_factor, turn cpu_offloading off and drop expert_fc1, moe_act and "
            "fused_group_mlp from the offload modules, or turn moe_paged_stash off.",
            ["moe_paged_stash", "moe_expert_rank_capacity_factor", "cpu_offloading", "activation_offload"],
        )


@check("moe")
def single_grouped(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:1556-1588: single grouped weight / bias need grouped GEMM; the weight a BF16, MXFP8
    or NVFP4 primary weight and the TE op fuser; the bias linear biases."""
    c, m = ctx.cfg, ctx.model
    if not (c.moe_single_grouped_weight or c.moe_single_grouped_bias):
        return
    on = [n for n in ("moe_single_grouped_weight", "moe_single_grouped_bias") if getattr(c, n)]
    if not c.moe_grouped_gemm:
        yield finding(
            "MOE_SINGLE_GROUPED_NEEDS",
            f"{' and '.join(on)} without moe_grouped_gemm: Megatron Core needs grouped GEMM for them.",
            "Turn moe_grouped_gemm on, or drop " + " and ".join(on) + ".",
            [*on, "moe_grouped_gemm"],
        )
    if c.moe_single_grouped_weight:
        if c.precision in FP8_RECIPES and c.precision != "mxfp8":
            yield finding(
                "MOE_SINGLE_GROUPED_PRECISION",
                f"moe_single_grouped_weight with precision={c.precision}: Megatron Core supports single grouped "
                "weights only with BF16 primary weights, the MXFP8 recipe or NVFP4.",
                "Use precision bf16, mxfp8 or nvfp4, or drop moe_single_grouped_weight.",
                ["moe_single_grouped_weight", "precision"],
            )
        if c.use_transformer_engine_op_fuser is False:
            yield finding(
                "MOE_SINGLE_GROUPED_NEEDS",
                "moe_single_grouped_weight without use_transformer_engine_op_fuser: Megatron Core needs the TE op "
                "fuser (the plain GroupedLinear path splits the grouped weight per expert).",
                "Turn use_transformer_engine_op_fuser on, or drop moe_single_grouped_weight.",
                ["moe_single_grouped_weight", "use_transformer_engine_op_fuser"],
            )
    if c.moe_single_grouped_bias and not m.add_bias_linear:
        yield finding(
            "MOE_SINGLE_GROUPED_NEEDS",
            f"moe_single_grouped_bias on {m.name}, whose linear layers have no biases (add_bias_linear off): "
            "Megatron Core refuses it.",
            "Drop moe_single_grouped_bias.",
            ["moe_single_grouped_bias"],
        )


# ---------------------------------------------------------------- recompute and offloading


@check("recompute")
def legacy_cpu_offload(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:1709-1723 (layers in range, no PP, no recompute), :1848-1850 (not with fine-grained
    offloading), :2467-2468 (CUDA graphs only full_iteration)."""
    c, layers = ctx.cfg, ctx.model.num_layers
    if not c.cpu_offloading:
        return
    problems = []
    if c.cpu_offloading_num_layers < 0 or c.cpu_offloading_num_layers >= layers:
        problems.append(f"cpu_offloading_num_layers={c.cpu_offloading_num_layers} is not in [0, {layers})")
    if c.pp > 1:
        problems.append(f"it does not support pipeline parallelism (PP={c.pp})")
    if c.recompute_granularity is not None:
        problems.append(f"it does not work with {c.recompute_granularity} recompute")
    if c.activation_offload is not None:
        problems.append("it excludes fine-grained activation offloading")
    if c.cuda_graph_impl not in ("none", "full_iteration"):
        problems.append(f"it supports CUDA graphs only with full_iteration, not {c.cuda_graph_impl}")
    if problems:
        yield finding(
            "LEGACY_CPU_OFFLOAD",
            f"cpu_offloading (legacy layer-wise offload): {'; '.join(problems)} (Megatron Core raises).",
            "Use fine-grained activation offloading (activation_offload) instead of cpu_offloading, or meet "
            "its limits.",
            ["cpu_offloading", "cpu_offloading_num_layers", "pp", "recompute_granularity", "activation_offload",
             "cuda_graph_impl"],
        )  # fmt: skip


@check("recompute")
def offload_tuning(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:1884-1900: the fine-grained offloading knobs' ranges, and fused_group_mlp needs the
    TE op fuser (:1896-1897)."""
    c = ctx.cfg
    if c.activation_offload is None:
        return
    bad = []
    if c.min_offloaded_tensor_size < 0:
        bad.append(f"min_offloaded_tensor_size={c.min_offloaded_tensor_size} is negative")
    if not 0 <= c.activation_offload_fraction <= 1:
        bad.append(f"activation_offload_fraction={c.activation_offload_fraction} is not in [0, 1]")
    if c.delta_offload_bytes_across_pp_ranks < 0:
        bad.append(f"delta_offload_bytes_across_pp_ranks={c.delta_offload_bytes_across_pp_ranks} is negative")
    if bad:
        yield finding(
            "OFFLOAD_TUNING_RANGE",
            f"Fine-grained activation offloading: {'; '.join(bad)} (Megatron Core asserts).",
            "Use min_offloaded_tensor_size >= 0, activation_offload_fraction in [0, 1] and "
            "delta_offload_bytes_across_pp_ranks >= 0.",
            [
                "min_offloaded_tensor_size",
                "activation_offload_fraction",
                "delta_offload_bytes_across_pp_ranks",
            ],
        )
    if "fused_group_mlp" in c.activation_offload and c.use_transformer_engine_op_fuser is False:
        yield finding(
            "OFFLOAD_MODULE_RULES",
            "Offloading fused_group_mlp without use_transformer_engine_op_fuser: Megatron Core needs the TE op fuser "
            "for the fused grouped MLP.",
            "Turn use_transformer_engine_op_fuser on, or offload expert_fc1 / moe_act instead.",
            ["activation_offload", "use_transformer_engine_op_fuser"],
        )


@check("recompute")
def distribute_saved_activations(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:1757-1761, inside ``if self.recompute_granularity is not None``."""
    c = ctx.cfg
    if c.recompute_granularity is not None and c.distribute_saved_activations and ctx.sequence_parallel:
        yield finding(
            "RECOMPUTE_DISTRIBUTED_SAVED_SP",
            f"distribute_saved_activations with {c.recompute_granularity} recompute and sequence parallelism "
            f"(TP {c.tp}): Megatron Core refuses it (SP already splits the saved activations).",
            "Drop distribute_saved_activations.",
            ["distribute_saved_activations", "sequence_parallel", "recompute_granularity"],
        )


# ---------------------------------------------------------------- graphs


@check("graphs")
def offload_graph_warmup(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:2630-2642, inside ``if self.cuda_graph_impl != "none"`` and
    ``if self.fine_grained_activation_offloading``."""
    c = ctx.cfg
    if c.cuda_graph_impl == "none" or c.activation_offload is None:
        return
    if c.cuda_graph_warmup_steps <= 0:
        yield finding(
            "GRAPH_OFFLOAD_WARMUP",
            f"CUDA graphs ({c.cuda_graph_impl}) with fine-grained activation offloading and "
            f"cuda_graph_warmup_steps={c.cuda_graph_warmup_steps}: Megatron Core asserts at least one warm-up step.",
            "Set cuda_graph_warmup_steps > 0 (the default is 3).",
            ["cuda_graph_warmup_steps", "cuda_graph_impl", "activation_offload"],
        )
    inflight = c.fine_grained_offloading_max_inflight_offloads
    # unset under Bridge: the recipe's own count, not judged (Megatron-LM's default is unset)
    unset = inflight is None and c.launcher == "megatron-lm"
    if c.cuda_graph_impl == "full_iteration" and (unset or (inflight is not None and inflight < 0)):
        yield finding(
            "GRAPH_OFFLOAD_WARMUP",
            "full_iteration CUDA graphs with fine-grained activation offloading and "
            f"fine_grained_offloading_max_inflight_offloads={inflight}: Megatron Core needs a non-negative count.",
            "Set fine_grained_offloading_max_inflight_offloads (e.g. 1).",
            ["fine_grained_offloading_max_inflight_offloads", "cuda_graph_impl", "activation_offload"],
        )


# ---------------------------------------------------------------- precision


@check("precision")
def bf16_edge_layers(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:1400-1430, inside ``if self.fp8``: no delayed scaling, and at most
    num_layers // PP BF16 layers at the start and at the end."""
    c = ctx.cfg
    if c.precision not in FP8_RECIPES or not c.first_last_layers_bf16:
        return
    if c.precision == "fp8-delayed":
        yield finding(
            "PRECISION_BF16_EDGE_LAYERS",
            "first_last_layers_bf16 with delayed FP8 scaling: Megatron Core refuses BF16 first/last layers under "
            "the delayed recipe.",
            "Use another FP8 recipe (fp8-tensorwise, fp8-blockwise, mxfp8), or drop first_last_layers_bf16.",
            ["first_last_layers_bf16", "precision"],
        )
    most = ctx.model.num_layers // c.pp
    for end in ("start", "end"):
        count = getattr(c, f"num_layers_at_{end}_in_bf16")
        if count < 0 or count > most:
            yield finding(
                "PRECISION_BF16_EDGE_LAYERS",
                f"num_layers_at_{end}_in_bf16={count} is not between 0 and the layers per pipeline stage "
                f"({ctx.model.num_layers} // PP {c.pp} = {most}): Megatron Core raises.",
                f"Keep num_layers_at_{end}_in_bf16 within 0..{most}.",
                [f"num_layers_at_{end}_in_bf16", "pp"],
            )


@check("precision")
def precision_options(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:1443-1452: fp8_output_proj needs fp8 and the MXFP8 recipe; fp4_param needs fp4.
    Megatron-LM's flags are judged as written by PRECISION_OPTION_RECIPE (dialects/lm_args.py)."""
    c = ctx.cfg
    if c.launcher == "megatron-lm":
        return
    if c.fp8_output_proj and c.precision != "mxfp8":
        yield finding(
            "PRECISION_OPTION_NEEDS",
            f"fp8_output_proj with precision={c.precision}: Megatron Core runs the attention output projection in "
            "FP8 only under FP8 training with the MXFP8 recipe.",
            "Use precision=mxfp8, or drop fp8_output_proj.",
            ["fp8_output_proj", "precision"],
        )
    if c.fp4_param and c.precision != "nvfp4":
        yield finding(
            "PRECISION_OPTION_NEEDS",
            f"fp4_param with precision={c.precision}: Megatron Core keeps FP4 primary weights only under FP4 "
            "training.",
            "Use precision=nvfp4, or drop fp4_param (fp4_param_gather).",
            ["fp4_param", "precision"],
        )


# ---------------------------------------------------------------- attention


@check("launch")
def attention_settings(ctx: Context) -> Iterator[Finding]:
    """transformer_config.py:2193-2194 (rotary_interleaved with MLA) and :2876-2892 (batch_invariant_mode: FA 3
    or 4, CP 1); a version outside 2-4 (:2869-2873) is refused when the launch is read (the field is 2, 3 or 4)."""
    c, m = ctx.cfg, ctx.model
    if c.rotary_interleaved and m.is_mla:
        yield finding(
            "MLA_ROTARY_INTERLEAVED",
            f"rotary_interleaved with {m.name}'s multi-latent attention: Megatron Core refuses it.",
            "Drop rotary_interleaved.",
            ["rotary_interleaved"],
        )
    version = c.flash_attention_version
    if c.batch_invariant_mode:
        # unset under Bridge: the recipe's own version, not judged (Megatron-LM's default is unset)
        if version not in (3, 4) and (version is not None or c.launcher == "megatron-lm"):
            yield finding(
                "BATCH_INVARIANT_MODE",
                f"batch_invariant_mode with flash_attention_version={version}: Megatron Core needs FlashAttention "
                "3 or 4 (the batch-invariant kernels).",
                "Set flash_attention_version 3 or 4.",
                ["batch_invariant_mode", "flash_attention_version"],
            )
        if c.cp > 1:
            yield finding(
                "BATCH_INVARIANT_MODE",
                f"batch_invariant_mode with CP={c.cp}: Megatron Core does not support context parallelism there.",
                "Use CP=1, or drop batch_invariant_mode.",
                ["batch_invariant_mode", "cp"],
            )


# ---------------------------------------------------------------- ModelParallelConfig


@check("pipeline")
def defer_embedding_wgrad(ctx: Context) -> Iterator[Finding]:
    """model_parallel_config.py:545-548 (needs PP > 1), :550-553 (gradient accumulation fusion) and :555-558
    (wgrad_deferral_limit >= 0)."""
    c = ctx.cfg
    if not c.defer_embedding_wgrad_compute:
        return
    if c.pp == 1:
        yield finding(
            "PIPELINE_DEFER_EMBEDDING_WGRAD",
            "defer_embedding_wgrad_compute with PP=1: Megatron Core defers the embedding wgrad only under "
            "pipeline parallelism.",
            "Drop defer_embedding_wgrad_compute, or use PP > 1.",
            ["defer_embedding_wgrad_compute", "pp"],
        )
    if not c.gradient_accumulation_fusion:
        yield finding(
            "PIPELINE_DEFER_EMBEDDING_WGRAD",
            "defer_embedding_wgrad_compute without gradient accumulation fusion: Megatron Core defers the "
            "embedding wgrad only into fused gradient accumulation.",
            "Turn gradient_accumulation_fusion back on, or drop defer_embedding_wgrad_compute.",
            ["defer_embedding_wgrad_compute", "gradient_accumulation_fusion"],
        )
    # unset: Megatron-LM's 0; Bridge's CommOverlapConfig sets -1 unless the override list gives it
    # (Bridge training/comm_overlap.py:436-437, applied to the model at :588-591, :618)
    limit = (
        c.wgrad_deferral_limit
        if c.wgrad_deferral_limit is not None
        else (0 if c.launcher == "megatron-lm" else -1)
    )
    if limit < 0:
        yield finding(
            "PIPELINE_DEFER_EMBEDDING_WGRAD",
            f"defer_embedding_wgrad_compute with wgrad_deferral_limit={limit}"
            + (" (Bridge's CommOverlapConfig default)" if c.wgrad_deferral_limit is None else "")
            + ": Megatron Core needs a limit >= 0.",
            "Set wgrad_deferral_limit >= 0 (Bridge: comm_overlap.wgrad_deferral_limit).",
            ["defer_embedding_wgrad_compute", "wgrad_deferral_limit"],
        )


@check("layout")
def weight_shards(ctx: Context) -> Iterator[Finding]:
    """model_parallel_config.py:31-40, resolve_tensor_parallel_weight_shards: a given shard count is >= TP and a
    multiple of it."""
    c = ctx.cfg
    shards = c.tensor_parallel_num_weight_shards
    if shards is not None and (shards < c.tp or shards % c.tp):
        yield finding(
            "LAYOUT_GTP_WEIGHT_SHARDS",
            f"tensor_parallel_num_weight_shards={shards} with TP={c.tp}: Megatron Core needs a multiple of TP "
            "(at least TP).",
            f"Use a multiple of {c.tp} (e.g. {c.tp * max(1, shards // c.tp)}), or leave it unset.",
            ["tensor_parallel_num_weight_shards", "tp"],
        )
