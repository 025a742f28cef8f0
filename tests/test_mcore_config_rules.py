"""Megatron Core TransformerConfig.__post_init__ / ModelParallelConfig.__post_init__ checks (upstream.yaml mc-tc-*,
mc-mpc-*), judged through lint_config on Megatron-LM flags and Megatron Bridge overrides.

Each test quotes the upstream condition with its file and line (MCore = Megatron Core 0.19.2 ``megatron/core``),
trips it, and shows the smallest change that clears it. Both front ends build these configs, so each rule is
checked in both dialects.
"""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import Context, build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules import run
from moe_long_context.engine.rules.mcore_config_more import kernels_and_mup
from moe_long_context.errors import InputError
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config

LM = ("--tensor-model-parallel-size 1 --expert-model-parallel-size 8 --micro-batch-size 1 "
      "--global-batch-size 64 --seq-length 4096 --bf16")  # fmt: skip
BRIDGE = ["model.expert_model_parallel_size=8", "train.global_batch_size=64"]


def lm(flags: str, model: str = "qwen3-30b-a3b", num_gpus: int = 8, pp: int = 1) -> dict[str, Severity]:
    launch = f"{LM} --pipeline-model-parallel-size {pp} {flags}"
    r = lint_config(LintConfigRequest(megatron_args=launch, model=model, num_gpus=num_gpus))
    return {f.code: f.severity for f in r.findings}


def bridge(keys: list[str], model: str = "qwen3-30b-a3b", num_gpus: int = 8) -> dict[str, Severity]:
    r = lint_config(LintConfigRequest(bridge_overrides=[*BRIDGE, *keys], model=model, num_gpus=num_gpus))
    return {f.code: f.severity for f in r.findings}


def errors(**fields) -> set[str]:
    cfg = TrainingConfig(**{"model": "qwen3-30b-a3b", "num_gpus": 8, "ep": 8, **fields})
    return {f.code for f in run(build_context(cfg)) if f.severity == Severity.error}


def test_experts_wgrad_overlap_excludes_ep_overlap_and_delayed_wgrad():
    """MCore transformer/transformer_config.py:2759-2770: ``if self.overlap_dispatch_backward_with_experts_wgrad:
    assert not self.overlap_moe_expert_parallel_comm ... assert not self.delay_wgrad_compute``."""
    code = "MOE_EXPERTS_WGRAD_OVERLAP"
    flag = "--overlap-dispatch-backward-with-experts-wgrad"
    assert lm(f"{flag} --overlap-moe-expert-parallel-comm")[code] is Severity.error
    assert code not in lm(flag)
    key = "model.overlap_dispatch_backward_with_experts_wgrad=true"
    assert bridge([key, "comm_overlap.overlap_moe_expert_parallel_comm=true"])[code] is Severity.error
    assert code not in bridge([key])
    assert code in errors(overlap_dispatch_backward_with_experts_wgrad=True, delay_wgrad_compute=True)


def test_early_attention_release_needs_ep_overlap():
    """MCore transformer/transformer_config.py:2772-2776: ``if self.ep_overlap_early_attn_memory_release: assert
    self.overlap_moe_expert_parallel_comm``."""
    code = "MOE_EARLY_ATTN_RELEASE"
    assert lm("--ep-overlap-early-attn-memory-release")[code] is Severity.error
    assert code not in lm("--ep-overlap-early-attn-memory-release --overlap-moe-expert-parallel-comm")
    assert bridge(["model.ep_overlap_early_attn_memory_release=true"])[code] is Severity.error
    assert code not in bridge(["model.ep_overlap_early_attn_memory_release=true",
                               "comm_overlap.overlap_moe_expert_parallel_comm=true"])  # fmt: skip


def test_rank_capacity_needs_hybridep_or_ncclep():
    """MCore transformer/transformer_config.py:1693-1706: ``moe_expert_rank_capacity_factor is not None`` needs
    ``moe_flex_dispatcher_backend in ("hybridep", "ncclep")``, and hybridep ``use_transformer_engine_op_fuser``."""
    code = "MOE_RANK_CAPACITY_BACKEND"
    cap = "--moe-expert-rank-capacity-factor 1.5"
    assert (
        lm(f"{cap} --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep")[code]
        is Severity.error
    )
    assert (
        lm(f"{cap} --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep")[code]
        is Severity.error
    )
    assert code not in lm(f"{cap} --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep "
                          "--use-transformer-engine-op-fuser")  # fmt: skip
    assert code not in lm(f"{cap} --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend ncclep")
    keys = ["model.moe_expert_rank_capacity_factor=1.5", "model.moe_token_dispatcher_type=flex"]
    assert bridge([*keys, "model.moe_flex_dispatcher_backend=deepep"])[code] is Severity.error
    assert code not in bridge([*keys, "model.moe_flex_dispatcher_backend=ncclep"])


def test_paged_stash_needs_rank_capacity_and_no_moe_offload():
    """MCore transformer/transformer_config.py:1905-1921: ``if self.moe_paged_stash``: not with cpu_offloading,
    ``moe_expert_rank_capacity_factor`` must be set, and offload_modules must not include expert_fc1, moe_act or
    fused_group_mlp."""
    code = "MOE_PAGED_STASH"
    ncclep = "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend ncclep"
    assert lm(f"--moe-paged-stash {ncclep}")[code] is Severity.error
    assert code not in lm(f"--moe-paged-stash {ncclep} --moe-expert-rank-capacity-factor 1.5")
    assert code not in bridge(["model.moe_paged_stash=true"])  # unset factor: the Bridge recipe's own
    base = ["model.moe_paged_stash=true", "model.moe_expert_rank_capacity_factor=1.5",
            "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=ncclep"]  # fmt: skip
    assert code not in bridge(base)
    assert bridge([*base, "model.cpu_offloading=true"])[code] is Severity.error
    offload = ["model.fine_grained_activation_offloading=true", "model.offload_modules=[moe_act]"]
    assert bridge([*base, *offload])[code] is Severity.error
    assert code not in bridge([*base, "model.fine_grained_activation_offloading=true",
                               "model.offload_modules=[core_attn]"])  # fmt: skip


def test_single_grouped_weight_and_bias_needs():
    """MCore transformer/transformer_config.py:1556-1561 (``moe_grouped_gemm`` required), :1572-1579 (the weight
    only with BF16, MXFP8 or NVFP4), :1580-1586 (the weight needs ``use_transformer_engine_op_fuser``), :1587-1588
    (the bias needs ``add_bias_linear``)."""
    needs, prec = "MOE_SINGLE_GROUPED_NEEDS", "MOE_SINGLE_GROUPED_PRECISION"
    assert lm("--moe-grouped-gemm --moe-single-grouped-weight")[needs] is Severity.error  # no op fuser
    assert needs not in lm("--moe-grouped-gemm --moe-single-grouped-weight --use-transformer-engine-op-fuser")
    assert (
        lm("--moe-single-grouped-weight --use-transformer-engine-op-fuser")[needs] is Severity.error
    )  # no GG
    fp8 = (
        "--moe-grouped-gemm --moe-single-grouped-weight --use-transformer-engine-op-fuser --fp8-format hybrid"
    )
    assert lm(f"{fp8} --fp8-recipe tensorwise")[prec] is Severity.error
    assert prec not in lm("--moe-grouped-gemm --moe-single-grouped-weight --use-transformer-engine-op-fuser "
                          "--fp8-format e4m3 --fp8-recipe mxfp8")  # fmt: skip
    weight = ["model.moe_single_grouped_weight=true", "model.use_transformer_engine_op_fuser=true"]
    assert needs not in bridge(weight[:1])  # op fuser unset: the Bridge recipe's own
    assert bridge([weight[0], "model.use_transformer_engine_op_fuser=false"])[needs] is Severity.error
    assert needs not in bridge(weight)  # Bridge's MoE recipes keep grouped GEMM on
    assert bridge([*weight, "model.moe_grouped_gemm=false"])[needs] is Severity.error
    assert bridge([*weight, "mixed_precision=bf16_with_fp8_delayed_scaling_mixed"])[prec] is Severity.error
    # qwen3-30b-a3b has no linear biases; gpt-oss does
    assert bridge(["model.moe_single_grouped_bias=true"])[needs] is Severity.error
    assert needs not in bridge(["model.moe_single_grouped_bias=true", "model.expert_model_parallel_size=8"],
                               model="gpt-oss-20b")  # fmt: skip


def test_legacy_cpu_offloading_limits():
    """MCore transformer/transformer_config.py:1709-1723 (``cpu_offloading_num_layers`` in [0, num_layers), no
    PP, no recompute), :1848-1850 (not with fine-grained offloading), :2467-2468 (CUDA graphs only with
    full_iteration). Megatron-LM has no --cpu-offloading flag: Bridge's model.cpu_offloading sets it."""
    code = "LEGACY_CPU_OFFLOAD"
    on = "model.cpu_offloading=true"
    assert code not in bridge([on, "model.cpu_offloading_num_layers=4"])
    assert bridge([on, "model.cpu_offloading_num_layers=48"])[code] is Severity.error  # qwen3-30b: 48 layers
    assert bridge([on, "model.recompute_granularity=full", "model.recompute_method=uniform",
                   "model.recompute_num_layers=1"])[code] is Severity.error  # fmt: skip
    assert bridge([on, "model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn]"])[
        code] is Severity.error  # fmt: skip
    assert bridge([on, "model.cuda_graph_impl=transformer_engine"])[code] is Severity.error
    assert bridge([on, "model.pipeline_model_parallel_size=2"], num_gpus=16)[code] is Severity.error
    assert code in errors(cpu_offloading=True, cpu_offloading_num_layers=-1)
    assert code not in lm("--cpu-offloading-num-layers 100")  # without cpu_offloading the count is not read


def test_fine_grained_offloading_tuning_ranges():
    """MCore transformer/transformer_config.py:1884-1893, inside ``if self.fine_grained_activation_offloading``:
    ``min_offloaded_tensor_size >= 0``, ``0 <= activation_offload_fraction <= 1``,
    ``delta_offload_bytes_across_pp_ranks >= 0``; :1896-1897 fused_group_mlp needs the TE op fuser."""
    code = "OFFLOAD_TUNING_RANGE"
    offload = "--fine-grained-activation-offloading --offload-modules expert_fc1"
    assert lm(f"{offload} --activation-offload-fraction 1.5")[code] is Severity.error
    assert lm(f"{offload} --min-offloaded-tensor-size -1")[code] is Severity.error
    assert lm(f"{offload} --delta-offload-bytes-across-pp-ranks -8")[code] is Severity.error
    assert code not in lm(f"{offload} --activation-offload-fraction 0.5")
    assert code not in lm("--activation-offload-fraction 1.5")  # read only with fine-grained offloading
    keys = ["model.fine_grained_activation_offloading=true", "model.offload_modules=[expert_fc1]"]
    assert bridge([*keys, "model.activation_offload_fraction=-0.1"])[code] is Severity.error
    assert code not in bridge([*keys, "model.activation_offload_fraction=0.0"])
    fused = "--fine-grained-activation-offloading --offload-modules fused_group_mlp"
    assert lm(fused)["OFFLOAD_MODULE_RULES"] is Severity.error
    assert "OFFLOAD_MODULE_RULES" not in lm(f"{fused} --use-transformer-engine-op-fuser")


def test_distribute_saved_activations_excludes_sequence_parallel():
    """MCore transformer/transformer_config.py:1757-1761, inside ``if self.recompute_granularity is not None``:
    ``if self.distribute_saved_activations and self.sequence_parallel: raise ValueError``."""
    code = "RECOMPUTE_DISTRIBUTED_SAVED_SP"
    assert code in errors(tp=2, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1,
                          distribute_saved_activations=True)  # fmt: skip
    assert code not in errors(tp=2, recompute_granularity="full", recompute_method="uniform",
                              recompute_num_layers=1)  # fmt: skip
    keys = ["model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "model.recompute_granularity=full",
            "model.recompute_method=uniform", "model.recompute_num_layers=1"]  # fmt: skip
    assert bridge([*keys, "model.distribute_saved_activations=true"], num_gpus=16)[code] is Severity.error
    assert code not in bridge(keys, num_gpus=16)
    assert code not in bridge(["model.distribute_saved_activations=true"])  # no recompute: not read


def test_graphs_with_fine_grained_offloading_need_warmup_and_inflight_count():
    """MCore transformer/transformer_config.py:2630-2642, inside ``cuda_graph_impl != "none"`` and
    ``fine_grained_activation_offloading``: ``cuda_graph_warmup_steps > 0``; with full_iteration
    ``fine_grained_offloading_max_inflight_offloads`` set and >= 0."""
    code = "GRAPH_OFFLOAD_WARMUP"
    base = "--fine-grained-activation-offloading --offload-modules expert_fc1 --cuda-graph-impl transformer_engine"
    assert lm(f"{base} --cuda-graph-warmup-steps 0")[code] is Severity.error
    assert code not in lm(f"{base} --cuda-graph-warmup-steps 1")
    keys = ["model.fine_grained_activation_offloading=true", "model.offload_modules=[expert_fc1]",
            "model.cuda_graph_impl=full_iteration", "rerun_state_machine.check_for_nan_in_loss=false"]  # fmt: skip
    assert bridge([*keys, "model.fine_grained_offloading_max_inflight_offloads=-1"])[code] is Severity.error
    assert code not in bridge([*keys, "model.fine_grained_offloading_max_inflight_offloads=1"])
    assert code not in bridge(keys)  # unset: the Bridge recipe's own count
    full = ("--fine-grained-activation-offloading --offload-modules expert_fc1 --cuda-graph-impl full_iteration "
            "--no-check-for-nan-in-loss-and-grad")  # fmt: skip
    assert lm(full)[code] is Severity.error  # Megatron-LM's default: unset
    assert code not in lm(f"{full} --fine-grained-offloading-max-inflight-offloads 1")


def test_first_last_layers_in_bf16_under_fp8():
    """MCore transformer/transformer_config.py:1400-1430, inside ``if self.fp8``: ``first_last_layers_bf16`` with
    the delayed recipe raises; ``num_layers_at_start_in_bf16`` / ``_end_`` must lie in [0, num_layers // PP]."""
    code = "PRECISION_BF16_EDGE_LAYERS"
    assert lm("--fp8-format hybrid --fp8-recipe delayed --first-last-layers-bf16")[code] is Severity.error
    assert code not in lm("--fp8-format hybrid --fp8-recipe tensorwise --first-last-layers-bf16")
    # qwen3-30b-a3b: 48 layers, PP 2 -> at most 24 per end
    tw = "--fp8-format hybrid --fp8-recipe tensorwise --first-last-layers-bf16"
    assert lm(f"{tw} --num-layers-at-end-in-bf16 25", pp=2, num_gpus=16)[code] is Severity.error
    assert code not in lm(f"{tw} --num-layers-at-end-in-bf16 24", pp=2, num_gpus=16)
    assert code not in lm("--first-last-layers-bf16 --num-layers-at-start-in-bf16 99")  # BF16: not read
    mp = [
        "mixed_precision=bf16_with_fp8_current_scaling_mixed",
        "mixed_precision.first_last_layers_bf16=true",
    ]
    assert bridge([*mp, "mixed_precision.num_layers_at_start_in_bf16=-1"])[code] is Severity.error
    assert code not in bridge(mp)
    # Bridge's mixed_precision overwrites the model's copy (training/mixed_precision.py:137-155): not read
    assert code not in bridge(["mixed_precision=bf16_with_fp8_delayed_scaling_mixed",
                               "model.first_last_layers_bf16=true"])  # fmt: skip


def test_rotary_interleaved_with_mla():
    """MCore transformer/transformer_config.py:2193-2194: ``if self.multi_latent_attention and
    self.rotary_interleaved: raise ValueError``."""
    code = "MLA_ROTARY_INTERLEAVED"
    assert bridge(["model.rotary_interleaved=true"], model="deepseek-v3", num_gpus=64)[code] is Severity.error
    assert code not in bridge(["model.rotary_interleaved=true"])  # GQA
    assert code in errors(model="deepseek-v3", num_gpus=64, rotary_interleaved=True)
    assert code not in errors(model="deepseek-v3", num_gpus=64)


def test_flash_attention_version_and_batch_invariant_mode():
    """MCore transformer/transformer_config.py:2883-2892 (``batch_invariant_mode``: version 3 or 4,
    ``context_parallel_size == 1``). :2869-2873 (``flash_attention_version in (2, 3, 4)``) is the schema's:
    Megatron-LM's argparse refuses another version, and lint refuses it as bad input in a Bridge override."""
    with pytest.raises(InputError):
        bridge(["model.flash_attention_version=5"])
    with pytest.raises(InputError):
        lm("--flash-attention-version 5")
    code = "BATCH_INVARIANT_MODE"
    assert lm("--batch-invariant-mode --flash-attention-version 2")[code] is Severity.error
    assert lm("--batch-invariant-mode")[code] is Severity.error  # version unset
    assert code not in lm("--batch-invariant-mode --flash-attention-version 3")
    keys = ["model.batch_invariant_mode=true", "model.flash_attention_version=3"]
    assert code not in bridge(keys)
    assert (
        bridge(["model.batch_invariant_mode=true", "model.flash_attention_version=2"])[code] is Severity.error
    )
    assert code not in bridge(["model.batch_invariant_mode=true"])  # unset: the Bridge recipe's own version
    assert bridge([*keys, "model.context_parallel_size=2"], num_gpus=16)[code] is Severity.error


def test_defer_embedding_wgrad_needs_pipeline_parallelism():
    """MCore model_parallel_config.py:545-548 (``defer_embedding_wgrad_compute and
    pipeline_model_parallel_size == 1``) and :555-558 (``wgrad_deferral_limit < 0``)."""
    code = "PIPELINE_DEFER_EMBEDDING_WGRAD"
    assert lm("--defer-embedding-wgrad-compute")[code] is Severity.error
    assert code not in lm("--defer-embedding-wgrad-compute", pp=2, num_gpus=16)
    assert (
        lm("--defer-embedding-wgrad-compute --wgrad-deferral-limit -1", pp=2, num_gpus=16)[code]
        is Severity.error
    )
    assert bridge(["comm_overlap.defer_embedding_wgrad_compute=true", "comm_overlap.wgrad_deferral_limit=0"])[
        code] is Severity.error  # fmt: skip
    pp2 = ["comm_overlap.defer_embedding_wgrad_compute=true", "model.pipeline_model_parallel_size=2"]
    assert code not in bridge([*pp2, "comm_overlap.wgrad_deferral_limit=0"], num_gpus=16)
    # Bridge's CommOverlapConfig leaves wgrad_deferral_limit at -1 unless it is given (comm_overlap.py:436-437)
    assert bridge(pp2, num_gpus=16)[code] is Severity.error
    # CommOverlapConfig.setup overwrites the model's copy (comm_overlap.py:588-591): not read
    assert code not in bridge(["model.defer_embedding_wgrad_compute=true"])


def test_weight_shards_are_a_multiple_of_tp():
    """MCore model_parallel_config.py:31-40, resolve_tensor_parallel_weight_shards: a given
    ``tensor_parallel_num_weight_shards`` must be >= TP and divisible by TP."""
    code = "LAYOUT_GTP_WEIGHT_SHARDS"
    assert code in errors(tp=4, tensor_parallel_num_weight_shards=2, num_gpus=32)
    assert code in errors(tp=4, tensor_parallel_num_weight_shards=6, num_gpus=32)
    assert code not in errors(tp=4, tensor_parallel_num_weight_shards=8, num_gpus=32)
    assert bridge(["model.tensor_model_parallel_size=2", "model.tensor_parallel_num_weight_shards=3"],
                  num_gpus=16)[code] is Severity.error  # fmt: skip


def test_dsa_refuses_rope_fusion_which_megatron_lm_turns_on():
    """MCore transformer/transformer_config.py:2837-2838: ``if self.experimental_attention_variant == "dsa": assert
    not self.apply_rope_fusion``. Megatron-LM's --no-rope-fusion defaults apply_rope_fusion to True (the fields of
    TransformerConfig are copied from args, LM argument_utils.py:297-301); a Bridge recipe sets its own."""
    code = "DSA_ROPE_FUSION"
    dsa = dict(model="glm-5", num_gpus=64)
    assert errors(**dsa, launcher="megatron-lm", apply_rope_fusion=True) >= {code}
    assert code not in errors(**dsa, launcher="megatron-lm", apply_rope_fusion=False)
    assert code not in errors(**dsa)  # Bridge, unset: the recipe's own value
    assert bridge(["model.apply_rope_fusion=true"], model="glm-5", num_gpus=64)[code] is Severity.error
    assert code not in bridge(["model.apply_rope_fusion=false"], model="glm-5", num_gpus=64)
    assert code not in bridge(["model.apply_rope_fusion=true"])  # not DSA


def test_dsa_launch_translated_to_megatron_lm_writes_no_rope_fusion():
    """The Megatron-LM translation of a Bridge DSA launch carries --no-rope-fusion, so it passes the same check."""
    r = lint_config(LintConfigRequest(bridge_overrides=[*BRIDGE, "model.apply_rope_fusion=false"], model="glm-5",
                                      num_gpus=64))  # fmt: skip
    assert "--no-rope-fusion" in r.corrected_other_dialect
    assert "DSA_ROPE_FUSION" not in {f.code for f in r.findings}


def test_expert_bias_needs_a_sigmoid_score():
    """MCore transformer/transformer_config.py:2284-2292: ``moe_router_enable_expert_bias and
    moe_router_score_function not in ("sigmoid", "sqrtsoftplus")`` raises. Megatron-LM's score default is softmax;
    Bridge's is the model's (DeepSeek-V3: sigmoid, Qwen3: softmax)."""
    code = "MOE_EXPERT_BIAS_SCORE"
    assert lm("--moe-router-enable-expert-bias")[code] is Severity.error
    assert code not in lm("--moe-router-enable-expert-bias --moe-router-score-function sigmoid")
    assert bridge(["model.moe_router_enable_expert_bias=true"])[code] is Severity.error  # Qwen3: softmax
    assert code not in bridge(["model.moe_router_enable_expert_bias=true"], model="deepseek-v3", num_gpus=64)
    assert bridge(["model.moe_router_enable_expert_bias=true", "model.moe_router_score_function=softmax"],
                  model="deepseek-v3", num_gpus=64)[code] is Severity.error  # fmt: skip
    assert code not in bridge(["model.moe_router_score_function=softmax"], model="deepseek-v3", num_gpus=64)


def test_fused_kernels_and_mup():
    """MCore transformer/transformer_config.py:2147-2151 (``fused_residual_rmsnorm`` needs ``normalization ==
    "RMSNorm"``), :2189-2191 (``fused_single_qkv_rope`` with ``attention_output_gate`` raises), :2196-2201
    (``use_mup``: ``mup_base_hidden_size`` defaults to the hidden size and must be > 0)."""
    fused = "FUSED_KERNEL_NEEDS"
    assert fused not in lm("--fused-residual-rmsnorm")  # Qwen3 uses RMSNorm
    # every catalog model uses RMSNorm: a LayerNorm variant of one shows the other side
    ctx = build_context(TrainingConfig(model="qwen3-30b-a3b", num_gpus=8, ep=8, fused_residual_rmsnorm=True))
    layer_norm = Context(ctx.cfg, ctx.model.model_copy(update={"normalization": "LayerNorm"}), None)
    assert fused in {f.code for f in kernels_and_mup(layer_norm)}
    assert fused not in {f.code for f in kernels_and_mup(ctx)}
    gated = "qwen3.5-397b-a17b"  # attention output gate
    assert bridge(["model.fused_single_qkv_rope=true"], model=gated, num_gpus=64)[fused] is Severity.error
    assert fused not in bridge(["model.fused_single_qkv_rope=true"])  # no output gate
    mup = "MUP_BASE_HIDDEN_SIZE"
    assert lm("--use-mup --mup-base-hidden-size 0")[mup] is Severity.error
    assert mup not in lm("--use-mup")
    assert mup not in lm("--use-mup --mup-base-hidden-size 256")
    assert bridge(["model.use_mup=true", "model.mup_base_hidden_size=-1"])[mup] is Severity.error


def test_precision_options_of_bridge_keys():
    """MCore transformer/transformer_config.py:1443-1448 (``fp8_output_proj`` needs ``fp8`` and ``fp8_recipe ==
    mxfp8``) and :1451-1452 (``fp4_param`` needs ``fp4``). Megatron-LM's flags are judged as written
    (PRECISION_OPTION_RECIPE; LM arguments.py:1068-1071 refuses --fp4-param-gather first)."""
    code = "PRECISION_OPTION_NEEDS"
    assert bridge(["model.fp8_output_proj=true"])[code] is Severity.error  # BF16
    assert bridge(["model.fp8_output_proj=true", "mixed_precision=bf16_with_fp8_current_scaling_mixed"])[
        code] is Severity.error  # fmt: skip
    assert code not in bridge(["model.fp8_output_proj=true", "mixed_precision=bf16_with_mxfp8_mixed"])
    assert bridge(["mixed_precision.fp4_param_gather=true"])[code] is Severity.error
    assert code not in bridge(["model.fp4_param=true"])  # overwritten by mixed_precision's fp4_param
    assert code not in bridge(
        ["mixed_precision.fp4_param_gather=true", "mixed_precision=bf16_with_nvfp4_mixed"]
    )
    lm_codes = lm("--fp8-output-proj")
    assert lm_codes["PRECISION_OPTION_RECIPE"] is Severity.error and code not in lm_codes  # one finding
    assert "PRECISION_OPTION_RECIPE" not in lm("--fp8-output-proj --fp8-format e4m3 --fp8-recipe mxfp8")


def test_defer_embedding_wgrad_needs_gradient_accumulation_fusion():
    """MCore model_parallel_config.py:550-553: ``defer_embedding_wgrad_compute and not
    gradient_accumulation_fusion`` raises (Megatron-LM's default is on: --no-gradient-accumulation-fusion)."""
    code = "PIPELINE_DEFER_EMBEDDING_WGRAD"
    flags = "--defer-embedding-wgrad-compute --no-gradient-accumulation-fusion"
    assert lm(flags, pp=2, num_gpus=16)[code] is Severity.error
    keys = ["comm_overlap.defer_embedding_wgrad_compute=true", "model.pipeline_model_parallel_size=2",
            "comm_overlap.wgrad_deferral_limit=0"]  # fmt: skip
    assert bridge([*keys, "model.gradient_accumulation_fusion=false"], num_gpus=16)[code] is Severity.error
    assert code not in bridge([*keys, "model.gradient_accumulation_fusion=true"], num_gpus=16)


def test_deprecated_moe_layer_recompute_refuses_full_recompute():
    """MCore transformer/transformer_config.py:1835-1843: ``if self.moe_layer_recompute: ... if
    self.recompute_granularity == "full": raise ValueError``."""
    code = "RECOMPUTE_MOE_LAYER_FULL"
    full = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    assert lm(f"{full} --moe-layer-recompute")[code] is Severity.error
    assert lm(f"--moe-layer-recompute {full}")[code] is Severity.error  # whatever the order
    assert code not in lm("--moe-layer-recompute")
    assert (
        bridge(["model.moe_layer_recompute=true", "model.recompute_granularity=full"])[code] is Severity.error
    )
    assert code not in bridge(["model.moe_layer_recompute=true", "model.recompute_granularity=selective"])


def test_graphed_moe_recompute_refuses_router_jitter():
    """MCore transformer/transformer_config.py:2567-2572, inside graphs and selective recompute: ``if
    self.moe_input_jitter_eps is not None: assert (not full_cudagraph and moe not in cuda_graph_modules) or "moe"
    not in recompute_modules``."""
    code = "GRAPH_RECOMPUTE_MOE_RANDOM"
    base = (
        "--cuda-graph-impl transformer_engine --recompute-granularity selective --moe-input-jitter-eps 0.01"
    )
    assert lm(f"{base} --recompute-modules moe")[code] is Severity.error  # whole-layer graphs
    assert code not in lm(f"{base} --recompute-modules moe --cuda-graph-modules attn")
    assert code not in lm(f"{base} --recompute-modules moe_act")
    keys = ["model.cuda_graph_impl=local", "model.cuda_graph_modules=[moe]", "model.recompute_granularity=selective",
            "model.recompute_modules=[moe]"]  # fmt: skip
    assert bridge([*keys, "model.moe_input_jitter_eps=0.01"])[code] is Severity.error
    assert code not in bridge(keys)


def test_gtp_local_graphs_cannot_recompute_shared_experts_under_fp8():
    """MCore transformer/transformer_config.py:2574-2595: ``gtp_weight_remat_size > 1 and cuda_graph_impl ==
    "local" and (fp8 or fp4) and moe_shared_expert_intermediate_size is not None and not moe_shared_expert_overlap
    and (full_cudagraph or moe or moe_router in cuda_graph_modules)`` asserts ``"shared_experts" not in
    recompute_modules``. DeepSeek-V3 has a shared expert."""
    code = "GRAPH_GTP_SHARED_EXPERT_RECOMPUTE"
    base = dict(model="deepseek-v3", num_gpus=64, tp=2, cuda_graph_impl="local", cuda_graph_modules=["moe_router"],
                recompute_granularity="selective", recompute_modules=["shared_experts"], precision="fp8-blockwise")  # fmt: skip
    assert code in errors(**base, tensor_parallel_num_weight_shards=4)
    assert code not in errors(**base)  # no GTP
    assert code not in errors(**base, tensor_parallel_num_weight_shards=4, moe_shared_expert_overlap=True)
    assert code not in errors(**{**base, "precision": "bf16"}, tensor_parallel_num_weight_shards=4)
    assert code not in errors(**{**base, "cuda_graph_modules": ["attn"]}, tensor_parallel_num_weight_shards=4)


def test_topk_limited_devices_with_group_routing():
    """MCore transformer/transformer_config.py:2338-2344: ``if self.moe_router_group_topk: if
    self.moe_router_topk_limited_devices: raise ValueError`` (DeepSeek-V3 routes by group; Qwen3 does not)."""
    code = "MOE_TOPK_LIMITED_DEVICES"
    assert (
        bridge(["model.moe_router_topk_limited_devices=4"], model="deepseek-v3", num_gpus=64)[code]
        is Severity.error
    )
    assert code not in bridge(["model.moe_router_topk_limited_devices=4"])


def test_p2p_warmup_flush_needs_p2p_overlap():
    """MCore model_parallel_config.py:571-576: ``overlap_p2p_comm_warmup_flush`` needs ``overlap_p2p_comm and not
    batch_p2p_comm``; Megatron-LM turns p2p overlap off without virtual stages (LM arguments.py:966-979) and sets
    ``batch_p2p_comm = not overlap_p2p_comm`` (argument_utils.py:307)."""
    code = "PIPELINE_P2P_WARMUP_FLUSH"
    flag = "--overlap-p2p-communication-warmup-flush"
    assert lm(flag, pp=2, num_gpus=16)[code] is Severity.error  # no virtual stages
    vpp = f"{flag} --num-virtual-stages-per-pipeline-rank 2"
    assert code not in lm(vpp, pp=2, num_gpus=16)
    assert lm(f"{vpp} --no-overlap-p2p-communication", pp=4, num_gpus=32)[code] is Severity.error
    assert bridge(["model.overlap_p2p_comm_warmup_flush=true"])[code] is Severity.error  # PP 1
    assert code not in bridge(["model.overlap_p2p_comm_warmup_flush=true", "model.pipeline_model_parallel_size=2",
                               "model.virtual_pipeline_model_parallel_size=2"], num_gpus=16)  # fmt: skip


def test_custom_quantization_recipes_are_refused_as_bad_input():
    """MCore transformer/transformer_config.py:1432-1438 and :1458-1464: a custom FP8 / FP4 recipe needs a
    quantizer factory. The engine does not model custom recipes: reading refuses them (mc-tc-019/025 are the
    schema's), in both dialects."""
    for launch in ("--fp8-format e4m3 --fp8-recipe custom", "--fp4-format e2m1 --fp4-recipe custom"):
        with pytest.raises(InputError):
            lm(launch)
    for keys in (["mixed_precision.fp8=e4m3", "mixed_precision.fp8_recipe=custom"],
                 ["model.fp4=e2m1", "model.fp4_recipe=custom"]):  # fmt: skip
        with pytest.raises(InputError):
            bridge(keys)
    assert "PRECISION_GPU" not in lm("--fp4-format e2m1 --fp4-recipe nvfp4")  # nvfp4 still reads


def test_load_balancing_lists_and_capacity_factor():
    """MCore transformer/transformer_config.py:1652-1658 (a list of load-balancing types needs a coefficient list
    of the same length) and :1660-1684 (a capacity factor only with aux_loss, seq_aux_loss, global_aux_loss or
    none). Megatron-LM turns a one-element list into its element (LM arguments.py:1606-1609)."""
    code = "MOE_LOAD_BALANCING_CONFIG"
    two = "--moe-router-load-balancing-type seq_aux_loss global_aux_loss"
    assert lm(f"{two} --moe-aux-loss-coeff 0.001")[code] is Severity.error
    assert code not in lm(f"{two} --moe-aux-loss-coeff 0.001 0.0001")
    assert code not in lm("--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 0.001")
    drop = "--moe-expert-capacity-factor 1.0 --moe-token-dispatcher-type alltoall"
    assert lm(f"{drop} --moe-router-load-balancing-type sinkhorn")[code] is Severity.error
    assert code not in lm(drop)  # Megatron-LM's default aux_loss
    assert code not in lm(f"{drop.replace('1.0', '-1')} --moe-router-load-balancing-type sinkhorn")  # none
    keys = ["model.moe_expert_capacity_factor=1.0"]
    assert bridge([*keys, "model.moe_router_load_balancing_type=[aux_loss,sinkhorn]",
                   "model.moe_aux_loss_coeff=[0.001,0.0]"])[code] is Severity.error  # fmt: skip
    assert code not in bridge(keys)  # the recipe's type: not judged


def test_top1_softmax_routing_needs_pre_softmax():
    """MCore transformer/transformer_config.py:2328-2336: ``moe_router_topk == 1 and moe_router_score_function ==
    "softmax" and not moe_router_pre_softmax and moe_router_load_balancing_type != "sinkhorn"`` raises. No catalog
    model routes top-1: a top-1 variant of Qwen3-30B-A3B shows both sides."""
    from moe_long_context.engine.rules.mcore_config_more import top1_pre_softmax

    def codes(**fields) -> set[str]:
        ctx = build_context(TrainingConfig(model="qwen3-30b-a3b", num_gpus=8, ep=8, **fields))
        top1 = Context(ctx.cfg, ctx.model.model_copy(update={"moe_router_topk": 1}), None)
        return {f.code for f in top1_pre_softmax(top1)}

    lm_defaults = dict(
        launcher="megatron-lm", moe_router_pre_softmax=False, moe_router_load_balancing_type="aux_loss"
    )
    assert codes(**lm_defaults) == {"MOE_TOP1_PRE_SOFTMAX"}
    assert not codes(**{**lm_defaults, "moe_router_pre_softmax": True})
    assert not codes(**{**lm_defaults, "moe_router_load_balancing_type": "sinkhorn"})
    assert not codes(**lm_defaults, moe_router_score_function="sigmoid")
    assert not codes()  # Bridge, unset: the recipe's own
    assert "MOE_TOP1_PRE_SOFTMAX" not in lm("")  # Qwen3-30B-A3B routes top-8
