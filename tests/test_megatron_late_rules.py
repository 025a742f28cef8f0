"""Rules Megatron enforces only at model build or run time, or in code the CPU conformance suite cannot run.

The differential suite (``make conformance``) runs Megatron's configuration and initialisation checks; the
rules here raise later (building the model, the first training step, inside Transformer Engine) or live in
Megatron Bridge's ``ConfigContainer.validate``, whose module imports Bridge's whole data stack. Each test
quotes the Megatron condition it pins, with its file and line (MCore = Megatron Core 0.19.2
``megatron/core``, LM = ``megatron/training`` of the same wheel, Bridge = Megatron Bridge 0.6.2
``megatron/bridge``, TE = Transformer Engine v2.14 ``transformer_engine``), and checks both sides of the
boundary. ``conformance/allowlist.yaml`` points here for every difference the suite documents.
"""

from __future__ import annotations

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules import run

QWEN = dict(model="qwen3-30b-a3b", num_gpus=32, seq_len=32768, tp=2, cp=2, pp=2, ep=8, gbs=64)


def errors(base: dict, **overrides) -> set[str]:
    cfg = TrainingConfig(**{**base, **overrides})
    return {f.code for f in run(build_context(cfg)) if f.severity == Severity.error}


# ---------------------------------------------------------------- run time (first training step)


def test_moe_with_tp_needs_sequence_parallel_at_run_time():
    """MCore transformer/moe/moe_layer.py:629-633, MoELayer.forward:
    ``if self.training and self.attn_tp_group.size() > 1 and not self.config.sequence_parallel: raise
    ValueError`` (model_parallel_config.py:560-565 only warns at config time)."""
    assert "MOE_TP_NEEDS_SP" in errors(QWEN, sequence_parallel=False)
    assert "MOE_TP_NEEDS_SP" not in errors(QWEN, sequence_parallel=True)
    assert "MOE_TP_NEEDS_SP" not in errors({**QWEN, "tp": 1, "num_gpus": 16}, sequence_parallel=False)


def test_interleaved_schedule_needs_microbatches_multiple_of_pp():
    """MCore pipeline_parallel/schedules.py:1133-1152, forward_backward_pipelining_with_interleaving:
    ``microbatch_group_size_per_vp_stage`` (default PP) must lie in [PP, num_microbatches], and
    ``num_microbatches % group`` must be 0 or >= PP; with the default that is M >= PP and M % PP == 0."""
    base = dict(QWEN, pp=4, vpp=2, num_gpus=32, cp=1)  # DP = 32 / (2 x 1 x 4) = 4
    assert "VPP_MICROBATCHES" in errors(base, gbs=4 * 6)  # 6 microbatches, PP 4
    assert "VPP_MICROBATCHES" in errors(base, gbs=4 * 2)  # 2 < PP
    assert "VPP_MICROBATCHES" not in errors(base, gbs=4 * 8)


def test_sequence_parallel_splits_each_cp_shard_over_tp():
    """MCore tensor_parallel/mappings.py:71-74 (``First dimension of the tensor should be divisible by tensor
    parallel size``), reached in the first forward with SP; Bridge training/config.py:1212-1220 checks
    lcm(2 x CP, CP x TP) only for SFT datasets."""
    assert "SEQ_CP_TP_DIVISIBILITY" in errors({**QWEN, "tp": 8, "cp": 2, "num_gpus": 64}, seq_len=4096 + 4)
    assert "SEQ_CP_TP_DIVISIBILITY" not in errors({**QWEN, "tp": 8, "cp": 2, "num_gpus": 64}, seq_len=4096)


def test_transformer_engine_cp_comm_type_limits():
    """TE v2.14 pytorch/attention/dot_product_attention/context_parallel.py, attn_forward_func_with_cp and
    AttnFuncWithCPAndQKVOA2A.forward: a2a needs the heads per rank divisible by CP ('The number of attention
    heads needs to be divisible by CP size!'); MLA runs only over p2p or a2a+p2p; sliding-window attention only
    over a2a or all_gather; learned softmax sinks only over a2a. These raise in the first attention forward."""
    # Qwen3-30B: 4 KV heads; TP 2 leaves 2 per rank, so a2a over CP 4 fails, over CP 2 works.
    assert "CP_A2A_HEADS" in errors({**QWEN, "cp": 4, "num_gpus": 64}, cp_comm_type="a2a")
    assert "CP_A2A_HEADS" not in errors(QWEN, cp_comm_type="a2a")
    dsv3 = dict(model="deepseek-v3", num_gpus=64, seq_len=65536, cp=8, pp=8, ep=8, gbs=64)
    dsv3["pipeline_layout"] = "Et*8|(t*8|)*6t*5mL"
    assert "CP_MLA_COMM_TYPE" in errors(dsv3, cp_comm_type="all_gather")
    assert "CP_MLA_COMM_TYPE" not in errors(dsv3, cp_comm_type="p2p")
    oss = dict(model="gpt-oss-20b", num_gpus=16, seq_len=16384, cp=4, ep=4, gbs=16)
    assert {"CP_SLIDING_WINDOW_COMM_TYPE", "CP_SINKS_COMM_TYPE"} <= errors(oss, cp_comm_type="p2p")
    assert not {"CP_SLIDING_WINDOW_COMM_TYPE", "CP_SINKS_COMM_TYPE"} & errors(oss, cp_comm_type="a2a")


def test_transformer_engine_recipe_needs_the_gpu():
    """TE v2.14 pytorch/quantization.py:48-100, check_recipe_support (called when the first FP8 autocast
    starts): MXFP8 needs compute capability 10.x-11.x, NVFP4 10.0+, blockwise 9.0+."""
    assert "PRECISION_GPU" in errors(QWEN, gpu="h100", precision="mxfp8")
    assert "PRECISION_GPU" in errors(QWEN, gpu="h100", precision="nvfp4")
    assert "PRECISION_GPU" not in errors(QWEN, gpu="b200", precision="mxfp8")
    assert "PRECISION_GPU" not in errors(QWEN, gpu="h100", precision="fp8-blockwise")


def test_transformer_engine_fp8_gemm_shapes():
    """TE v2.14: pytorch/utils.py:479-489 assert_dim_for_fp8_exec (local rows % 8, every FP8 recipe);
    common/gemm/cublaslt_gemm.cu:209-210, :292-295 (block scaling: the wgrad GEMM's inner dim, MBS x seq/CP
    tokens, % 16 on every GPU); cublaslt_gemm.cu:135-162 with transformer_engine.cpp:1099-1112 (tensor
    scaling on TN-only Hopper: the same % 16). Blockwise needs 16, not 128 (float8_blockwise_tensor.py:195-204
    is_quantizable only chooses a BF16 all-gather; quantization.py:119-125 aligns blockwise to 16)."""
    one = dict(QWEN, tp=1, cp=1, num_gpus=16, mbs=1, gbs=64, gpu="h100")
    # 4104 = 8 x 513: passes the % 8 fprop check, fails the % 16 wgrad check
    assert "PRECISION_SHAPE" in errors(one, seq_len=4096 + 8, precision="fp8-blockwise")
    assert "PRECISION_SHAPE" not in errors(one, seq_len=4096 + 16, precision="fp8-blockwise")
    assert "PRECISION_SHAPE" not in errors(
        one, seq_len=4096 + 64, precision="fp8-blockwise"
    )  # 128 not needed
    assert "PRECISION_SHAPE" in errors(one, seq_len=4096 + 8, precision="fp8-tensorwise")  # Hopper: TN only
    assert "PRECISION_SHAPE" not in errors(one, seq_len=4096 + 8, precision="fp8-tensorwise", gpu="b200")
    assert "PRECISION_SHAPE" in errors(one, seq_len=4096 + 4, precision="fp8-tensorwise", gpu="b200")  # % 8


def test_blockwise_rows_of_the_audit_reproduction_are_accepted():
    """rule-audit.md Reproduction: qwen3-30b-a3b TP4 CP16 SP seq 4096 blockwise on H100 has 64 local rows
    (4096 / 64) and 256 wgrad rows (4096 / 16); the engine used to demand 128 local rows."""
    cfg = dict(QWEN, tp=4, cp=16, ep=8, pp=1, num_gpus=64, seq_len=4096, gbs=64, gpu="h100")
    assert "PRECISION_SHAPE" not in errors(cfg, precision="fp8-blockwise", sequence_parallel=True)
    # seq 10240 with TP4 CP8: 320 local rows, a multiple of 16 and not of 128
    wide = dict(cfg, tp=4, cp=8, num_gpus=32, seq_len=10240, gbs=32)
    assert "PRECISION_SHAPE" not in errors(wide, precision="fp8-blockwise", sequence_parallel=True)


def test_expandable_segments_with_te_graphs():
    """MCore transformer/cuda_graphs.py:2099-2107, TECudaGraphHelper (builds the graphs after the first
    steps); Megatron-LM also asserts it in validate_args (LM arguments.py:1880-1887), which the conformance
    suite runs for the megatron-lm launcher."""
    graphs = dict(
        QWEN, cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"], expandable_segments=True
    )
    assert "GRAPH_EXPANDABLE_SEGMENTS" in errors(graphs)
    assert "GRAPH_EXPANDABLE_SEGMENTS" not in errors(graphs, nccl_graph_register=False)


# ---------------------------------------------------------------- model build


def test_deepep_needs_etp_times_ep_above_one():
    """MCore transformer/moe/token_dispatcher.py:1769-1770, MoEFlexTokenDispatcher:
    ``assert self.tp_size * self.ep_size > 1, "DeepEP dispatcher requires TPxEP > 1"`` (tp_size is the expert
    TP group), at model build; its constructor needs the deep_ep package, so the CPU suite cannot reach it."""
    one = dict(QWEN, tp=1, cp=1, ep=1, num_gpus=8, gbs=64)
    assert "DISPATCHER_TPXEP" in errors(one, dispatcher="flex-deepep")
    assert "DISPATCHER_TPXEP" not in errors({**one, "ep": 2}, dispatcher="flex-deepep")
    assert "DISPATCHER_TPXEP" not in errors(one, dispatcher="flex-hybridep")


def test_layers_per_pipeline_stage_at_model_build():
    """MCore transformer/transformer_block.py:147-173, get_num_layers_to_build: ``(num_layers + emb + loss) %
    PP == 0`` and layers per rank % VPP == 0 (the conformance suite runs it for every rank; Megatron-LM also
    checks the first half in validate_args, LM arguments.py:950-964)."""
    assert "PP_LAYERS_NOT_DIVISIBLE" in errors({**QWEN, "pp": 5, "num_gpus": 80})
    assert "PP_LAYERS_NOT_DIVISIBLE_VPP" in errors({**QWEN, "pp": 2, "num_gpus": 32}, vpp=5, gbs=64)
    assert not errors({**QWEN, "pp": 4, "num_gpus": 64}, vpp=3, gbs=64)


def test_ep_divides_experts_at_model_build():
    """MCore transformer/moe/moe_layer.py:183 ``assert self.config.num_moe_experts % ep_size == 0`` in
    BaseMoELayer.__init__ (the conformance suite builds it on the fake process group); Megatron-LM asserts
    the same in validate_args (LM arguments.py:1600-1604)."""
    assert "EP_DIVIDES_EXPERTS" in errors({**QWEN, "ep": 3, "num_gpus": 96, "gbs": 96})
    assert "EP_DIVIDES_EXPERTS" not in errors(QWEN)


# ---------------------------------------------------------------- Megatron Bridge ConfigContainer.validate


def test_bridge_sequence_divisible_by_two_cp():
    """Bridge training/config.py:1435-1438 ``assert self.model.seq_length % (self.model.context_parallel_size *
    2) == 0`` (ConfigContainer.validate); LM arguments.py:1295-1298 has the same check."""
    assert "SEQ_CP_DIVISIBILITY" in errors({**QWEN, "tp": 1, "num_gpus": 16}, seq_len=32768 + 2)
    assert "SEQ_CP_DIVISIBILITY" not in errors({**QWEN, "tp": 1, "num_gpus": 16}, seq_len=32768 + 4)


def test_bridge_hierarchical_cp_sizes():
    """Bridge training/config.py:1541-1557 (_validate_cp_comm_type): a2a+p2p needs
    hierarchical_context_parallel_sizes, whose product must be CP; LM arguments.py:562-567 likewise."""
    cp4 = dict(QWEN, cp=4, num_gpus=64, cp_comm_type="a2a+p2p")
    assert "CP_HIERARCHY_REQUIRED" in errors(cp4)
    assert "CP_HIERARCHY_PRODUCT" in errors(cp4, hierarchical_cp_sizes=[2, 4])
    assert not {"CP_HIERARCHY_REQUIRED", "CP_HIERARCHY_PRODUCT"} & errors(cp4, hierarchical_cp_sizes=[2, 2])


def test_bridge_full_iteration_graphs_need_the_nan_check_off():
    """Bridge training/config.py:1369-1374 ``assert not self.rerun_state_machine.check_for_nan_in_loss`` with
    full_iteration graphs; LM arguments.py:1194-1197 likewise."""
    full = dict(QWEN, cuda_graph_impl="full_iteration")
    assert "GRAPH_FULL_ITERATION_NAN_CHECK" in errors(full)
    assert "GRAPH_FULL_ITERATION_NAN_CHECK" not in errors(full, check_for_nan_in_loss=False)


def test_bridge_mxfp8_param_gather_needs_buffer_reuse():
    """Bridge training/config.py:1348-1359: with fp8_param_gather and fp8_recipe mxfp8,
    ``reuse_grad_buf_for_mxfp8_param_ag`` must be True (Bridge's MXFP8 preset sets it, the engine's default)."""
    mx = dict(
        QWEN, gpu="b200", precision="mxfp8", fp8_param_gather=True, reuse_grad_buf_for_mxfp8_param_ag=False
    )
    assert "PRECISION_PARAM_GATHER" in errors(mx)
    assert "PRECISION_PARAM_GATHER" not in errors({**mx, "reuse_grad_buf_for_mxfp8_param_ag": True})
    assert "PRECISION_PARAM_GATHER" not in errors(mx, launcher="megatron-lm")
