"""What Megatron Bridge 0.6.2's ``ConfigContainer.validate`` / ``runtime_config_update``, its model providers and
communication-overlap setup, and Megatron Core 0.19.2's ``initialize_model_parallel``, hybrid layer allocation,
NCCL EP dispatcher and MLA RoPE choice refuse, on the keys and flags a launch writes that no engine field carries
(deterministic mode, Megatron-FSDP registration, packing switches, mixed-precision flags, SHARP, partial
distributed-optimizer instances, ...).

These checks read the launch itself: ``bridge_launch_checks`` the Bridge override keys (a key the list leaves out
has the ConfigContainer class default, as BRIDGE_FSDP_CKPT_FORMAT reads it; a mixed_precision preset the list
leaves out is the recipe's, which the engine takes to be bf16), ``megatron_launch_checks`` the Megatron-LM flags
and the environment the script exports; both get the resolved Context for the layout (DP, expert DP). lint_config
runs them; a request's plan has none of these keys.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..context import Context
from ..findings import Finding
from .table import check, finding

_TRUE = (True, "true", "True", "1", 1)

# The keys and flags these checks read that no engine field carries: lint still lists them under not_checked (their
# effect on memory and step time is not modelled), saying that their validity is judged.
JUDGED_NOTE = "its validity is judged (lint_config, rules_bridge_state.yaml), its effect on memory and step time is not modelled"
BRIDGE_KEYS = frozenset({
    "model.deterministic_mode", "env_vars.NCCL_ALGO", "env_vars.CUDA_DEVICE_MAX_CONNECTIONS",
    "ddp.fsdp_manual_registration", "ddp.nccl_ub", "ddp.data_parallel_sharding_strategy",
    "train.check_weight_hash_across_dp_replicas_interval", "dist.use_tp_pp_dp_mapping", "dist.use_torch_fsdp2",
    "dist.use_megatron_fsdp", "ddp.use_megatron_fsdp", "dataset.enable_in_batch_packing",
    "dataset.offline_packing_specs.packed_sequence_size", "model.restore_modelopt_state",
    "model.gradient_accumulation_fusion", "dist.use_decentralized_pg", "dist.use_gloo_process_groups",
    "model.bf16", "model.fp16", "optimizer.bf16", "optimizer.fp16", "mixed_precision.bf16", "mixed_precision.fp16",
    "model.transformer_impl", "model.use_te_rng_tracker", "rng.te_rng_tracker", "model.mamba_chunk_size",
    "model.hybrid_override_pattern", "model.hybrid_layer_pattern", "model.rope_type", "dist.use_sharp",
    "dist.sharp_enabled_group", "ddp.num_distributed_optimizer_instances",
    "model.pipeline_model_parallel_comm_backend", "model.moe_ncclep_static_shape", "model.moe_ncclep_zero_copy",
    "model.use_transformer_engine_op_fuser", "env_vars.NVTE_CUTEDSL_FUSED_GROUPED_MLP",
    "dist.eval_context_parallel_size", "dataset.enable_offline_packing",
    "optimizer.use_precision_aware_optimizer", "comm_overlap.delay_wgrad_compute", "ddp.average_in_collective",
    "peft.normalize_moe_lora",
})  # fmt: skip
LM_FLAGS = frozenset({
    "--use-sharp", "--sharp-enabled-group", "--num-distributed-optimizer-instances", "--use-tp-pp-dp-mapping",
    "--hybrid-context-parallel", "--pipeline-model-parallel-comm-backend", "--moe-ncclep-static-shape",
    "--moe-ncclep-zero-copy", "--use-transformer-engine-op-fuser", "--transformer-impl",
    "--tensor-parallel-num-weight-shards", "--expert-tensor-parallel-num-weight-shards",
})  # fmt: skip
JUDGED_KEYS = BRIDGE_KEYS | LM_FLAGS


def _on(value: Any) -> bool:
    return value in _TRUE


# --------------------------------------------------------------------------- the launch in upstream's names


def _bridge_view(keys: Mapping[str, Any]) -> dict[str, Any]:
    """The values Megatron Core's shared checks read, from Bridge keys (class defaults where left out)."""
    env = {k.split(".", 1)[1]: str(v) for k, v in keys.items() if k.startswith("env_vars.") and v is not None}
    return {
        "use_sharp": _on(keys.get("dist.use_sharp", False)),
        "sharp_enabled_group": keys.get("dist.sharp_enabled_group"),
        "num_distributed_optimizer_instances": keys.get("ddp.num_distributed_optimizer_instances", 1),
        "use_tp_pp_dp_mapping": _on(keys.get("dist.use_tp_pp_dp_mapping", False)),
        "hybrid_context_parallel": False,  # Bridge's initialize_model_parallel call does not pass it
        "pipeline_model_parallel_comm_backend": keys.get("model.pipeline_model_parallel_comm_backend"),
        "moe_ncclep_static_shape": _on(keys.get("model.moe_ncclep_static_shape", False)),
        "moe_ncclep_zero_copy": _on(keys.get("model.moe_ncclep_zero_copy", False)),
        "use_transformer_engine_op_fuser": _on(keys.get("model.use_transformer_engine_op_fuser", False)),
        "hybrid_layer_pattern": keys.get("model.hybrid_layer_pattern"),
        "env": env,
        "env_seen": env,  # Bridge exports env_vars itself; the caller's environment is not in the launch
        "dialect": "bridge",
    }


def _lm_view(values: Mapping[str, list[str]], env: Mapping[str, str]) -> dict[str, Any]:
    def one(flag: str, default: Any = None) -> Any:
        vals = values.get(flag)
        return vals[0] if vals else default

    def count(flag: str, default: int) -> int | None:
        try:
            return int(one(flag, default))
        except (TypeError, ValueError):
            return None

    return {
        "use_sharp": "--use-sharp" in values,
        "sharp_enabled_group": one("--sharp-enabled-group"),
        "num_distributed_optimizer_instances": count("--num-distributed-optimizer-instances", 1),
        "use_tp_pp_dp_mapping": "--use-tp-pp-dp-mapping" in values,
        "hybrid_context_parallel": "--hybrid-context-parallel" in values,
        "pipeline_model_parallel_comm_backend": one("--pipeline-model-parallel-comm-backend"),
        "moe_ncclep_static_shape": "--moe-ncclep-static-shape" in values,
        "moe_ncclep_zero_copy": "--moe-ncclep-zero-copy" in values,
        "use_transformer_engine_op_fuser": "--use-transformer-engine-op-fuser" in values,
        "hybrid_layer_pattern": one("--hybrid-layer-pattern") or one("--hybrid-override-pattern"),
        "env": dict(env),
        "env_seen": dict(env),
        "dialect": "megatron-lm",
    }


# --------------------------------------------------------------------------- Megatron Core, both front ends


def _mcore_checks(v: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    yield from _sharp(v)
    yield from _distopt_instances(v, ctx)
    yield from _rank_order(v, ctx)
    yield from _pipeline_backend(v)
    yield from _ncclep(v, ctx)
    yield from _hybrid_segments(v, ctx)


def _sharp(v: Mapping[str, Any]) -> Iterator[Finding]:
    """parallel_state.py:777-791."""
    group, n = v["sharp_enabled_group"], v["num_distributed_optimizer_instances"]
    if not v["use_sharp"]:
        if group is not None:
            yield finding(
                "SHARP_GROUP_WITHOUT_SHARP",
                f"sharp_enabled_group={group} without use_sharp: initialize_model_parallel asserts the group is "
                "only given with SHARP on.",
                "Turn use_sharp on, or drop sharp_enabled_group.",
                ["use_sharp", "sharp_enabled_group"],
            )
        return
    if group is not None and group not in ("dp", "dp_replica"):
        yield finding(
            "SHARP_GROUP_UNKNOWN",
            f"sharp_enabled_group={group}: initialize_model_parallel accepts only dp or dp_replica.",
            "Set sharp_enabled_group to dp (the default) or dp_replica.",
            ["sharp_enabled_group"],
        )
    elif group == "dp_replica" and n is not None and n <= 1:
        yield finding(
            "SHARP_DP_REPLICA_INSTANCES",
            f"SHARP on the dp_replica group with num_distributed_optimizer_instances={n}: "
            "initialize_model_parallel asserts more than one distributed-optimizer instance.",
            "Set num_distributed_optimizer_instances > 1, or sharp_enabled_group=dp.",
            ["sharp_enabled_group", "num_distributed_optimizer_instances"],
        )


def _distopt_instances(v: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """parallel_state.py:921-925 (DP x CP) and :1446-1448 (expert DP)."""
    n = v["num_distributed_optimizer_instances"]
    lay = ctx.layout
    if not n or n <= 1 or lay.dp is None:
        return
    if (lay.dp * lay.cp) % n:
        yield finding(
            "DISTOPT_INSTANCES_DP",
            f"num_distributed_optimizer_instances={n} does not divide DP x CP = {lay.dp} x {lay.cp} = "
            f"{lay.dp * lay.cp}: initialize_model_parallel asserts it.",
            f"Use an instance count dividing {lay.dp * lay.cp} (and the expert DP).",
            ["num_distributed_optimizer_instances", "cp"],
        )
    elif lay.edp is not None and lay.edp % n:
        yield finding(
            "DISTOPT_INSTANCES_EXPERT_DP",
            f"num_distributed_optimizer_instances={n} does not divide the expert data-parallel size "
            f"{lay.edp} (world / (ETP x EP x PP)): initialize_model_parallel asserts it.",
            f"Use an instance count dividing {lay.edp}, or change EP / ETP.",
            ["num_distributed_optimizer_instances", "ep", "etp"],
        )


def _rank_order(v: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """parallel_state.py:898-902 (order tp-cp-ep-pp-dp with use_tp_pp_dp_mapping) and :1041-1045."""
    lay = ctx.layout
    mapped = v["use_tp_pp_dp_mapping"] and lay.pp > 1
    if mapped and lay.dp is not None and lay.edp is not None and lay.edp != lay.dp:
        yield finding(
            "TP_PP_DP_MAPPING_EXPERT_DP",
            f"use_tp_pp_dp_mapping with PP={lay.pp}: the rank order no longer ends in pp, and "
            f"initialize_model_parallel then asserts the attention and MoE layers share one DP size "
            f"(DP={lay.dp}, expert DP={lay.edp}).",
            "Drop use_tp_pp_dp_mapping, or choose EP x ETP = TP x CP so both DP sizes agree.",
            ["use_tp_pp_dp_mapping", "ep", "etp"],
        )
    if v["hybrid_context_parallel"] and lay.dp is not None and (lay.dp * lay.cp) % 2:
        yield finding(
            "HYBRID_CP_ODD_RANKS",
            f"--hybrid-context-parallel with DP x CP = {lay.dp * lay.cp} ranks per data/context-parallel group: "
            "initialize_model_parallel asserts an even number.",
            "Use a DP x CP that is even.",
            ["hybrid_context_parallel", "cp"],
        )


def _pipeline_backend(v: Mapping[str, Any]) -> Iterator[Finding]:
    """parallel_state.py:1200-1206 (UCC) and :1251-1254 (otherwise nccl or None)."""
    backend = v["pipeline_model_parallel_comm_backend"]
    if backend == "ucc":
        if v["env_seen"].get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
            yield finding(
                "PP_UCC_MAX_CONNECTIONS",
                "pipeline_model_parallel_comm_backend=ucc with CUDA_DEVICE_MAX_CONNECTIONS=1 exported: "
                "initialize_model_parallel asserts UCC has more than one connection.",
                "Export CUDA_DEVICE_MAX_CONNECTIONS > 1 (or leave it unset), or use the nccl backend.",
                ["pipeline_model_parallel_comm_backend", "CUDA_DEVICE_MAX_CONNECTIONS"],
            )
    elif backend not in (None, "nccl"):
        yield finding(
            "PP_COMM_BACKEND_UNKNOWN",
            f"pipeline_model_parallel_comm_backend={backend}: initialize_model_parallel accepts nccl or ucc.",
            "Set it to nccl (or leave it unset), or ucc.",
            ["pipeline_model_parallel_comm_backend"],
        )


def _ncclep(v: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """transformer/moe/token_dispatcher.py:1529-1556, _NCCLEPManager.__init__ (the flex-ncclep dispatcher)."""
    c = ctx.cfg
    if c.dispatcher != "flex-ncclep":
        return
    static, zero_copy = v["moe_ncclep_static_shape"], v["moe_ncclep_zero_copy"]
    if zero_copy and not static:
        yield finding(
            "NCCLEP_ZERO_COPY_NEEDS_STATIC",
            "moe_ncclep_zero_copy without moe_ncclep_static_shape: the NCCL EP dispatcher raises (zero copy needs "
            "the fixed [recv_capacity, hidden] symmetric buffers).",
            "Turn moe_ncclep_static_shape on, or moe_ncclep_zero_copy off.",
            ["moe_ncclep_zero_copy", "moe_ncclep_static_shape"],
        )
    if not static:
        return
    if not (v["use_transformer_engine_op_fuser"] and c.moe_grouped_gemm):
        missing = [k for k, on in (("use_transformer_engine_op_fuser", v["use_transformer_engine_op_fuser"]),
                                   ("moe_grouped_gemm", c.moe_grouped_gemm)) if not on]  # fmt: skip
        yield finding(
            "NCCLEP_STATIC_NEEDS_FUSED_GEMM",
            f"moe_ncclep_static_shape without {' and '.join(missing)}: the NCCL EP dispatcher raises (the static "
            "shape needs the fused grouped GEMM over device-side per-expert counts).",
            "Turn use_transformer_engine_op_fuser and moe_grouped_gemm on, or moe_ncclep_static_shape off.",
            ["moe_ncclep_static_shape", *missing],
        )
    if c.precision == "bf16":
        return
    if ctx.gpu is not None and ctx.gpu.compute_capability[0] < 10:
        yield finding(
            "NCCLEP_STATIC_FP8_BLACKWELL",
            f"moe_ncclep_static_shape with {c.precision} on {ctx.gpu.name} (sm {ctx.gpu.compute_capability[0]}x): "
            "the NCCL EP dispatcher raises; the CuTe DSL grouped GEMM needs sm 100 or newer.",
            "Leave moe_ncclep_static_shape off on Hopper, or train in BF16.",
            ["moe_ncclep_static_shape", "precision"],
        )
    flag = v["env"].get("NVTE_CUTEDSL_FUSED_GROUPED_MLP")
    try:
        enabled = flag is not None and int(flag) > 0
    except ValueError:
        enabled = False
    if flag is not None and not enabled:
        yield finding(
            "NCCLEP_STATIC_FP8_CUTEDSL_ENV",
            f"moe_ncclep_static_shape with {c.precision} and NVTE_CUTEDSL_FUSED_GROUPED_MLP={flag}: the NCCL EP "
            "dispatcher raises unless the variable is a positive integer.",
            "Export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1.",
            ["moe_ncclep_static_shape", "NVTE_CUTEDSL_FUSED_GROUPED_MLP"],
        )
    elif flag is None:
        yield finding(
            "NCCLEP_STATIC_FP8_CUTEDSL_ENV_UNSEEN",
            f"moe_ncclep_static_shape with {c.precision}: the NCCL EP dispatcher raises unless "
            "NVTE_CUTEDSL_FUSED_GROUPED_MLP is exported as a positive integer, and the launch does not export it.",
            "Export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (Bridge: env_vars.NVTE_CUTEDSL_FUSED_GROUPED_MLP=1).",
            ["moe_ncclep_static_shape", "NVTE_CUTEDSL_FUSED_GROUPED_MLP"],
        )


def _hybrid_segments(v: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """models/hybrid/hybrid_layer_allocation.py:372-383 and :459-464, select_pipeline_segment."""
    pattern = v["hybrid_layer_pattern"]
    if not isinstance(pattern, str) or "|" not in pattern:
        return
    main = pattern.split("/", 1)[0]
    segments = main.split("|")
    if len(segments) < 2:
        return
    c = ctx.cfg
    staged = [k for k in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")
              if getattr(c, k) is not None]  # fmt: skip
    if staged:
        if v["dialect"] == "bridge":  # Megatron-LM's validate_args asserts it first (arguments.py:778-787)
            yield finding(
                "HYBRID_PIPES_WITH_STAGE_COUNTS",
                f"hybrid_layer_pattern has '|' stage boundaries and {' and '.join(staged)} is set: "
                "HybridModel raises (the pipes already define the stages).",
                "Drop the first/last stage counts, or the '|' separators.",
                ["hybrid_layer_pattern", *staged],
            )
        return
    if len(segments) % c.pp:
        yield finding(
            "HYBRID_PIPE_SEGMENTS_PP",
            f"hybrid_layer_pattern has {len(segments)} '|' segments, not a multiple of PP={c.pp}: HybridModel "
            "raises when it selects this rank's segment.",
            f"Use a PP dividing {len(segments)}, or re-cut the pattern into a multiple of {c.pp} segments.",
            ["hybrid_layer_pattern", "pp"],
        )


def _gtp_instances(values: Mapping[str, list[str]], v: Mapping[str, Any], ctx: Context) -> list[Finding]:
    """parallel_state.py:805-809: GTP weight rematerialization (Megatron-LM derives it as the weight shards over TP,
    arguments.py:1455-1473; Bridge's initialize_model_parallel call does not pass it) with more than one
    distributed-optimizer instance."""
    n = v["num_distributed_optimizer_instances"]
    if not n or n <= 1:
        return []
    remat = []
    for flag, tp in (("--tensor-parallel-num-weight-shards", ctx.cfg.tp),
                     ("--expert-tensor-parallel-num-weight-shards", ctx.etp)):  # fmt: skip
        try:
            shards = int((values.get(flag) or ["0"])[0])
        except ValueError:
            continue
        if tp and shards >= tp and shards % tp == 0 and shards // tp > 1:
            remat.append(f"{flag} {shards} (GTP {shards // tp})")
    if not remat:
        return []
    return [finding(
        "GTP_DISTOPT_INSTANCES",
        f"{' and '.join(remat)} with --num-distributed-optimizer-instances {n}: initialize_model_parallel asserts "
        "GTP weight rematerialization runs with a single distributed-optimizer instance.",
        "Drop --num-distributed-optimizer-instances (1), or the weight shards beyond TP.",
        ["num_distributed_optimizer_instances", *(r.split()[0] for r in remat)],
    )]  # fmt: skip


# --------------------------------------------------------------------------- on the engine's own fields


@check("graphs")
def delay_wgrad_attn_graph_bias(ctx: Context) -> Iterator[Finding]:
    """Bridge training/comm_overlap.py:538-557: comm_overlap.delay_wgrad_compute (the key the request's
    delay_wgrad_compute writes) with the attn CUDA-graph module refuses linear and QKV biases."""
    m, c = ctx.model, ctx.cfg
    if c.launcher != "bridge" or not c.delay_wgrad_compute or "attn" not in (c.cuda_graph_modules or []):
        return
    if m.add_bias_linear or m.add_qkv_bias:
        yield finding(
            "BRIDGE_DELAY_WGRAD_ATTN_GRAPH_BIAS",
            f"delay_wgrad_compute with the attn CUDA-graph module on {m.name}, whose linear or QKV layers carry "
            "biases: Bridge's communication-overlap setup asserts no attention bias.",
            "Leave attn out of cuda_graph_modules, or turn delay_wgrad_compute off.",
            ["delay_wgrad_compute", "cuda_graph_modules"],
        )


# --------------------------------------------------------------------------- entry points


def megatron_launch_checks(
    values: Mapping[str, list[str]], env: Mapping[str, str], ctx: Context
) -> list[Finding]:
    """The checks above on a Megatron-LM launch (flags and the exported environment)."""
    view = _lm_view(values, env)
    out = list(_mcore_checks(view, ctx))
    out += _gtp_instances(values, view, ctx)
    impl = (values.get("--transformer-impl") or ["transformer_engine"])[0]
    m = ctx.model
    if (m.has_dsa or m.has_linear_attention) and impl != "transformer_engine":
        out.append(
            finding(  # models/gpt/experimental_attention_variant_module_specs.py:439-445
                "EXPERIMENTAL_ATTENTION_NEEDS_TE",
                f"--transformer-impl {impl} on {m.name}: the experimental-attention (DSA / Gated DeltaNet) layer spec "
                "asserts transformer_engine.",
                "Drop --transformer-impl (its default is transformer_engine).",
                ["--transformer-impl"],
            )
        )
    return out


def bridge_launch_checks(keys: Mapping[str, Any], ctx: Context) -> list[Finding]:
    """The checks above and Bridge's own on a Bridge override list or config."""
    from .bridge_config_checks import bridge_config_checks

    return [*_mcore_checks(_bridge_view(keys), ctx), *bridge_config_checks(keys, ctx)]
