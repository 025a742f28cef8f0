"""Megatron Bridge 0.6.2's own refusals on override keys the engine has no field for: ``ConfigContainer.validate``
and what it calls (deterministic mode, Megatron-FSDP, packing, ModelOpt, decentralized process groups, mixed
precision, fine-grained offloading; ``training/config.py``), the communication-overlap setup's delayed-wgrad graph
checks (``training/comm_overlap.py``), and the model providers (``models/gpt_provider.py``,
``models/hybrid/hybrid_provider.py``), with the Megatron Core checks only Bridge reaches (the MLA RoPE type, a
hybrid override pattern beside a layer pattern, the experimental-attention spec's TE-only backend).

A key the override list leaves out has its class default (ConfigContainer sections, the providers' fields); a
mixed_precision preset it leaves out is the recipe's, which Bridge applies to the model and optimizer alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..context import Context
from ..findings import Finding
from .cp import finetuning
from .table import finding

_TRUE = (True, "true", "True", "1", 1)
_DETERMINISTIC_NCCL_ALGOS = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS")  # config.py:1057
_RECIPE = object()  # mixed_precision left out: the recipe's preset
# Families whose provider (exaone/exaone_moe/exaone_moe_provider.py:133) or recipe (recipes/gemma/h100/gemma4.py:114)
# turns gradient_accumulation_fusion off; the others take fusions.can_enable_gradient_accumulation_fusion(), True
# wherever Transformer Engine imports.
_NO_GRAD_ACC_FUSION_BY_DEFAULT = {"exaone_moe", "gemma4"}


def _on(value: Any) -> bool:
    return value in _TRUE


def bridge_config_checks(keys: Mapping[str, Any], ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for check in (_deterministic, _fsdp, _eval_cp, _packing, _finetuning_cp, _lora_normalized_dim, _modelopt,
                  _process_groups, _precision, _offload, _providers, _attention, _delayed_wgrad_graphs):  # fmt: skip
        out.extend(check(keys, ctx))
    return out


def _deterministic(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """config.py:1049-1060, _validate_and_apply_deterministic_mode."""
    if not _on(keys.get("model.deterministic_mode", False)):
        return
    if _on(keys.get("model.cross_entropy_loss_fusion", True)):  # the GPT and hybrid providers' default
        yield finding(
            "BRIDGE_DETERMINISTIC_CE_FUSION",
            "model.deterministic_mode=true with the cross-entropy loss fusion on (the providers' default): Bridge "
            "asserts the fusion is off, as it is not deterministic.",
            "Set model.cross_entropy_loss_fusion=false, or drop deterministic_mode.",
            ["model.deterministic_mode", "model.cross_entropy_loss_fusion"],
        )
    algo = keys.get("env_vars.NCCL_ALGO")
    if algo is not None and str(algo) not in _DETERMINISTIC_NCCL_ALGOS:
        yield finding(
            "BRIDGE_DETERMINISTIC_NCCL_ALGO",
            f"model.deterministic_mode=true with env_vars.NCCL_ALGO={algo}: Bridge asserts NCCL_ALGO is one of "
            f"{', '.join(_DETERMINISTIC_NCCL_ALGOS)}.",
            "Set env_vars.NCCL_ALGO=Ring (or Tree).",
            ["model.deterministic_mode", "env_vars.NCCL_ALGO"],
        )
    elif algo is None:
        yield finding(
            "BRIDGE_DETERMINISTIC_NCCL_ALGO_UNSEEN",
            "model.deterministic_mode=true: Bridge asserts NCCL_ALGO is exported as one of "
            f"{', '.join(_DETERMINISTIC_NCCL_ALGOS)}, and the override list does not set env_vars.NCCL_ALGO (the "
            "caller's environment is not in the launch).",
            "Set env_vars.NCCL_ALGO=Ring (or export it before the launch).",
            ["model.deterministic_mode", "env_vars.NCCL_ALGO"],
        )


def _fsdp(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """config.py:1102-1116 (_validate_and_apply_megatron_fsdp_configs) and :1342-1343 (validate)."""
    if _on(keys.get("dist.use_megatron_fsdp", False)) and _on(keys.get("dist.use_torch_fsdp2", False)):
        yield finding(
            "BRIDGE_FSDP_AND_FSDP2",
            "dist.use_megatron_fsdp and dist.use_torch_fsdp2 are both on: Bridge raises, they exclude each other.",
            "Keep one of them.",
            ["dist.use_megatron_fsdp", "dist.use_torch_fsdp2"],
        )
        return
    fsdp = [k for k in ("dist.use_megatron_fsdp", "ddp.use_megatron_fsdp") if _on(keys.get(k, False))]
    if not fsdp:
        return
    if keys.get("env_vars.CUDA_DEVICE_MAX_CONNECTIONS") is not None and (
        str(keys["env_vars.CUDA_DEVICE_MAX_CONNECTIONS"]) == "1"
    ):
        yield finding(
            "BRIDGE_FSDP_MAX_CONNECTIONS",
            f"{fsdp[0]}=true with env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1: Bridge asserts Megatron-FSDP runs with "
            "more than one connection (or the variable unset).",
            "Drop env_vars.CUDA_DEVICE_MAX_CONNECTIONS, or set it above 1.",
            [fsdp[0], "env_vars.CUDA_DEVICE_MAX_CONNECTIONS"],
        )
    if not _on(keys.get("ddp.nccl_ub", False)) and _on(keys.get("ddp.fsdp_manual_registration", False)):
        yield finding(
            "BRIDGE_FSDP_MANUAL_REGISTRATION",
            f"{fsdp[0]}=true with ddp.fsdp_manual_registration=true and ddp.nccl_ub off: Bridge asserts manual "
            "registration only with NCCL user buffers.",
            "Set ddp.nccl_ub=true (Bridge then registers manually by itself), or fsdp_manual_registration=false.",
            [fsdp[0], "ddp.fsdp_manual_registration", "ddp.nccl_ub"],
        )
    if (
        keys.get("ddp.data_parallel_sharding_strategy", "no_shard") == "optim_grads_params"
        and keys.get("train.check_weight_hash_across_dp_replicas_interval") is not None
    ):
        yield finding(
            "BRIDGE_FSDP_WEIGHT_HASH",
            f"{fsdp[0]}=true with the optim_grads_params sharding and "
            "train.check_weight_hash_across_dp_replicas_interval set: Bridge asserts the interval is None.",
            "Set train.check_weight_hash_across_dp_replicas_interval=null (or another sharding strategy).",
            [
                fsdp[0],
                "ddp.data_parallel_sharding_strategy",
                "train.check_weight_hash_across_dp_replicas_interval",
            ],
        )
    if _on(keys.get("dist.use_tp_pp_dp_mapping", False)):
        yield finding(
            "BRIDGE_FSDP_TP_PP_DP_MAPPING",
            f"{fsdp[0]}=true with dist.use_tp_pp_dp_mapping=true: Bridge asserts Megatron-FSDP does not support it.",
            "Set dist.use_tp_pp_dp_mapping=false.",
            [fsdp[0], "dist.use_tp_pp_dp_mapping"],
        )


def _eval_cp(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """config.py:1318-1331, validate (the eval world is the training world without dist_train)."""
    ecp = keys.get("dist.eval_context_parallel_size")
    c = ctx.cfg
    if (
        not isinstance(ecp, int)
        or isinstance(ecp, bool)
        or ecp < 1
        or _on(keys.get("model.dist_train.use_dist_train"))
    ):
        return
    size = c.tp * c.pp * ecp
    if c.num_gpus % size:
        yield finding(
            "BRIDGE_EVAL_CP_WORLD",
            f"dist.eval_context_parallel_size={ecp}: the eval model-parallel size TP x PP x eval CP = {c.tp} x "
            f"{c.pp} x {ecp} = {size} does not divide the {c.num_gpus} GPUs; Bridge asserts it.",
            f"Pick an eval CP with {c.tp * c.pp} x eval CP dividing {c.num_gpus}.",
            ["dist.eval_context_parallel_size", "tp", "pp"],
        )


def _finetuning_cp(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """config.py:1455-1457, validate: fine-tuning with CP > 1 asserts the DDP does not average in the collective
    (the per-token loss already divides by the tokens). Off is the DDP default and the SFT and PEFT bases'."""
    c = ctx.cfg
    if (
        c.cp > 1
        and finetuning(c.launcher, c.peft, c.packed_sequences)
        and _on(keys.get("ddp.average_in_collective"))
    ):
        yield finding(
            "FINETUNE_CP_AVERAGE_IN_COLLECTIVE",
            f"Fine-tuning with CP={c.cp} and ddp.average_in_collective=true: Bridge asserts it is off.",
            "Set ddp.average_in_collective=false.",
            ["ddp.average_in_collective", "cp"],
        )


def _lora_normalized_dim(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """peft/utils.py:682-697 (get_effective_lora_dim): with normalize_moe_lora each routed-expert adapter gets
    dim // moe_router_topk, and Bridge raises unless the dim divides; only expert linears (linear_fc1/2 of the
    MoE layers, utils.py:655-680) reach it."""
    c, m = ctx.cfg, ctx.model
    if c.peft != "lora" or not _on(keys.get("peft.normalize_moe_lora")) or not any(m.moe_layers):
        return
    topk = m.moe_router_topk or 0
    experts = {"linear_fc1", "linear_fc2"} & set(c.lora_target_modules or ())
    if experts and topk > 0 and c.lora_dim % topk:
        up = -(-c.lora_dim // topk) * topk
        yield finding(
            "LORA_NORMALIZED_DIM_TOPK",
            f"LoRA dim {c.lora_dim} with peft.normalize_moe_lora=true on {m.name} (top-{topk} routing, "
            f"{', '.join(sorted(experts))} targeted): Bridge raises unless the dim divides by moe_router_topk, "
            "since each expert adapter gets dim // topk.",
            f"Set ++peft.dim to a multiple of {topk} (e.g. {up}), or drop normalize_moe_lora.",
            ["peft.dim", "peft.normalize_moe_lora"],
        )


def _packing(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """config.py:1155-1156, :1462-1464 and :1480-1481, validate."""
    offline = _on(keys.get("dataset.enable_offline_packing", False))
    in_batch = _on(keys.get("dataset.enable_in_batch_packing", False))
    if offline and in_batch:
        yield finding(
            "BRIDGE_PACKING_EXCLUSIVE",
            "dataset.enable_offline_packing and dataset.enable_in_batch_packing are both on: Bridge raises, they "
            "exclude each other.",
            "Keep one packing mode.",
            ["dataset.enable_offline_packing", "dataset.enable_in_batch_packing"],
        )
        return
    # Only a size the list writes: the recipe's specs carry their own (PackedSequenceSpecs' default is -1).
    size = keys.get("dataset.offline_packing_specs.packed_sequence_size")
    if offline and isinstance(size, int | float) and not isinstance(size, bool) and size <= 0:
        yield finding(
            "BRIDGE_PACKED_SEQUENCE_SIZE",
            f"Offline packing with offline_packing_specs.packed_sequence_size={size}: Bridge raises unless it is "
            "positive.",
            "Set dataset.offline_packing_specs.packed_sequence_size to the packed length (the sequence length).",
            ["dataset.enable_offline_packing", "dataset.offline_packing_specs.packed_sequence_size"],
        )
    if in_batch and keys.get("train.micro_batch_size") == 1:
        yield finding(
            "BRIDGE_IN_BATCH_PACKING_MBS",
            "dataset.enable_in_batch_packing=true with train.micro_batch_size=1: Bridge raises (in-batch packing "
            "concatenates the sequences of one microbatch, so it needs at least two).",
            "Set train.micro_batch_size >= 2, or use offline packing.",
            ["dataset.enable_in_batch_packing", "train.micro_batch_size"],
        )


def _modelopt(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """config.py:1378-1382, validate (gradient_accumulation_fusion defaults on wherever TE imports)."""
    default = ctx.model.family not in _NO_GRAD_ACC_FUSION_BY_DEFAULT
    if _on(keys.get("model.restore_modelopt_state", False)) and _on(
        keys.get("model.gradient_accumulation_fusion", default)
    ):
        yield finding(
            "BRIDGE_MODELOPT_GRAD_ACC_FUSION",
            "model.restore_modelopt_state=true with gradient accumulation fusion on (the providers turn it on "
            "wherever Transformer Engine imports): Bridge asserts it is off for ModelOpt-quantized models.",
            "Set model.gradient_accumulation_fusion=false.",
            ["model.restore_modelopt_state", "model.gradient_accumulation_fusion"],
        )


def _process_groups(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """config.py:1412-1416, validate (use_gloo_process_groups defaults on)."""
    if _on(keys.get("dist.use_decentralized_pg", False)) and _on(
        keys.get("dist.use_gloo_process_groups", True)
    ):
        yield finding(
            "BRIDGE_DECENTRALIZED_PG_GLOO",
            "dist.use_decentralized_pg=true with the Gloo process groups on (their default): Bridge asserts "
            "decentralized process groups use NCCL only.",
            "Set dist.use_gloo_process_groups=false.",
            ["dist.use_decentralized_pg", "dist.use_gloo_process_groups"],
        )


def _precision_flags(keys: Mapping[str, Any]) -> tuple[dict[str, tuple[Any, Any]], bool]:
    """(section -> (bf16, fp16) after runtime_config_update's mixed-precision setup, None where the provider's
    default decides; whether a mixed-precision config applies)."""
    mp = keys.get("mixed_precision", _RECIPE)
    sub = any(k.startswith("mixed_precision.") for k in keys)
    if mp is None and not sub:  # no mixed-precision config: the sections keep their own flags
        model = (keys.get("model.bf16"), keys.get("model.fp16", False))
        optimizer = (keys.get("optimizer.bf16", False), keys.get("optimizer.fp16", False))
        return {"model": model, "optimizer": optimizer}, False
    if isinstance(mp, str):  # a preset: every fp16 one is named fp16_* (mixed_precision.py:185-445)
        preset: tuple[Any, Any] = (not mp.startswith("fp16"), mp.startswith("fp16"))
    else:  # the recipe's config (or MixedPrecisionConfig's defaults): only what the list writes is known
        preset = (None, None)
    flags = (keys.get("mixed_precision.bf16", preset[0]), keys.get("mixed_precision.fp16", preset[1]))
    return {"model": flags, "optimizer": flags}, True  # setup copies them onto both


def _precision(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """config.py:1996-2024, _validate_mixed_precision_consistency."""
    flags, applied = _precision_flags(keys)
    for section, (bf16, fp16) in flags.items():
        if _on(bf16) and _on(fp16):
            where = "mixed_precision" if applied else section
            yield finding(
                "BRIDGE_PRECISION_BF16_AND_FP16",
                f"{section}.bf16 and {section}.fp16 are both on (from {where}): Bridge asserts one precision mode.",
                f"Set only one of {where}.bf16 and {where}.fp16.",
                [f"{where}.bf16", f"{where}.fp16"],
            )
    if applied or not _on(keys.get("optimizer.use_precision_aware_optimizer", False)):
        return
    (m_bf16, m_fp16), (o_bf16, o_fp16) = flags["model"], flags["optimizer"]
    if _on(m_fp16) and not _on(o_fp16):
        yield finding(
            "BRIDGE_PRECISION_AWARE_OPTIMIZER_FLAGS",
            "The precision-aware optimizer on an FP16 model (model.fp16=true) with optimizer.fp16 off and no "
            "mixed_precision: Bridge asserts optimizer.fp16.",
            "Set optimizer.fp16=true (or a mixed_precision preset, which sets both).",
            ["optimizer.use_precision_aware_optimizer", "model.fp16", "optimizer.fp16"],
        )
    elif not _on(m_fp16) and (_on(o_bf16) or _on(o_fp16)) and m_bf16 is not None and not _on(m_bf16):
        yield finding(
            "BRIDGE_PRECISION_AWARE_OPTIMIZER_FLAGS",
            "The precision-aware optimizer on an FP32 model (model.bf16 and model.fp16 off) with optimizer.bf16 "
            "or optimizer.fp16 on and no mixed_precision: Bridge asserts both optimizer flags are off.",
            "Turn optimizer.bf16 and optimizer.fp16 off, or train the model in BF16 (mixed_precision=bf16_mixed).",
            ["optimizer.use_precision_aware_optimizer", "model.bf16", "optimizer.bf16", "optimizer.fp16"],
        )


def _offload(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """config.py:2044-2051, _validate_fine_grained_activation_offloading."""
    impl = keys.get("model.transformer_impl", "transformer_engine")
    if _on(keys.get("model.fine_grained_activation_offloading", False)) and impl != "transformer_engine":
        yield finding(
            "BRIDGE_OFFLOAD_TRANSFORMER_IMPL",
            f"Fine-grained activation offloading with model.transformer_impl={impl}: Bridge raises; it needs "
            "transformer_engine.",
            "Set model.transformer_impl=transformer_engine, or turn the offloading off.",
            ["model.fine_grained_activation_offloading", "model.transformer_impl"],
        )


def _providers(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """gpt_provider.py:232-237 (GPTModelProvider.provide); hybrid_provider.py:176-185 (finalize), with MCore
    models/hybrid/hybrid_model.py:156-167."""
    m, c = ctx.model, ctx.cfg
    # Only a tracker the list turns off: the recipes that capture graphs turn it on (GRAPH_RNG_TRACKER reminds).
    off = "model.use_te_rng_tracker" in keys and not _on(keys["model.use_te_rng_tracker"])
    tracker = _on(keys.get("rng.te_rng_tracker", False))
    if not m.is_hybrid and c.cuda_graph_impl != "none" and off and not tracker:
        yield finding(
            "BRIDGE_GRAPHS_TE_RNG_TRACKER",
            f"cuda_graph_impl={c.cuda_graph_impl} with model.use_te_rng_tracker off: Bridge's GPT provider asserts "
            "model.use_te_rng_tracker (or rng.te_rng_tracker) when it builds a model with CUDA graphs (providers "
            "that build their own model, such as the Qwen3-VL ones, do not).",
            "Set model.use_te_rng_tracker=true.",
            ["cuda_graph_impl", "model.use_te_rng_tracker"],
        )
    chunk = keys.get("model.mamba_chunk_size")
    if isinstance(chunk, int | float) and not isinstance(chunk, bool) and chunk < 1:
        yield finding(
            "BRIDGE_MAMBA_CHUNK_SIZE",
            f"model.mamba_chunk_size={chunk}: Bridge's hybrid provider raises unless it is at least 1.",
            "Leave model.mamba_chunk_size at its default (128) or another positive size.",
            ["model.mamba_chunk_size"],
        )
    override = keys.get("model.hybrid_override_pattern")
    layer = keys.get("model.hybrid_layer_pattern", "recipe" if m.is_hybrid else None)
    if override is not None and layer is not None:
        yield finding(
            "HYBRID_OVERRIDE_AND_LAYER_PATTERN",
            "model.hybrid_override_pattern (deprecated) beside a hybrid_layer_pattern (written, or the hybrid "
            "recipe's): Bridge's hybrid provider asserts only one is given.",
            "Write the pattern as model.hybrid_layer_pattern and drop model.hybrid_override_pattern.",
            ["model.hybrid_override_pattern", "model.hybrid_layer_pattern"],
        )


def _attention(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """MCore multi_latent_attention.py:198-205, experimental_attention_variant/absorbed_mla.py:209-216 and
    dsa.py:1150-1157 (the RoPE type); experimental_attention_variant_module_specs.py:440-445 (TE only).
    Megatron-LM's --rope-type and --transformer-impl choices leave only Bridge to reach them."""
    m = ctx.model
    rope = keys.get("model.rope_type")
    if m.is_mla and rope is not None and rope not in ("rope", "yarn"):
        yield finding(
            "MLA_ROPE_TYPE",
            f"model.rope_type={rope} on the multi-latent-attention {m.name}: Megatron Core raises when it builds "
            "the attention (MLA, absorbed MLA and the DSA indexer support rope and yarn only).",
            "Set model.rope_type to yarn (DeepSeek's) or rope.",
            ["model.rope_type"],
        )
    impl = keys.get("model.transformer_impl", "transformer_engine")
    if (m.has_dsa or m.has_linear_attention) and impl != "transformer_engine":
        yield finding(
            "EXPERIMENTAL_ATTENTION_NEEDS_TE",
            f"model.transformer_impl={impl} on {m.name}: the experimental-attention (DSA / Gated DeltaNet) layer "
            "spec asserts transformer_engine.",
            "Set model.transformer_impl=transformer_engine.",
            ["model.transformer_impl"],
        )


def _delayed_wgrad_graphs(keys: Mapping[str, Any], ctx: Context) -> Iterator[Finding]:
    """comm_overlap.py:536-557, CommOverlapConfig._get_model_comm_overlap_cfgs (comm_overlap.delay_wgrad_compute)."""
    if not _on(keys.get("comm_overlap.delay_wgrad_compute", False)):
        return
    m, c = ctx.model, ctx.cfg
    modules = set(c.cuda_graph_modules or [])
    attn = "attn" in modules
    router = (
        "moe_router" in modules
        and bool(m.moe_shared_expert_intermediate_size)
        and not (c.moe_shared_expert_overlap)
    )
    if not (attn or router):
        return
    if not _on(
        keys.get("model.gradient_accumulation_fusion", m.family not in _NO_GRAD_ACC_FUSION_BY_DEFAULT)
    ):
        yield finding(
            "BRIDGE_DELAY_WGRAD_GRAPHS_GRAD_ACC_FUSION",
            "comm_overlap.delay_wgrad_compute with the attn (or shared-expert moe_router) CUDA-graph module and "
            "model.gradient_accumulation_fusion=false: Bridge asserts the fusion (graphs need its static "
            "gradient buffers).",
            "Set model.gradient_accumulation_fusion=true.",
            ["delay_wgrad_compute", "cuda_graph_modules", "model.gradient_accumulation_fusion"],
        )
