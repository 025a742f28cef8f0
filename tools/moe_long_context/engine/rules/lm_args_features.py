"""The launch checks of ``lm_args_checks``, part two: Megatron-LM validate_args (core_r0.19.0
megatron/training/arguments.py) from :1170 (half precision, distributed saved activations, hybrid context
parallelism, GTP, QK clipping, the Transformer-Engine-only features, delayed wgrad in CUDA graphs, MLA and MoE
latent flags) and the Megatron Core OptimizerConfig checks Megatron-LM reaches from the same flags.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..findings import Finding
from . import lm_args_launch  # noqa: F401  (registers part one first, in validate_args's order)
from .lm_args_checks import _LAUNCH_CHECKS, Args, Flags, Values, _launch, _Unknown
from .table import finding


def lm_launch_findings(values: Values, env: Mapping[str, str] | None, flags: Flags) -> list[Finding]:
    """Every finding of the lm-args checks on a Megatron-LM launch (its flags and the environment it exports);
    ``flags`` is Megatron-LM's option table."""
    a = Args(values, env, flags)
    out: list[Finding] = []
    for fn in _LAUNCH_CHECKS:
        try:
            out.extend(fn(a))
        except _Unknown:
            continue
    return out


def _repair(a: Args, f: Finding) -> dict[str, str | None]:
    """The rewrite of the launch that clears a finding, where one is plain (``None`` drops a flag; a text with
    a space replaces the flag and its values), keyed on a flag the launch writes; {} where the choice is the
    user's."""
    code, keys = f.code, f.keys
    if code == "LM_FP16_AND_BF16":
        return {"--fp16": None}
    if code == "LM_MEGATRON_FSDP" and "--ckpt-format" in keys:
        at = "--ckpt-format" if a.given("ckpt_format") else "--use-megatron-fsdp"
        return {at: ("" if at == "--ckpt-format" else "--use-megatron-fsdp ") + "--ckpt-format fsdp_dtensor"}
    if code == "LM_OVERLAP_PARAM_GATHER":
        return {"--overlap-param-gather": f"--overlap-param-gather {keys[1]}"}
    if code in ("LM_NEEDS_TRANSFORMER_ENGINE", "LM_ATTENTION_BACKEND_LOCAL"):
        return {keys[0]: None}
    if code in ("LM_HALF_PRECISION_FLAGS", "OPTIMIZER_DTYPE_NEEDS_PRECISION_AWARE", "LM_LATENT_FLAGS"):
        return {keys[0]: None}
    if code == "LM_QK_CLIP":
        return {keys[1]: None}  # the default (alpha 0.5, threshold 100) passes
    if code == "LM_HYBRID_CONTEXT_PARALLEL" and keys[1] == "--calculate-per-token-loss":
        return {"--hybrid-context-parallel": "--hybrid-context-parallel --calculate-per-token-loss"}
    if code == "LM_HYBRID_CONTEXT_PARALLEL" and keys[1] == "--dataloader-type":
        return {"--dataloader-type": "--dataloader-type single"}
    return {}


def lm_launch_repairs(
    values: Values, env: Mapping[str, str] | None, flags: Flags
) -> list[tuple[Finding, dict[str, str | None]]]:
    """The findings of ``lm_launch_findings`` that have a plain repair, each with it (for lint_config)."""
    a = Args(values, env, flags)
    out = [(f, _repair(a, f)) for f in lm_launch_findings(values, env, flags)]
    return [(f, r) for f, r in out if r and all(flag in values for flag in r)]


@_launch
def half_precision(a: Args) -> Iterator[Finding]:
    """:1170-1189 (--fp16 and --bf16 exclude each other; BF16 with --accumulate-allreduce-grads-in-fp32 keeps
    FP32 main gradients) and :1332-1337 (--fp16-lm-cross-entropy, --fp32-residual-connection)."""
    if a.fp16 and a.bf16:
        yield finding(
            "LM_FP16_AND_BF16",
            "--fp16 and --bf16 are both given: Megatron-LM asserts one parameter dtype.",
            "Keep --bf16 (the usual choice) and drop --fp16.",
            ["--fp16", "--bf16"],
        )
        return
    if a.bf16 and a.accumulate_allreduce_grads_in_fp32 and a.main_grads_dtype != "fp32":
        yield finding(
            "LM_MAIN_GRADS_FP32",
            f"--accumulate-allreduce-grads-in-fp32 with --main-grads-dtype {a.main_grads_dtype} under --bf16: "
            "Megatron-LM asserts FP32 main gradients when the all-reduce accumulates in FP32.",
            "Drop --main-grads-dtype (fp32 is the default), or drop --accumulate-allreduce-grads-in-fp32.",
            ["--accumulate-allreduce-grads-in-fp32", "--main-grads-dtype"],
        )
        return
    if a.fp16_lm_cross_entropy and not a.fp16:
        yield finding(
            "LM_HALF_PRECISION_FLAGS",
            "--fp16-lm-cross-entropy without --fp16: Megatron-LM computes the cross entropy in FP16 only in FP16 "
            "training.",
            "Drop --fp16-lm-cross-entropy.",
            ["--fp16-lm-cross-entropy", "--fp16"],
        )
    elif a.fp32_residual_connection and not (a.fp16 or a.bf16):
        yield finding(
            "LM_HALF_PRECISION_FLAGS",
            "--fp32-residual-connection without --bf16 or --fp16: Megatron-LM keeps an FP32 residual only in "
            "half-precision training.",
            "Add --bf16, or drop --fp32-residual-connection.",
            ["--fp32-residual-connection", "--bf16"],
        )


@_launch
def distribute_saved_activations(a: Args) -> Iterator[Finding]:
    """:1370-1379: --distribute-saved-activations needs TP > 1, full recompute (after --recompute-activations
    made it selective, :589-590) and a --recompute-method."""
    if not a.distribute_saved_activations:
        return
    granularity = a.recompute_granularity_
    for wrong, problem, fix, key in (
        (a.tensor_model_parallel_size <= 1, f"TP {a.tensor_model_parallel_size}", "use TP > 1",
         "--tensor-model-parallel-size"),
        (granularity != "full", f"recompute granularity {granularity}"
         + (" (--recompute-activations makes it selective)" if a.recompute_activations else ""),
         "use --recompute-granularity full", "--recompute-granularity"),
        (a.recompute_method is None, "no --recompute-method", "add --recompute-method uniform (or block)",
         "--recompute-method"),
    ):  # fmt: skip
        if wrong:
            yield finding(
                "LM_DISTRIBUTE_SAVED_ACTIVATIONS",
                f"--distribute-saved-activations with {problem}: Megatron-LM distributes the recomputed "
                "activations over the TP group of full recompute with a recompute method only.",
                f"Drop --distribute-saved-activations, or {fix}.",
                ["--distribute-saved-activations", key],
            )
            return


@_launch
def hybrid_context_parallel(a: Args) -> Iterator[Finding]:
    """:1404-1409: hybrid (dynamic) CP refuses PP, --enable-cuda-graph (deleted at :606, so reading it fails
    too) and Megatron-FSDP, and needs the single dataloader and per-token loss."""
    if not a.hybrid_context_parallel:
        return
    for wrong, problem, fix, key in (
        (a.pipeline_model_parallel_size > 1, f"PP {a.pipeline_model_parallel_size}", "use PP 1",
         "--pipeline-model-parallel-size"),
        (a.enable_cuda_graph, "--enable-cuda-graph", "drop --enable-cuda-graph", "--enable-cuda-graph"),
        (a.use_megatron_fsdp, "--use-megatron-fsdp", "drop --use-megatron-fsdp", "--use-megatron-fsdp"),
        ((a.dataloader_type or "single") != "single", f"--dataloader-type {a.dataloader_type}",
         "use --dataloader-type single", "--dataloader-type"),
        (not a.calculate_per_token_loss, "no --calculate-per-token-loss", "add --calculate-per-token-loss",
         "--calculate-per-token-loss"),
    ):  # fmt: skip
        if wrong:
            yield finding(
                "LM_HYBRID_CONTEXT_PARALLEL",
                f"--hybrid-context-parallel with {problem}: Megatron-LM asserts against it.",
                f"To keep hybrid context parallelism, {fix}.",
                ["--hybrid-context-parallel", key],
            )
            return


def _gtp(a: Args) -> bool:
    """:1451-1476: GTP is on when a weight-shard count is a multiple > 1 of its TP (ETP defaults to TP, :569).
    Counts that do not divide raise in resolve_tensor_parallel_weight_shards first: not judged here."""
    tp = a.tensor_model_parallel_size
    etp = a.expert_tensor_parallel_size or tp
    out = False
    for shards, size in (
        (a.tensor_parallel_num_weight_shards, tp),
        (a.expert_tensor_parallel_num_weight_shards, etp),
    ):
        if shards is None:
            continue
        if shards < size or shards % size:
            raise _Unknown("weight shards")
        out = out or shards // size > 1
    return out


@_launch
def gtp(a: Args) -> Iterator[Finding]:
    """:1476-1548: GTP weight sharding needs --fp4-param-gather with FP4, --ddp-average-in-collective off, the
    torch or torch_dist checkpoint format, and with the MXFP8 recipe --fp8-param-gather (off under torch FSDP2,
    :1016-1017) and --reuse-grad-buf-for-mxfp8-param-ag (off under Megatron-FSDP, :1114). The
    CUDA_GRAPHS_USE_NODE_PRIORITY check (:1499-1504) needs the GPU: lint_config's gtp_node_priority."""
    if not _gtp(a):
        return
    fp8_gather = a.fp8_param_gather and not a.use_torch_fsdp2
    reuse = a.reuse_grad_buf_for_mxfp8_param_ag and not a.use_megatron_fsdp
    for wrong, problem, fix, key in (
        (a.fp4 is not None and not a.fp4_param_gather, "--fp4-format without --fp4-param-gather",
         "add --fp4-param-gather", "--fp4-param-gather"),
        (a.ddp_average_in_collective, "--ddp-average-in-collective", "drop --ddp-average-in-collective",
         "--ddp-average-in-collective"),
        (a.ckpt_format not in ("torch", "torch_dist"), f"--ckpt-format {a.ckpt_format}",
         "use --ckpt-format torch_dist", "--ckpt-format"),
        (a.fp8_recipe == "mxfp8" and not fp8_gather, "--fp8-recipe mxfp8 without --fp8-param-gather",
         "add --fp8-param-gather", "--fp8-param-gather"),
        (a.fp8_recipe == "mxfp8" and not reuse, "--fp8-recipe mxfp8 without --reuse-grad-buf-for-mxfp8-param-ag",
         "add --reuse-grad-buf-for-mxfp8-param-ag", "--reuse-grad-buf-for-mxfp8-param-ag"),
    ):  # fmt: skip
        if wrong:
            yield finding(
                "LM_GTP_FLAGS",
                f"GTP weight sharding (--tensor-parallel-num-weight-shards / "
                f"--expert-tensor-parallel-num-weight-shards above TP) with {problem}: Megatron-LM refuses it.",
                f"To keep GTP, {fix}.",
                ["--tensor-parallel-num-weight-shards", key],
            )
            return


def gtp_node_priority(
    values: Values, env: Mapping[str, str], sm_major: int | None, flags: Flags
) -> list[Finding]:
    """:1484-1504: on Blackwell and later, GTP with CUDA graphs needs CUDA_GRAPHS_USE_NODE_PRIORITY=1 exported
    (an error when the launch exports another value, a reminder when it exports none)."""
    a = Args(values, env, flags)
    try:
        if sm_major is None or sm_major < 10 or not _gtp(a) or a.cuda_graph_impl_ == "none":
            return []
    except _Unknown:
        return []
    value = a.env.get("CUDA_GRAPHS_USE_NODE_PRIORITY")
    if value is not None and "$" in value:
        return []
    if value is None:
        return [finding(
            "LM_GTP_NODE_PRIORITY_ENV",
            "GTP weight sharding with CUDA graphs on Blackwell: Megatron-LM asserts CUDA_GRAPHS_USE_NODE_PRIORITY=1 "
            "in the environment, which this launch does not export.",
            "Export CUDA_GRAPHS_USE_NODE_PRIORITY=1 in the launch (or make sure its caller does).",
            ["CUDA_GRAPHS_USE_NODE_PRIORITY", "--cuda-graph-impl"])]  # fmt: skip
    if value != "1":
        return [finding(
            "LM_GTP_NODE_PRIORITY",
            f"GTP weight sharding with CUDA graphs on Blackwell and CUDA_GRAPHS_USE_NODE_PRIORITY={value}: "
            "Megatron-LM asserts it is 1.",
            "Export CUDA_GRAPHS_USE_NODE_PRIORITY=1.",
            ["CUDA_GRAPHS_USE_NODE_PRIORITY", "--cuda-graph-impl"])]  # fmt: skip
    return []


@_launch
def qk_clip(a: Args) -> Iterator[Finding]:
    """:1557-1563: --qk-clip needs 0 < --qk-clip-alpha < 1 and --qk-clip-threshold > 0."""
    if not a.qk_clip:
        return
    if not 0.0 < a.qk_clip_alpha < 1.0:
        yield finding(
            "LM_QK_CLIP",
            f"--qk-clip with --qk-clip-alpha {a.qk_clip_alpha}: Megatron-LM asserts it lies strictly between 0 "
            "and 1.",
            "Use --qk-clip-alpha 0.5 (the default).",
            ["--qk-clip", "--qk-clip-alpha"],
        )
    elif not a.qk_clip_threshold > 0:
        yield finding(
            "LM_QK_CLIP",
            f"--qk-clip with --qk-clip-threshold {a.qk_clip_threshold}: Megatron-LM asserts it is positive.",
            "Use --qk-clip-threshold 100 (the default).",
            ["--qk-clip", "--qk-clip-threshold"],
        )


@_launch
def transformer_engine_only(a: Args) -> Iterator[Finding]:
    """:1582-1585 (relative position embeddings, after --use-rotary-position-embeddings made the type rope at
    :1571-1572), :1822-1824 (--delay-wgrad-compute) and :1854-1856 (--fine-grained-activation-offloading) need
    --transformer-impl transformer_engine."""
    if a.transformer_impl == "transformer_engine":
        return
    needs = []
    if a.position_embedding_type_ == "relative":
        needs.append("--position-embedding-type relative")
    if a.delay_wgrad_compute:
        needs.append("--delay-wgrad-compute")
    if a.fine_grained_activation_offloading:
        needs.append("--fine-grained-activation-offloading")
    if needs:
        yield finding(
            "LM_NEEDS_TRANSFORMER_ENGINE",
            f"{needs[0]} with --transformer-impl {a.transformer_impl}: Megatron-LM supports it only with the "
            "Transformer Engine implementation.",
            "Drop --transformer-impl (transformer_engine is the default), or drop "
            + needs[0].split()[0]
            + ".",
            ["--transformer-impl", needs[0].split()[0]],
        )


@_launch
def delayed_wgrad_graphs(a: Args) -> Iterator[Finding]:
    """:1825-1846: --delay-wgrad-compute with --overlap-grad-reduce and the weight gradients inside CUDA graphs
    (attn in the modules, or moe_router with a shared expert not overlapped; after --cuda-graph-scope became
    the modules, :616-623) needs gradient accumulation fusion, and with attn graphs no linear or QKV bias
    (--add-qkv-bias follows --disable-bias-linear's absence, :1552-1553)."""
    if a.transformer_impl != "transformer_engine" or not (a.delay_wgrad_compute and a.overlap_grad_reduce):
        return
    modules = a.cuda_graph_modules_
    attn = "attn" in modules
    in_graph = attn or (
        "moe_router" in modules
        and a.moe_shared_expert_intermediate_size is not None
        and not a.moe_shared_expert_overlap
    )
    if not in_graph:
        return
    where = "attn" if attn else "moe_router (shared expert not overlapped)"
    if not a.gradient_accumulation_fusion:
        yield finding(
            "LM_DELAY_WGRAD_GRAPHS",
            f"--delay-wgrad-compute with --overlap-grad-reduce and {where} CUDA graphs without gradient "
            "accumulation fusion: Megatron-LM asserts it (the graphs need static gradient addresses).",
            "Drop --no-gradient-accumulation-fusion.",
            ["--delay-wgrad-compute", "--no-gradient-accumulation-fusion"],
        )
    elif attn and (a.add_qkv_bias or (a.add_bias_linear and a.declares_architecture)):
        yield finding(
            "LM_DELAY_WGRAD_GRAPHS",
            "--delay-wgrad-compute with --overlap-grad-reduce and attn CUDA graphs with attention biases"
            + (" (--add-qkv-bias)" if a.given("add_qkv_bias") else " (on unless --disable-bias-linear)")
            + ": Megatron-LM does not support the bias there yet.",
            "Add --disable-bias-linear and drop --add-qkv-bias, or leave attn out of --cuda-graph-modules.",
            ["--delay-wgrad-compute", "--disable-bias-linear", "--add-qkv-bias", "--cuda-graph-modules"],
        )


@_launch
def latent_flags(a: Args) -> Iterator[Finding]:
    """:1895-1901: --mla-down-proj-fusion needs MLA (also inferred from a hybrid pattern with MLA or DSA
    layers, :885-889); --moe-latent-size must be positive and needs experts (--num-experts 0 is none, :1593)."""
    pattern = a.hybrid_pattern_ or ""
    if a.mtp_hybrid_override_pattern and (a.mtp_num_layers or 0) > 0 and "/" not in pattern:
        pattern += "/" + a.mtp_hybrid_override_pattern  # the legacy MTP pattern joins it (:749-760)
    mla = a.multi_latent_attention or "+" in pattern or "D" in pattern
    if a.mla_down_proj_fusion and not mla and a.declares_architecture:
        yield finding(
            "LM_LATENT_FLAGS",
            "--mla-down-proj-fusion without --multi-latent-attention: Megatron-LM fuses only MLA's down "
            "projections.",
            "Drop --mla-down-proj-fusion.",
            ["--mla-down-proj-fusion", "--multi-latent-attention"],
        )
    elif a.moe_latent_size is not None and (
        a.moe_latent_size <= 0 or (not a.num_experts and (a.declares_architecture or a.given("num_experts")))
    ):
        problem = (
            f"--moe-latent-size {a.moe_latent_size} is not positive"
            if a.moe_latent_size <= 0
            else "--moe-latent-size without --num-experts (not an MoE model)"
        )
        yield finding(
            "LM_LATENT_FLAGS",
            f"{problem}: Megatron-LM asserts MoE latent projections have a positive size on an MoE model.",
            "Drop --moe-latent-size, or give a positive size on an MoE model.",
            ["--moe-latent-size", "--num-experts"],
        )


@_launch
def optimizer_dtypes(a: Args) -> Iterator[Finding]:
    """MCore optimizer/optimizer_config.py:424-428 (reuse_grad_buf_for_mxfp8_param_ag, off under Megatron-FSDP
    at LM :1114, refuses overlap_param_gather_with_optimizer_step) and :469-480 (without the precision-aware
    optimizer every optimizer dtype is FP32); Megatron-LM builds OptimizerConfig from these flags."""
    reuse = a.reuse_grad_buf_for_mxfp8_param_ag and not a.use_megatron_fsdp
    if reuse and a.overlap_param_gather_with_optimizer_step:
        yield finding(
            "OPTIMIZER_STEP_GATHER_MXFP8_REUSE",
            "--overlap-param-gather-with-optimizer-step with --reuse-grad-buf-for-mxfp8-param-ag: Megatron Core's "
            "OptimizerConfig refuses the combination (ValueError).",
            "Drop --overlap-param-gather-with-optimizer-step.",
            ["--overlap-param-gather-with-optimizer-step", "--reuse-grad-buf-for-mxfp8-param-ag"],
        )
        return
    if a.use_precision_aware_optimizer:
        return
    for dest in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
        if getattr(a, dest) != "fp32":
            yield finding(
                "OPTIMIZER_DTYPE_NEEDS_PRECISION_AWARE",
                f"{a.flag(dest)} {getattr(a, dest)} without --use-precision-aware-optimizer: Megatron Core's "
                "OptimizerConfig keeps every optimizer dtype FP32 otherwise.",
                f"Add --use-precision-aware-optimizer (with --use-distributed-optimizer), or drop {a.flag(dest)}.",
                [a.flag(dest), "--use-precision-aware-optimizer"],
            )
            return
