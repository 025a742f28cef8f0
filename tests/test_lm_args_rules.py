"""The lm-args area of the upstream inventory (issue 22): Megatron-LM core_r0.19.0 validate_args checks
(megatron/training/arguments.py, "LM") on flags the engine's fields do not carry, and the Megatron Core 0.19.2
OptimizerConfig checks (optimizer/optimizer_config.py, "MCore") Megatron-LM builds from the same flags. Each test
quotes upstream's condition with its line, trips the rule through lint_config on a Megatron-LM launch and makes
the minimal change that clears it; where validate_args rewrites a deprecated flag before the line, the test pins
that the rule reads the rewritten value.
"""

from __future__ import annotations

import pytest

from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules.table import rule_table
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config

LM = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 8 "
      "--micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16")  # fmt: skip
QWEN = dict(model="qwen3-30b-a3b", num_gpus=8)
# the launch writes the architecture: the flags that describe the model (experts, MLA, biases, tying) are judged
ARCH = ("--num-layers 48 --hidden-size 2048 --num-attention-heads 32 --max-position-embeddings 40960 "
        "--position-embedding-type rope")  # fmt: skip


def lint(flags: str, **kw):
    return lint_config(LintConfigRequest(**{**QWEN, "megatron_args": flags, **kw}))


def fires(code: str, flags: str, **kw) -> bool:
    found = [f for f in lint(flags, **kw).findings if f.code == code]
    assert all(f.severity is rule_table()[code].severity for f in found)
    return bool(found)


def test_attention_backend_local_needs_spec_local():
    """LM arguments.py:434-435 ``if args.attention_backend == AttnBackend.local: assert args.spec[0] ==
    'local'`` (no --spec: args.spec is None and indexing it fails too)."""
    assert fires("LM_ATTENTION_BACKEND_LOCAL", f"{LM} --attention-backend local")
    assert not fires("LM_ATTENTION_BACKEND_LOCAL", f"{LM} --attention-backend local --spec local")
    assert not fires("LM_ATTENTION_BACKEND_LOCAL", f"{LM} --attention-backend fused")


def test_hybrid_pattern_flags():
    """LM arguments.py:720-725 ``if args.hybrid_override_pattern is not None: assert args.hybrid_layer_pattern
    is None``; :776-786 ``has_pipes = '|' in pattern.split('/')[0]`` then ``assert
    args.decoder_first_pipeline_num_layers is None`` (and last); the deprecated pattern is applied first
    (:731), so it counts with pipes too."""
    pp2 = LM.replace("--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2")
    assert fires(
        "LM_HYBRID_PATTERN_FLAGS", f"{LM} --hybrid-override-pattern M-M- --hybrid-layer-pattern M-M-"
    )
    assert not fires("LM_HYBRID_PATTERN_FLAGS", f"{LM} --hybrid-layer-pattern M-M-")
    assert fires(
        "LM_HYBRID_PATTERN_FLAGS", f"{pp2} --hybrid-layer-pattern M-|M- --decoder-first-pipeline-num-layers 2"
    )
    assert fires(
        "LM_HYBRID_PATTERN_FLAGS",
        f"{pp2} --hybrid-override-pattern M-|M- --decoder-last-pipeline-num-layers 2",
    )
    # the pipes after the MTP separator do not count
    assert not fires(
        "LM_HYBRID_PATTERN_FLAGS",
        f"{pp2} --hybrid-layer-pattern M-M-/M|M --decoder-first-pipeline-num-layers 2",
    )
    assert not fires(
        "LM_HYBRID_PATTERN_FLAGS", f"{pp2} --hybrid-layer-pattern M-M- --decoder-first-pipeline-num-layers 2"
    )


def test_hybrid_pipe_segments_divide_over_pp():
    """LM arguments.py:817-828: ``if segments == 1 and PP > 1`` nothing, else ``assert segments % PP == 0``."""
    pp2 = LM.replace("--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2")
    assert fires("LM_HYBRID_PIPE_SEGMENTS", f"{pp2} --hybrid-layer-pattern M-|M-|M-")
    assert not fires("LM_HYBRID_PIPE_SEGMENTS", f"{pp2} --hybrid-layer-pattern M-|M-|M-|M-")
    assert not fires(
        "LM_HYBRID_PIPE_SEGMENTS", f"{pp2} --hybrid-layer-pattern M-M-M-"
    )  # no pipes: split at build


def test_overlap_param_gather():
    """LM arguments.py:990-995 ``if args.overlap_param_gather: assert args.use_distributed_optimizer or
    args.use_megatron_fsdp or args.optimizer == 'dist_muon'`` and ``assert args.overlap_grad_reduce``."""
    assert fires("LM_OVERLAP_PARAM_GATHER", f"{LM} --overlap-param-gather --overlap-grad-reduce")
    assert fires("LM_OVERLAP_PARAM_GATHER", f"{LM} --overlap-param-gather --use-distributed-optimizer")
    ok = f"{LM} --overlap-param-gather --use-distributed-optimizer --overlap-grad-reduce"
    assert not fires("LM_OVERLAP_PARAM_GATHER", ok)
    assert not fires(
        "LM_OVERLAP_PARAM_GATHER", f"{LM} --overlap-param-gather --optimizer dist_muon --overlap-grad-reduce"
    )


FSDP2 = (LM.replace("--expert-model-parallel-size 8", "--expert-model-parallel-size 1")
         + " --use-torch-fsdp2 --no-gradient-accumulation-fusion --untie-embeddings-and-output-weights")  # fmt: skip


@pytest.mark.parametrize(
    "extra",
    ["--pipeline-model-parallel-size 2", "--expert-model-parallel-size 8", "--use-distributed-optimizer",
     "--ckpt-format torch", "--optimizer muon"],
)  # fmt: skip
def test_torch_fsdp2_limits(extra):
    """LM arguments.py:999-1013 (``--use-torch-fsdp2``: PP == 1, EP == 1, not use_distributed_optimizer, not
    gradient_accumulation_fusion, ckpt_format in (torch_dist, torch_dcp), untied embeddings, not fp16) and
    :1684 (``assert not args.use_torch_fsdp2`` for an optimizer other than sgd/adam)."""
    assert not fires("LM_TORCH_FSDP2", FSDP2)
    assert fires("LM_TORCH_FSDP2", f"{FSDP2} {extra}", num_gpus=16)


def test_torch_fsdp2_defaults_it_refuses():
    """Gradient accumulation fusion is on by default (--no-gradient-accumulation-fusion turns it off) and the
    embeddings are tied unless --untie-embeddings-and-output-weights: both assert under --use-torch-fsdp2."""
    assert fires("LM_TORCH_FSDP2", FSDP2.replace(" --no-gradient-accumulation-fusion", ""))
    assert fires("LM_TORCH_FSDP2", f"{ARCH} " + FSDP2.replace(" --untie-embeddings-and-output-weights", ""))
    # a flag list that leaves the model to a separate definition does not show whether it ties the embeddings
    assert not fires("LM_TORCH_FSDP2", FSDP2.replace(" --untie-embeddings-and-output-weights", ""))


def test_fsdp_refuses_one_max_connection():
    """LM arguments.py:1014-1015 and :1143-1144 ``assert os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS') !=
    "1"`` under torch FSDP2 and Megatron-FSDP; a launch that exports nothing is not judged."""
    mfsdp = f"{LM} --use-megatron-fsdp --ckpt-format fsdp_dtensor"
    assert fires(
        "LM_FSDP_MAX_CONNECTIONS", f"export CUDA_DEVICE_MAX_CONNECTIONS=1\npython pretrain_gpt.py {mfsdp}"
    )
    assert fires(
        "LM_FSDP_MAX_CONNECTIONS", f"export CUDA_DEVICE_MAX_CONNECTIONS=1\npython pretrain_gpt.py {FSDP2}"
    )
    assert not fires(
        "LM_FSDP_MAX_CONNECTIONS", f"export CUDA_DEVICE_MAX_CONNECTIONS=8\npython pretrain_gpt.py {mfsdp}"
    )
    assert not fires("LM_FSDP_MAX_CONNECTIONS", mfsdp)


def test_param_gather_with_optimizer_step():
    """LM arguments.py:1032-1040: --overlap-param-gather-with-optimizer-step asserts use_distributed_optimizer,
    overlap_param_gather, ``args.virtual_pipeline_model_parallel_size is not None`` (derived at :907-949) and
    ``not args.use_dist_ckpt`` (ckpt_format != 'torch', common_utils.py:555-556)."""
    pp = LM.replace("--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2")
    base = f"{pp} --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
    ok = f"{base} --overlap-param-gather-with-optimizer-step --num-virtual-stages-per-pipeline-rank 2 --ckpt-format torch"
    assert not fires("LM_PARAM_GATHER_WITH_OPTIMIZER_STEP", ok, num_gpus=16)
    assert fires("LM_PARAM_GATHER_WITH_OPTIMIZER_STEP", ok.replace(" --ckpt-format torch", ""), num_gpus=16)
    assert fires("LM_PARAM_GATHER_WITH_OPTIMIZER_STEP", ok.replace(" --num-virtual-stages-per-pipeline-rank 2", ""),
                 num_gpus=16)  # fmt: skip
    one = ok.replace("--num-virtual-stages-per-pipeline-rank 2", "--num-virtual-stages-per-pipeline-rank 1")
    assert fires("LM_PARAM_GATHER_WITH_OPTIMIZER_STEP", one, num_gpus=16)  # 1 virtual stage: VPP None
    # 48 layers / PP 2 / 6 per virtual stage = VPP 4
    per = ok.replace("--num-virtual-stages-per-pipeline-rank 2", "--num-layers-per-virtual-pipeline-stage 6")
    assert not fires("LM_PARAM_GATHER_WITH_OPTIMIZER_STEP", f"{per} --num-layers 48", num_gpus=16)
    # Megatron-FSDP passes :991 but turns the distributed optimizer on only at :1112, after :1033
    fsdp = ok.replace(" --use-distributed-optimizer", " --use-megatron-fsdp")
    assert fires("LM_PARAM_GATHER_WITH_OPTIMIZER_STEP", fsdp, num_gpus=16)
    assert fires("LM_PARAM_GATHER_WITH_OPTIMIZER_STEP",
                 ok.replace("--overlap-param-gather --", "--"), num_gpus=16)  # fmt: skip


MFSDP = f"{LM} --use-megatron-fsdp --ckpt-format fsdp_dtensor"


@pytest.mark.parametrize(
    "extra",
    ["--moe-single-grouped-weight", "--optimizer muon", "--check-weight-hash-across-dp-replicas-interval 10",
     "--init-model-with-meta-device --data-parallel-sharding-strategy no_shard", "--ckpt-format torch_dist"],
)  # fmt: skip
def test_megatron_fsdp_limits(extra):
    """LM arguments.py:1118-1163 under --use-megatron-fsdp: ``raise ValueError`` for moe_single_grouped_weight
    or _bias, ``assert args.optimizer in ('sgd', 'adam')``, with optim_grads_params (the default) ``assert
    args.check_weight_hash_across_dp_replicas_interval is None``, ``assert args.ckpt_format == "fsdp_dtensor"``,
    and ``raise ValueError`` for init_model_with_meta_device with no_shard; :1685 repeats the optimizer one."""
    assert not fires("LM_MEGATRON_FSDP", MFSDP)
    assert fires("LM_MEGATRON_FSDP", f"{MFSDP} {extra}")


def test_megatron_fsdp_needs_its_checkpoint_format_by_default():
    """``--ckpt-format`` defaults to torch_dist: a Megatron-FSDP launch must name fsdp_dtensor."""
    assert fires("LM_MEGATRON_FSDP", f"{LM} --use-megatron-fsdp")
    assert not fires("LM_MEGATRON_FSDP", f"{MFSDP} --data-parallel-sharding-strategy optim_grads "
                     "--check-weight-hash-across-dp-replicas-interval 10")  # fmt: skip


def test_fsdp_manual_registration():
    """LM arguments.py:1166-1169 ``if args.fsdp_manual_registration: assert args.use_megatron_fsdp`` and
    ``assert args.nccl_ub``."""
    assert fires("LM_FSDP_MANUAL_REGISTRATION", f"{LM} --fsdp-manual-registration --use-nccl-ub")
    assert fires("LM_FSDP_MANUAL_REGISTRATION", f"{MFSDP} --fsdp-manual-registration")
    assert not fires("LM_FSDP_MANUAL_REGISTRATION", f"{MFSDP} --fsdp-manual-registration --use-nccl-ub")


def test_fp16_and_bf16_and_main_grads():
    """LM arguments.py:1172-1183 ``if args.fp16: assert not args.bf16`` / ``if args.bf16: assert not args.fp16``;
    :1186-1189 ``if args.accumulate_allreduce_grads_in_fp32: assert args.main_grads_dtype == torch.float32``."""
    assert fires("LM_FP16_AND_BF16", f"{LM} --fp16")
    assert not fires("LM_FP16_AND_BF16", LM)
    bad = f"{LM} --accumulate-allreduce-grads-in-fp32 --main-grads-dtype bf16 --use-precision-aware-optimizer"
    assert fires("LM_MAIN_GRADS_FP32", bad)
    assert not fires("LM_MAIN_GRADS_FP32", bad.replace(" --accumulate-allreduce-grads-in-fp32", ""))


def test_half_precision_flags():
    """LM arguments.py:1332-1337 ``if args.fp16_lm_cross_entropy: assert args.fp16`` and ``if
    args.fp32_residual_connection: assert args.fp16 or args.bf16``."""
    assert fires("LM_HALF_PRECISION_FLAGS", f"{LM} --fp16-lm-cross-entropy")
    assert not fires("LM_HALF_PRECISION_FLAGS", f"{LM.replace('--bf16', '--fp16')} --fp16-lm-cross-entropy")
    assert fires("LM_HALF_PRECISION_FLAGS", f"{LM.replace(' --bf16', '')} --fp32-residual-connection")
    assert not fires("LM_HALF_PRECISION_FLAGS", f"{LM} --fp32-residual-connection")


def test_distribute_saved_activations():
    """LM arguments.py:1370-1379: ``assert args.tensor_model_parallel_size > 1``, ``assert
    args.recompute_granularity == 'full'``, ``assert args.recompute_method is not None``; --recompute-activations
    makes the granularity selective first (:589-590), whatever --recompute-granularity says."""
    tp2 = LM.replace("--tensor-model-parallel-size 1", "--tensor-model-parallel-size 2 --sequence-parallel")
    ok = f"{tp2} --distribute-saved-activations --recompute-granularity full --recompute-method uniform"
    assert not fires("LM_DISTRIBUTE_SAVED_ACTIVATIONS", ok, num_gpus=16)
    assert fires("LM_DISTRIBUTE_SAVED_ACTIVATIONS", f"{ok} --recompute-activations", num_gpus=16)
    assert fires(
        "LM_DISTRIBUTE_SAVED_ACTIVATIONS", ok.replace(" --recompute-method uniform", ""), num_gpus=16
    )
    assert fires("LM_DISTRIBUTE_SAVED_ACTIVATIONS", ok.replace(tp2, LM))


def test_hybrid_context_parallel():
    """LM arguments.py:1404-1409 under --hybrid-context-parallel: ``assert not PP > 1``, ``not
    args.enable_cuda_graph``, ``not args.use_megatron_fsdp``, ``args.dataloader_type == 'single'`` (None becomes
    single at :1214-1215), ``args.calculate_per_token_loss``."""
    ok = f"{LM} --hybrid-context-parallel --calculate-per-token-loss"
    assert not fires("LM_HYBRID_CONTEXT_PARALLEL", ok)
    assert not fires("LM_HYBRID_CONTEXT_PARALLEL", f"{ok} --dataloader-type single")
    assert fires("LM_HYBRID_CONTEXT_PARALLEL", ok.replace(" --calculate-per-token-loss", ""))
    assert fires("LM_HYBRID_CONTEXT_PARALLEL", f"{ok} --dataloader-type cyclic")
    assert fires("LM_HYBRID_CONTEXT_PARALLEL", f"{ok} --enable-cuda-graph")
    assert fires("LM_HYBRID_CONTEXT_PARALLEL", ok.replace("--pipeline-model-parallel-size 1",
                                                          "--pipeline-model-parallel-size 2"), num_gpus=16)  # fmt: skip


def test_gtp_flags():
    """LM arguments.py:1476-1548 when a weight-shard count is above TP (gtp_weight_remat_size > 1, :1451-1474):
    ``--fp4-format`` needs --fp4-param-gather (ValueError), ``assert not args.ddp_average_in_collective``,
    ``assert args.ckpt_format in ('torch', 'torch_dist')``, and with fp8_recipe mxfp8 ``fp8_param_gather`` and
    ``reuse_grad_buf_for_mxfp8_param_ag``. (On B200: no CUDA_DEVICE_MAX_CONNECTIONS=1 needed at TP 2.)"""
    tp2 = LM.replace("--tensor-model-parallel-size 1", "--tensor-model-parallel-size 2 --sequence-parallel")
    gtp = f"{tp2} --tensor-parallel-num-weight-shards 4 --use-distributed-optimizer"
    kw = dict(num_gpus=16, gpu="b200")
    assert not fires("LM_GTP_FLAGS", gtp, **kw)
    assert fires("LM_GTP_FLAGS", f"{gtp} --ddp-average-in-collective", **kw)
    assert fires("LM_GTP_FLAGS", f"{gtp} --ckpt-format torch_dcp", **kw)
    mx = f"{gtp} --fp8-format e4m3 --fp8-recipe mxfp8 --fp8-param-gather"
    assert fires("LM_GTP_FLAGS", mx, **kw)
    assert not fires("LM_GTP_FLAGS", f"{mx} --reuse-grad-buf-for-mxfp8-param-ag", **kw)
    # shards equal to TP: no GTP
    assert not fires(
        "LM_GTP_FLAGS", f"{tp2} --tensor-parallel-num-weight-shards 2 --ddp-average-in-collective", **kw
    )


def test_gtp_graphs_on_blackwell_need_node_priority():
    """LM arguments.py:1484-1504: on compute capability 10+, GTP with ``cuda_graph_impl != "none"`` asserts
    ``os.environ.get('CUDA_GRAPHS_USE_NODE_PRIORITY') == "1"``; a launch that exports none gets a reminder."""
    tp2 = LM.replace("--tensor-model-parallel-size 1", "--tensor-model-parallel-size 2 --sequence-parallel")
    gtp = f"python pretrain_gpt.py {tp2} --tensor-parallel-num-weight-shards 4 --cuda-graph-impl transformer_engine"
    kw = dict(num_gpus=16, gpu="b200")
    assert fires("LM_GTP_NODE_PRIORITY", f"export CUDA_GRAPHS_USE_NODE_PRIORITY=0\n{gtp}", **kw)
    assert not fires("LM_GTP_NODE_PRIORITY", f"export CUDA_GRAPHS_USE_NODE_PRIORITY=1\n{gtp}", **kw)
    assert fires("LM_GTP_NODE_PRIORITY_ENV", gtp, **kw)
    assert not fires(
        "LM_GTP_NODE_PRIORITY", f"export CUDA_GRAPHS_USE_NODE_PRIORITY=0\n{gtp}", num_gpus=16, gpu="h100"
    )


def test_qk_clip():
    """LM arguments.py:1557-1563 ``if args.qk_clip: assert 0.0 < args.qk_clip_alpha < 1.0`` and ``assert
    args.qk_clip_threshold > 0``."""
    assert fires("LM_QK_CLIP", f"{LM} --qk-clip --qk-clip-alpha 1.0")
    assert fires("LM_QK_CLIP", f"{LM} --qk-clip --qk-clip-threshold 0")
    assert not fires("LM_QK_CLIP", f"{LM} --qk-clip")
    assert not fires("LM_QK_CLIP", f"{LM} --qk-clip-alpha 1.0")


def test_features_that_need_transformer_engine():
    """LM arguments.py:1582-1585 (``position_embedding_type == 'relative'``, read after
    --use-rotary-position-embeddings made it rope at :1571-1572), :1822-1824 (delay_wgrad_compute), :1854-1856
    (fine_grained_activation_offloading): ``assert args.transformer_impl == 'transformer_engine'``."""
    local = f"{LM} --transformer-impl local"
    assert fires("LM_NEEDS_TRANSFORMER_ENGINE", f"{local} --position-embedding-type relative")
    assert not fires("LM_NEEDS_TRANSFORMER_ENGINE",
                     f"{local} --position-embedding-type relative --use-rotary-position-embeddings")  # fmt: skip
    assert fires("LM_NEEDS_TRANSFORMER_ENGINE", f"{local} --fine-grained-activation-offloading")
    assert fires("LM_NEEDS_TRANSFORMER_ENGINE", f"{local} --delay-wgrad-compute")
    assert not fires("LM_NEEDS_TRANSFORMER_ENGINE", f"{LM} --delay-wgrad-compute")
    assert not fires("LM_NEEDS_TRANSFORMER_ENGINE", local)


def test_delayed_wgrad_inside_graphs():
    """LM arguments.py:1825-1846: with delay_wgrad_compute and overlap_grad_reduce, ``wgrad_in_graph_scope``
    (attn in cuda_graph_modules, or moe_router with a shared expert not overlapped) asserts
    ``args.gradient_accumulation_fusion`` and, for attn, ``not args.add_bias_linear and not args.add_qkv_bias``
    (add_bias_linear is on unless --disable-bias-linear). The deprecated --cuda-graph-scope becomes the modules
    first (:616-623)."""
    base = (f"{ARCH} {LM} --delay-wgrad-compute --overlap-grad-reduce --use-distributed-optimizer "
            "--overlap-moe-expert-parallel-comm --cuda-graph-impl transformer_engine")  # fmt: skip
    assert fires("LM_DELAY_WGRAD_GRAPHS", f"{base} --cuda-graph-modules attn")
    assert fires("LM_DELAY_WGRAD_GRAPHS", f"{base} --cuda-graph-scope attn")
    assert not fires("LM_DELAY_WGRAD_GRAPHS", f"{base} --cuda-graph-modules attn --disable-bias-linear")
    assert fires(
        "LM_DELAY_WGRAD_GRAPHS",
        f"{base} --cuda-graph-modules attn --disable-bias-linear --no-gradient-accumulation-fusion",
    )
    assert not fires(
        "LM_DELAY_WGRAD_GRAPHS", f"{base} --cuda-graph-modules moe_router --no-gradient-accumulation-fusion"
    )
    shared = "--moe-shared-expert-intermediate-size 1024"
    assert fires(
        "LM_DELAY_WGRAD_GRAPHS",
        f"{base} --cuda-graph-modules moe_router {shared} --no-gradient-accumulation-fusion",
    )
    assert not fires(
        "LM_DELAY_WGRAD_GRAPHS", f"{base} --cuda-graph-modules attn".replace(" --overlap-grad-reduce", "")
    )


def test_latent_flags():
    """LM arguments.py:1895-1901 ``if args.mla_down_proj_fusion: assert args.multi_latent_attention`` (MLA is
    also inferred from a hybrid pattern with '+' or 'D' layers, :885-889); ``if args.moe_latent_size is not None:
    assert args.moe_latent_size > 0`` and ``assert args.num_experts is not None`` (--num-experts 0 is None,
    :1593-1594)."""
    assert fires("LM_LATENT_FLAGS", f"{ARCH} {LM} --mla-down-proj-fusion")
    assert not fires("LM_LATENT_FLAGS", f"{ARCH} {LM} --mla-down-proj-fusion --multi-latent-attention")
    assert not fires("LM_LATENT_FLAGS", f"{LM} --mla-down-proj-fusion")  # the model is defined elsewhere
    assert fires("LM_LATENT_FLAGS", f"{ARCH} {LM} --moe-latent-size 256")  # no --num-experts: dense
    assert fires("LM_LATENT_FLAGS", f"{LM} --num-experts 128 --moe-latent-size 0")
    ep1 = LM.replace("--expert-model-parallel-size 8", "--expert-model-parallel-size 1")
    assert fires("LM_LATENT_FLAGS", f"{ep1} --num-experts 0 --moe-latent-size 256")
    assert not fires("LM_LATENT_FLAGS", f"{LM} --num-experts 128 --moe-latent-size 256")


def test_optimizer_config_dtypes_and_mxfp8_reuse():
    """MCore optimizer/optimizer_config.py:469-480: without use_precision_aware_optimizer, ``assert
    self.main_grads_dtype == torch.float32`` (and main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype); :424-428
    ``if self.reuse_grad_buf_for_mxfp8_param_ag and self.overlap_param_gather_with_optimizer_step: raise
    ValueError`` (LM turns the reuse off under Megatron-FSDP first, arguments.py:1114)."""
    for flag in ("--main-grads-dtype bf16", "--main-params-dtype fp16", "--exp-avg-dtype bf16",
                 "--exp-avg-sq-dtype fp8"):  # fmt: skip
        assert fires("OPTIMIZER_DTYPE_NEEDS_PRECISION_AWARE", f"{LM} {flag}")
        assert not fires("OPTIMIZER_DTYPE_NEEDS_PRECISION_AWARE",
                         f"{LM} {flag} --use-precision-aware-optimizer --use-distributed-optimizer")  # fmt: skip
    # a launch validate_args accepts with --overlap-param-gather-with-optimizer-step (arguments.py:1032-1040)
    step = (LM.replace("--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2")
            + " --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ckpt-format torch"
            " --overlap-param-gather-with-optimizer-step --num-virtual-stages-per-pipeline-rank 2")  # fmt: skip
    assert fires(
        "OPTIMIZER_STEP_GATHER_MXFP8_REUSE", f"{step} --reuse-grad-buf-for-mxfp8-param-ag", num_gpus=16
    )
    assert not fires("OPTIMIZER_STEP_GATHER_MXFP8_REUSE", step, num_gpus=16)
    assert not fires("OPTIMIZER_STEP_GATHER_MXFP8_REUSE", f"{LM} --reuse-grad-buf-for-mxfp8-param-ag")
    # Megatron-FSDP turns the reuse off (arguments.py:1114) before OptimizerConfig reads it
    mfsdp = f"{LM} --use-megatron-fsdp --reuse-grad-buf-for-mxfp8-param-ag --overlap-param-gather-with-optimizer-step"
    assert not fires("OPTIMIZER_STEP_GATHER_MXFP8_REUSE", mfsdp)


def test_unresolved_values_are_not_judged():
    """A flag whose value is a shell variable is not judged (the launch does not show it)."""
    assert not fires("LM_QK_CLIP", f"{LM} --qk-clip --qk-clip-alpha $ALPHA")
    assert not fires("LM_MEGATRON_FSDP", f"{LM} --use-megatron-fsdp --ckpt-format $FMT")


def test_recompute_activations_wins_over_recompute_granularity():
    """LM arguments.py:589-590 ``if args.recompute_activations: args.recompute_granularity = 'selective'``,
    whatever --recompute-granularity says and wherever it is written; :1385-1388 then refuses a
    --recompute-method with selective granularity. The engine reads the launch in that order."""
    full = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    for flags in (f"{LM} --recompute-activations {full}", f"{LM} {full} --recompute-activations"):
        r = lint(flags)
        assert r.effective_config["recompute_granularity"] == "selective"
        assert "RECOMPUTE_SELECTIVE_METHOD" in [f.code for f in r.findings if f.severity is Severity.error]
    assert lint(f"{LM} {full}").effective_config["recompute_granularity"] == "full"


def test_a_written_megatron_fsdp_launch_names_its_checkpoint_format():
    """The Megatron-LM launch the tools write for a Megatron-FSDP plan passes LM arguments.py:1146 (``assert
    args.ckpt_format == "fsdp_dtensor"``): megatron_args_for adds --ckpt-format fsdp_dtensor."""
    from moe_long_context.dialects.overrides import megatron_args_for
    from moe_long_context.engine.config import TrainingConfig

    cfg = TrainingConfig(model="qwen3-30b-a3b", num_gpus=8, ep=8, seq_len=4096, use_megatron_fsdp=True)
    tokens = megatron_args_for(cfg)
    assert "--use-megatron-fsdp" in tokens and tokens[tokens.index("--ckpt-format") + 1] == "fsdp_dtensor"
    assert not fires("LM_MEGATRON_FSDP", " ".join(tokens))
    assert "--ckpt-format" not in megatron_args_for(cfg.model_copy(update={"use_megatron_fsdp": False}))


def test_mtp_depths_of_the_hybrid_pattern_meet_the_position_embedding_check():
    """LM arguments.py:838-853: MTP depths after '/' in --hybrid-layer-pattern (or the deprecated
    --hybrid-override-pattern, :720-732, or the legacy --mtp-hybrid-override-pattern joined at :749-760) replace
    --mtp-num-layers before :855-860 ``if args.mtp_num_layers: assert position_embedding_type in (rope, none)``
    (default learned_absolute). Upstream rejects each of these at arguments.py:857."""
    for extra in ("--hybrid-layer-pattern M*M*/MM/MM", "--hybrid-override-pattern M*M*/MM",
                  "--hybrid-layer-pattern M*M*/MM/MM --mtp-num-layers 0",
                  "--hybrid-layer-pattern M*M* --mtp-num-layers 2 --mtp-hybrid-override-pattern MM"):  # fmt: skip
        assert fires("LM_POSITION_EMBEDDING", f"{LM} {extra}", model="nemotron-3-nano"), extra
        assert not fires(
            "LM_POSITION_EMBEDDING", f"{LM} {extra} --position-embedding-type rope", model="nemotron-3-nano"
        )
    assert not fires("LM_POSITION_EMBEDDING", f"{LM} --hybrid-layer-pattern M*M*", model="nemotron-3-nano")


@pytest.mark.parametrize(
    ("extra", "fixed"),
    [("--use-megatron-fsdp", "--use-megatron-fsdp --ckpt-format fsdp_dtensor"),
     ("--use-megatron-fsdp --ckpt-format torch", "--use-megatron-fsdp --ckpt-format fsdp_dtensor"),
     ("--fp16", ""), ("--qk-clip --qk-clip-alpha 1.5", "--qk-clip"), ("--main-grads-dtype bf16", ""),
     ("--hybrid-context-parallel", "--hybrid-context-parallel --calculate-per-token-loss"),
     ("--attention-backend local", ""), ("--fp16-lm-cross-entropy", "")],
)  # fmt: skip
def test_plain_repairs_give_a_launch_upstream_accepts(extra, fixed):
    """lint_config's corrected launch for a plain lm-args error: the rewrite named here, which upstream's own
    validate_args and OptimizerConfig accept (judged with the conformance oracle) and lint reads back clean."""
    r = lint(f"{LM} {extra}")
    assert not r.valid and r.corrected.split() == f"{LM} {fixed}".split()
    assert lint(r.corrected).valid
