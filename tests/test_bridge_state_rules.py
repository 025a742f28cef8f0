"""Area c of issue 22: Megatron Bridge 0.6.2's ConfigContainer state checks, its providers and comm-overlap setup,
and Megatron Core 0.19.2's initialize_model_parallel, hybrid segment split, NCCL EP dispatcher and MLA RoPE type, as
lint_config judges them on a launch's keys and flags (rules/bridge_state_checks.py, rules/bridge_config_checks.py).

Each test quotes the upstream condition with its file:line (Bridge = ``megatron/bridge``, MCore = ``megatron/core``)
and checks a launch that trips it and the smallest change that clears it.
"""

from __future__ import annotations

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.rules import run
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config

BRIDGE = ["model.expert_model_parallel_size=8", "train.global_batch_size=64"]
LM = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 8 "
      "--micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16")  # fmt: skip


def _lint(launch, model: str = "qwen3-30b-a3b", num_gpus: int = 8, gpu: str | None = None):
    key = "megatron_args" if isinstance(launch, str) else "bridge_overrides"
    extra = {"gpu": gpu} if gpu else {}
    return lint_config(LintConfigRequest(**{key: launch}, model=model, num_gpus=num_gpus, **extra))


def _sev(r, code: str) -> str | None:
    """The severity of ``code`` among the findings (None when it does not fire)."""
    return next((str(getattr(f.severity, "value", f.severity)) for f in r.findings if f.code == code), None)


def fires(launch, code: str, severity: str = "error", **kw) -> bool:
    return _sev(_lint(launch, **kw), code) == severity


def silent(launch, code: str, **kw) -> bool:
    return _sev(_lint(launch, **kw), code) is None


# ---------------------------------------------------------------- MCore parallel_state.py


def test_sharp_group_needs_sharp_and_a_known_group():
    """MCore parallel_state.py:777-791: ``if use_sharp: ... assert sharp_enabled_group in ["dp", "dp_replica"];
    if sharp_enabled_group == "dp_replica": assert num_distributed_optimizer_instances > 1`` else
    ``assert sharp_enabled_group is None``."""
    assert fires([*BRIDGE, "dist.sharp_enabled_group=dp"], "SHARP_GROUP_WITHOUT_SHARP")
    assert silent(
        [*BRIDGE, "dist.sharp_enabled_group=dp", "dist.use_sharp=true"], "SHARP_GROUP_WITHOUT_SHARP"
    )
    assert fires(f"{LM} --sharp-enabled-group dp", "SHARP_GROUP_WITHOUT_SHARP")
    assert fires([*BRIDGE, "dist.use_sharp=true", "dist.sharp_enabled_group=tp"], "SHARP_GROUP_UNKNOWN")
    assert silent([*BRIDGE, "dist.use_sharp=true", "dist.sharp_enabled_group=dp"], "SHARP_GROUP_UNKNOWN")
    replica = [*BRIDGE, "dist.use_sharp=true", "dist.sharp_enabled_group=dp_replica"]
    assert fires(replica, "SHARP_DP_REPLICA_INSTANCES", num_gpus=16)
    assert silent(
        [*replica, "ddp.num_distributed_optimizer_instances=2"], "SHARP_DP_REPLICA_INSTANCES", num_gpus=16
    )


def test_distributed_optimizer_instances_divide_dp_and_expert_dp():
    """MCore parallel_state.py:921-925 ``(data_parallel_size * context_parallel_size) %
    num_distributed_optimizer_instances == 0`` and :1446-1448 ``expert_data_parallel_size %
    num_distributed_optimizer_instances == 0``."""
    # 24 GPUs, TP 1: DP 24; EP 8 -> expert DP 3
    assert fires(f"{LM} --num-distributed-optimizer-instances 5", "DISTOPT_INSTANCES_DP", num_gpus=24)
    assert fires(f"{LM} --num-distributed-optimizer-instances 2", "DISTOPT_INSTANCES_EXPERT_DP", num_gpus=24)
    assert silent(f"{LM} --num-distributed-optimizer-instances 3", "DISTOPT_INSTANCES_EXPERT_DP", num_gpus=24)
    assert fires([*BRIDGE, "ddp.num_distributed_optimizer_instances=2"], "DISTOPT_INSTANCES_EXPERT_DP",
                 num_gpus=24)  # fmt: skip


def test_gtp_needs_one_distributed_optimizer_instance():
    """MCore parallel_state.py:808-811: ``assert not ((gtp_remat_size > 1 or expert_gtp_remat_size > 1) and
    num_distributed_optimizer_instances > 1)``; Megatron-LM derives GTP = weight shards / TP (arguments.py:1455)."""
    flags = LM.replace("--tensor-model-parallel-size 1", "--tensor-model-parallel-size 2")
    gtp = f"{flags} --tensor-parallel-num-weight-shards 4 --num-distributed-optimizer-instances 2"
    assert fires(gtp, "GTP_DISTOPT_INSTANCES", num_gpus=16)
    assert silent(gtp.replace("shards 4", "shards 2"), "GTP_DISTOPT_INSTANCES", num_gpus=16)  # GTP 1
    assert silent(f"{flags} --tensor-parallel-num-weight-shards 4", "GTP_DISTOPT_INSTANCES", num_gpus=16)


def test_tp_pp_dp_mapping_needs_equal_dp_sizes_with_pp():
    """MCore parallel_state.py:898-902: ``order.endswith("pp") or pipeline_model_parallel_size == 1 or
    expert_data_parallel_size == data_parallel_size`` (use_tp_pp_dp_mapping orders tp-cp-ep-pp-dp)."""
    base = [*BRIDGE, "model.pipeline_model_parallel_size=2", "dist.use_tp_pp_dp_mapping=true"]
    assert fires(base, "TP_PP_DP_MAPPING_EXPERT_DP", num_gpus=32)  # DP 16, expert DP 2
    assert silent(base[:-1], "TP_PP_DP_MAPPING_EXPERT_DP", num_gpus=32)
    flags = LM.replace("--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2")
    assert fires(f"{flags} --use-tp-pp-dp-mapping", "TP_PP_DP_MAPPING_EXPERT_DP", num_gpus=32)


def test_hybrid_context_parallel_needs_even_dp_cp_groups():
    """MCore parallel_state.py:1041-1045: ``len(ranks_with_cp) % 2 == 0`` for every dp-cp group."""
    assert silent(f"{LM} --hybrid-context-parallel", "HYBRID_CP_ODD_RANKS", num_gpus=8)
    flags = LM.replace("--expert-model-parallel-size 8", "--expert-model-parallel-size 1")
    assert fires(f"{flags} --hybrid-context-parallel", "HYBRID_CP_ODD_RANKS", num_gpus=3)


def test_pipeline_comm_backend():
    """MCore parallel_state.py:1200-1206 (ucc: ``os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] != "1"``) and
    :1251-1254 (otherwise ``pipeline_model_parallel_comm_backend == None or == "nccl"``)."""
    ucc = [*BRIDGE, "model.pipeline_model_parallel_comm_backend=ucc"]
    assert fires([*ucc, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1"], "PP_UCC_MAX_CONNECTIONS")
    assert silent([*ucc, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=8"], "PP_UCC_MAX_CONNECTIONS")
    assert fires([*BRIDGE, "model.pipeline_model_parallel_comm_backend=gloo"], "PP_COMM_BACKEND_UNKNOWN")
    assert silent([*BRIDGE, "model.pipeline_model_parallel_comm_backend=nccl"], "PP_COMM_BACKEND_UNKNOWN")


# ---------------------------------------------------------------- MCore token_dispatcher.py (NCCL EP)

NCCLEP = [*BRIDGE, "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=ncclep"]


def test_ncclep_zero_copy_and_static_shape():
    """MCore transformer/moe/token_dispatcher.py:1529-1544: ``if self.zero_copy and not self.static_shape: raise``;
    ``if self.static_shape: if not (config.use_transformer_engine_op_fuser and config.moe_grouped_gemm): raise``."""
    assert fires([*NCCLEP, "model.moe_ncclep_zero_copy=true"], "NCCLEP_ZERO_COPY_NEEDS_STATIC")
    static = [*NCCLEP, "model.moe_ncclep_static_shape=true", "model.moe_grouped_gemm=true"]
    assert silent([*static, "model.moe_ncclep_zero_copy=true"], "NCCLEP_ZERO_COPY_NEEDS_STATIC")
    assert fires(static, "NCCLEP_STATIC_NEEDS_FUSED_GEMM")
    assert silent([*static, "model.use_transformer_engine_op_fuser=true"], "NCCLEP_STATIC_NEEDS_FUSED_GEMM")
    # another dispatcher never builds the NCCL EP manager
    assert silent([*BRIDGE, "model.moe_ncclep_zero_copy=true"], "NCCLEP_ZERO_COPY_NEEDS_STATIC")


def test_ncclep_static_shape_with_fp8_needs_blackwell_and_the_cutedsl_switch():
    """MCore transformer/moe/token_dispatcher.py:1545-1556: with fp8/fp4, ``torch.cuda.get_device_capability()[0]
    < 10`` raises, and so does ``int(os.environ.get("NVTE_CUTEDSL_FUSED_GROUPED_MLP", "0")) <= 0``."""
    fp8 = [*NCCLEP, "model.moe_ncclep_static_shape=true", "model.moe_grouped_gemm=true",
           "model.use_transformer_engine_op_fuser=true", "mixed_precision=bf16_with_mxfp8_mixed"]  # fmt: skip
    assert fires(fp8, "NCCLEP_STATIC_FP8_BLACKWELL", gpu="h100")
    assert silent(fp8, "NCCLEP_STATIC_FP8_BLACKWELL", gpu="b200")
    assert fires(
        [*fp8, "env_vars.NVTE_CUTEDSL_FUSED_GROUPED_MLP=0"], "NCCLEP_STATIC_FP8_CUTEDSL_ENV", gpu="b200"
    )
    assert fires(fp8, "NCCLEP_STATIC_FP8_CUTEDSL_ENV_UNSEEN", "warning", gpu="b200")
    ok = [*fp8, "env_vars.NVTE_CUTEDSL_FUSED_GROUPED_MLP=1"]
    assert silent(ok, "NCCLEP_STATIC_FP8_CUTEDSL_ENV", gpu="b200")
    assert silent(ok, "NCCLEP_STATIC_FP8_CUTEDSL_ENV_UNSEEN", gpu="b200")


# ---------------------------------------------------------------- MCore hybrid_layer_allocation.py


def test_hybrid_pipe_segments():
    """MCore models/hybrid/hybrid_layer_allocation.py:378-383 (pipes with first/last stage counts raise) and
    :459-464 (``len(segments) > 1 and len(segments) % pp_size != 0`` raises)."""
    pipes = ["model.hybrid_layer_pattern=M-M-M*-|M-M-M*-|M-M-M*-", "train.global_batch_size=64"]
    pp2 = [*pipes, "model.pipeline_model_parallel_size=2"]
    assert fires(pp2, "HYBRID_PIPE_SEGMENTS_PP", model="nemotron-3-nano")
    assert silent([*pipes, "model.pipeline_model_parallel_size=3"], "HYBRID_PIPE_SEGMENTS_PP",
                  model="nemotron-3-nano", num_gpus=6)  # fmt: skip
    staged = [*pp2, "model.num_layers_in_first_pipeline_stage=3"]
    assert fires(staged, "HYBRID_PIPES_WITH_STAGE_COUNTS", model="nemotron-3-nano")
    assert silent(pp2, "HYBRID_PIPES_WITH_STAGE_COUNTS", model="nemotron-3-nano")


# ---------------------------------------------------------------- attention variants


def test_mla_rope_type_is_rope_or_yarn():
    """MCore transformer/multi_latent_attention.py:198-205 (and absorbed_mla.py:209-216, dsa.py:1150-1157):
    ``else: raise ValueError(f'Unsupported RoPE type ...')`` for anything but rope and yarn."""
    assert fires([*BRIDGE, "model.rope_type=llama"], "MLA_ROPE_TYPE", model="deepseek-v3", num_gpus=64)
    assert silent([*BRIDGE, "model.rope_type=yarn"], "MLA_ROPE_TYPE", model="deepseek-v3", num_gpus=64)
    assert silent([*BRIDGE, "model.rope_type=llama"], "MLA_ROPE_TYPE")  # not MLA


def test_experimental_attention_needs_transformer_engine():
    """MCore models/gpt/experimental_attention_variant_module_specs.py:442: ``assert config.transformer_impl ==
    "transformer_engine"``."""
    assert fires([*BRIDGE, "model.transformer_impl=local"], "EXPERIMENTAL_ATTENTION_NEEDS_TE", model="glm-5",
                 num_gpus=64)  # fmt: skip
    assert fires(
        f"{LM} --transformer-impl local", "EXPERIMENTAL_ATTENTION_NEEDS_TE", model="glm-5", num_gpus=64
    )
    assert silent(LM, "EXPERIMENTAL_ATTENTION_NEEDS_TE", model="glm-5", num_gpus=64)
    assert silent(f"{LM} --transformer-impl local", "EXPERIMENTAL_ATTENTION_NEEDS_TE")  # no DSA / GDN layers


# ---------------------------------------------------------------- Bridge training/config.py


def test_deterministic_mode():
    """Bridge training/config.py:1053-1060: ``assert not getattr(self.model, "cross_entropy_loss_fusion", False)``
    and ``assert os.getenv("NCCL_ALGO", -1) != -1 and os.getenv("NCCL_ALGO") in all_reduce_choices``."""
    det = [*BRIDGE, "model.deterministic_mode=true"]
    assert fires(det, "BRIDGE_DETERMINISTIC_CE_FUSION")  # the provider's default fusion is on
    assert silent([*det, "model.cross_entropy_loss_fusion=false"], "BRIDGE_DETERMINISTIC_CE_FUSION")
    assert fires([*det, "env_vars.NCCL_ALGO=NVLS"], "BRIDGE_DETERMINISTIC_NCCL_ALGO")
    assert fires(det, "BRIDGE_DETERMINISTIC_NCCL_ALGO_UNSEEN", "warning")
    assert silent([*det, "env_vars.NCCL_ALGO=Ring"], "BRIDGE_DETERMINISTIC_NCCL_ALGO")
    assert silent([*det, "env_vars.NCCL_ALGO=Ring"], "BRIDGE_DETERMINISTIC_NCCL_ALGO_UNSEEN")


def test_megatron_fsdp_state():
    """Bridge training/config.py:1102-1116: ``os.getenv("CUDA_DEVICE_MAX_CONNECTIONS") != "1"``; without nccl_ub
    ``assert not self.ddp.fsdp_manual_registration``; optim_grads_params needs
    ``check_weight_hash_across_dp_replicas_interval is None``; ``assert not self.dist.use_tp_pp_dp_mapping``;
    and :1342-1343 ``use_megatron_fsdp and use_torch_fsdp2`` raise."""
    fsdp = [*BRIDGE, "ddp.use_megatron_fsdp=true"]
    assert fires([*fsdp, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1"], "BRIDGE_FSDP_MAX_CONNECTIONS")
    assert silent([*fsdp, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=32"], "BRIDGE_FSDP_MAX_CONNECTIONS")
    assert fires([*fsdp, "ddp.fsdp_manual_registration=true"], "BRIDGE_FSDP_MANUAL_REGISTRATION")
    assert silent(
        [*fsdp, "ddp.fsdp_manual_registration=true", "ddp.nccl_ub=true"], "BRIDGE_FSDP_MANUAL_REGISTRATION"
    )
    sharded = [*fsdp, "ddp.data_parallel_sharding_strategy=optim_grads_params"]
    assert fires(
        [*sharded, "train.check_weight_hash_across_dp_replicas_interval=10"], "BRIDGE_FSDP_WEIGHT_HASH"
    )
    assert silent(sharded, "BRIDGE_FSDP_WEIGHT_HASH")
    assert fires([*fsdp, "dist.use_tp_pp_dp_mapping=true"], "BRIDGE_FSDP_TP_PP_DP_MAPPING")
    assert silent([*BRIDGE, "dist.use_tp_pp_dp_mapping=true"], "BRIDGE_FSDP_TP_PP_DP_MAPPING")
    both = [*BRIDGE, "dist.use_megatron_fsdp=true", "dist.use_torch_fsdp2=true"]
    assert fires(both, "BRIDGE_FSDP_AND_FSDP2")
    assert silent(both[:-1], "BRIDGE_FSDP_AND_FSDP2")


def test_eval_context_parallel_divides_the_world():
    """Bridge training/config.py:1328: ``eval_world_size % (tp * pp * eval_context_parallel_size) == 0``."""
    assert fires([*BRIDGE, "dist.eval_context_parallel_size=3"], "BRIDGE_EVAL_CP_WORLD")
    assert silent([*BRIDGE, "dist.eval_context_parallel_size=4"], "BRIDGE_EVAL_CP_WORLD")


def test_packing_switches():
    """Bridge training/config.py:1155-1156 (offline and in-batch packing exclude each other), :1463-1464
    (``packed_sequence_size <= 0`` raises; judged when the list writes the size, the recipe's specs carry theirs), :1480-1481 (in-batch packing
    with ``train.micro_batch_size == 1`` raises)."""
    both = [*BRIDGE, "dataset.enable_offline_packing=true", "dataset.enable_in_batch_packing=true"]
    assert fires(both, "BRIDGE_PACKING_EXCLUSIVE")
    assert silent(both[:-1], "BRIDGE_PACKING_EXCLUSIVE")
    packed = [
        *BRIDGE,
        "dataset.enable_offline_packing=true",
        "dataset.offline_packing_specs.pad_cu_seqlens=false",
    ]
    assert fires(
        [*packed, "dataset.offline_packing_specs.packed_sequence_size=-1"], "BRIDGE_PACKED_SEQUENCE_SIZE"
    )
    assert silent(
        [*packed, "dataset.offline_packing_specs.packed_sequence_size=4096"], "BRIDGE_PACKED_SEQUENCE_SIZE"
    )
    assert silent(packed, "BRIDGE_PACKED_SEQUENCE_SIZE")  # the recipe's specs give the size
    in_batch = [*BRIDGE, "dataset.enable_in_batch_packing=true"]
    assert fires([*in_batch, "train.micro_batch_size=1"], "BRIDGE_IN_BATCH_PACKING_MBS")
    assert silent([*in_batch, "train.micro_batch_size=2"], "BRIDGE_IN_BATCH_PACKING_MBS")


def test_modelopt_and_decentralized_process_groups():
    """Bridge training/config.py:1378-1381 (``restore_modelopt_state`` asserts ``not gradient_accumulation_fusion``,
    on by default wherever TE imports, utils/fusions.py:50-53) and :1412-1416 (``use_decentralized_pg`` asserts
    ``not use_gloo_process_groups``, on by default)."""
    opt = [*BRIDGE, "model.restore_modelopt_state=true"]
    assert fires(opt, "BRIDGE_MODELOPT_GRAD_ACC_FUSION")
    assert silent([*opt, "model.gradient_accumulation_fusion=false"], "BRIDGE_MODELOPT_GRAD_ACC_FUSION")
    pg = [*BRIDGE, "dist.use_decentralized_pg=true"]
    assert fires(pg, "BRIDGE_DECENTRALIZED_PG_GLOO")
    assert silent([*pg, "dist.use_gloo_process_groups=false"], "BRIDGE_DECENTRALIZED_PG_GLOO")


def test_mixed_precision_consistency():
    """Bridge training/config.py:1998-2022 (_validate_mixed_precision_consistency, after runtime_config_update
    copied a mixed_precision config onto the model and optimizer): ``not (bf16 and fp16)`` for both, and with
    the precision-aware optimizer ``model.fp16 -> optimizer.fp16``, FP32 model -> both optimizer flags off."""
    assert fires([*BRIDGE, "mixed_precision.bf16=true", "mixed_precision.fp16=true"],
                 "BRIDGE_PRECISION_BF16_AND_FP16")  # fmt: skip
    assert fires([*BRIDGE, "mixed_precision=bf16_mixed", "mixed_precision.fp16=true"],
                 "BRIDGE_PRECISION_BF16_AND_FP16")  # fmt: skip
    assert silent([*BRIDGE, "mixed_precision=bf16_mixed", "mixed_precision.fp16=false"],
                  "BRIDGE_PRECISION_BF16_AND_FP16")  # fmt: skip
    assert fires([*BRIDGE, "mixed_precision=null", "optimizer.bf16=true", "optimizer.fp16=true"],
                 "BRIDGE_PRECISION_BF16_AND_FP16")  # fmt: skip
    none = [*BRIDGE, "mixed_precision=null", "optimizer.use_precision_aware_optimizer=true"]
    assert fires([*none, "model.fp16=true", "model.bf16=false"], "BRIDGE_PRECISION_AWARE_OPTIMIZER_FLAGS")
    assert silent([*none, "model.fp16=true", "model.bf16=false", "optimizer.fp16=true"],
                  "BRIDGE_PRECISION_AWARE_OPTIMIZER_FLAGS")  # fmt: skip
    assert fires([*none, "model.bf16=false", "optimizer.bf16=true"], "BRIDGE_PRECISION_AWARE_OPTIMIZER_FLAGS")
    # model.bf16 left out: the provider's default decides, so the engine stays silent
    assert silent([*none, "optimizer.bf16=true"], "BRIDGE_PRECISION_AWARE_OPTIMIZER_FLAGS")
    # a mixed_precision preset sets the model and optimizer alike
    assert silent([*BRIDGE, "optimizer.use_precision_aware_optimizer=true", "model.fp16=true"],
                  "BRIDGE_PRECISION_AWARE_OPTIMIZER_FLAGS")  # fmt: skip


def test_fine_grained_offloading_needs_transformer_engine():
    """Bridge training/config.py:2047-2048: ``if model_cfg.transformer_impl != "transformer_engine": raise``."""
    off = [*BRIDGE, "model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn]",
           "env_vars.NVTE_CPU_OFFLOAD_V1=1"]  # fmt: skip
    assert fires([*off, "model.transformer_impl=local"], "BRIDGE_OFFLOAD_TRANSFORMER_IMPL")
    assert silent(off, "BRIDGE_OFFLOAD_TRANSFORMER_IMPL")


# ---------------------------------------------------------------- Bridge providers and comm_overlap.py


def test_gpt_provider_graphs_need_the_te_rng_tracker():
    """Bridge models/gpt_provider.py:233-234: ``if self.cuda_graph_impl != "none": assert use_te_rng_tracker``
    (config.py:1276-1277 copies rng.te_rng_tracker onto the model). A warning: providers with their own provide
    (Qwen3-VL's, qwen_vl/qwen3_vl_provider.py:142, :309) never assert it, and a launch does not say its provider;
    judged when the launch turns the tracker off."""
    graphs = [*BRIDGE, "model.cuda_graph_impl=transformer_engine", "model.cuda_graph_modules=[attn]"]
    assert fires([*graphs, "model.use_te_rng_tracker=false"], "BRIDGE_GRAPHS_TE_RNG_TRACKER", "warning")
    assert silent(
        [*graphs, "model.use_te_rng_tracker=false", "rng.te_rng_tracker=true"], "BRIDGE_GRAPHS_TE_RNG_TRACKER"
    )
    # left out: the recipe's value (the recipes that capture graphs turn it on; GRAPH_RNG_TRACKER reminds)
    assert silent(graphs, "BRIDGE_GRAPHS_TE_RNG_TRACKER")
    assert silent([*graphs, "model.use_te_rng_tracker=true"], "BRIDGE_GRAPHS_TE_RNG_TRACKER")
    assert silent([*graphs, "rng.te_rng_tracker=true"], "BRIDGE_GRAPHS_TE_RNG_TRACKER")
    assert silent(BRIDGE, "BRIDGE_GRAPHS_TE_RNG_TRACKER")


def test_hybrid_provider_finalize():
    """Bridge models/hybrid/hybrid_provider.py:176-177 (``mamba_chunk_size < 1`` raises) and :181-182
    (``hybrid_override_pattern`` asserts ``hybrid_layer_pattern is None``; the hybrid recipes set one)."""
    assert fires(["model.mamba_chunk_size=0"], "BRIDGE_MAMBA_CHUNK_SIZE", model="nemotron-3-nano")
    assert silent(["model.mamba_chunk_size=128"], "BRIDGE_MAMBA_CHUNK_SIZE", model="nemotron-3-nano")
    override = ["model.hybrid_override_pattern=M-M-M*-M-M-M*-", "train.global_batch_size=64"]
    assert fires(override, "HYBRID_OVERRIDE_AND_LAYER_PATTERN", model="nemotron-3-nano")
    assert silent([*override, "model.hybrid_layer_pattern=null"], "HYBRID_OVERRIDE_AND_LAYER_PATTERN",
                  model="nemotron-3-nano")  # fmt: skip


def test_delayed_wgrad_inside_attention_graphs():
    """Bridge training/comm_overlap.py:538-557, under ``user_comm_overlap_cfg.delay_wgrad_compute is True``: with
    the attn graph module (or moe_router with an unoverlapped shared expert) ``assert
    model_cfg.gradient_accumulation_fusion``, and with attn ``assert not add_bias_linear and not add_qkv_bias``."""
    wgrad = [*BRIDGE, "comm_overlap.delay_wgrad_compute=true", "model.overlap_moe_expert_parallel_comm=true",
             "model.cuda_graph_impl=transformer_engine", "model.cuda_graph_modules=[attn]",
             "model.use_te_rng_tracker=true"]  # fmt: skip
    assert fires(
        [*wgrad, "model.gradient_accumulation_fusion=false"], "BRIDGE_DELAY_WGRAD_GRAPHS_GRAD_ACC_FUSION"
    )
    assert silent(wgrad, "BRIDGE_DELAY_WGRAD_GRAPHS_GRAD_ACC_FUSION")
    assert fires(wgrad, "BRIDGE_DELAY_WGRAD_ATTN_GRAPH_BIAS", model="gpt-oss-120b", num_gpus=8)
    assert silent(wgrad, "BRIDGE_DELAY_WGRAD_ATTN_GRAPH_BIAS")  # Qwen3 has no attention bias


def test_the_bias_check_runs_on_a_request_too():
    """The request's delay_wgrad_compute is written as comm_overlap.delay_wgrad_compute for Bridge."""
    cfg = TrainingConfig(model="gpt-oss-120b", num_gpus=8, ep=8, seq_len=4096, delay_wgrad_compute=True,
                         ep_overlap=True, cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"])  # fmt: skip
    assert "BRIDGE_DELAY_WGRAD_ATTN_GRAPH_BIAS" in {f.code for f in run(build_context(cfg))}
    cfg = cfg.model_copy(update={"cuda_graph_modules": ["moe_router"]})
    assert "BRIDGE_DELAY_WGRAD_ATTN_GRAPH_BIAS" not in {f.code for f in run(build_context(cfg))}


def test_judged_keys_say_so_under_not_checked():
    """A key these rules read stays under not_checked (its memory and step-time effect is not modelled), saying that
    its validity is judged; a key no rule reads says that."""
    r = _lint([*BRIDGE, "dist.use_sharp=true", "train.manual_gc_eval=100"])
    notes = {k: n.requires for n in r.not_checked for k in n.keys}
    assert "validity is judged" in notes["dist.use_sharp"]
    assert notes["train.manual_gc_eval"] == "not read by the engine: no rule uses it"
