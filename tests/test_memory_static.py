"""Weights, gradients and optimizer bytes per rank for the seeds' three layouts, computed by hand here.

Megatron's formula (Megatron-LM theoretical_memory_usage.py, reference memory-model.md 1a): BF16 params (2 B)
+ FP32 main grads (4 B) + FP32 master and Adam m, v (12 B) sharded by the distributed optimizer, i.e.
6 + 12/d bytes per parameter, with d = DP x CP for dense weights and EDP for routed experts.
The parameter counts below are written out from the published config.json values.
"""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.memory.rank_memory import RankMemory, memory_model
from seed_layouts import QWEN_128K, QWEN_SPLIT

# --------------------------------------------------------------------------- DeepSeek-V3, one layer
H = 7168
MLA = (
    7168 * 1536  # q down-projection h -> q_lora_rank
    + 1536 * 128 * (128 + 64)  # q up-projection to 128 heads x (nope 128 + rope 64)
    + 7168 * (512 + 64)  # kv down-projection h -> kv_lora_rank + rope dim
    + 512 * 128 * (128 + 128)  # kv up-projection to 128 heads x (k nope 128 + v 128)
    + 128 * 128 * 7168  # output projection 128 heads x v 128 -> h
)
MLA_NORMS = 7168 + 1536 + 512  # input RMSNorm, q_a and kv_a layernorms (replicated)
DENSE_MLP = 3 * 7168 * 18432 + 7168  # SwiGLU fc1 (2 x 18432) and fc2, plus the pre-MLP RMSNorm
ROUTED = 256 * 3 * 7168 * 2048  # 256 routed experts, SwiGLU with moe_intermediate_size 2048
SHARED = 3 * 7168 * 2048  # one shared expert of width 2048
# router and pre-MLP RMSNorm (the sigmoid expert bias is a buffer, not a parameter)
ROUTER_AND_NORM = 7168 * 256 + 7168
EMBEDDING = 129280 * 7168  # vocabulary table (Bridge keeps the published vocab, TP = 1)
MTP_DENSE = MLA + MLA_NORMS + 2 * 7168 * 7168 + SHARED + ROUTER_AND_NORM + 3 * 7168  # + eh_proj, 3 norms

DSV3 = dict(
    model="deepseek-v3",
    gpu="h100",
    tp=1,
    ep=32,
    pp=8,
    vpp=4,
    mbs=1,
    gbs=256,
    pipeline_layout="Et|(tt|)*30mL",  # flat stage k = v x 8 + r: E+L0, then (L1,L2), (L3,L4), ..., then MTP+loss
)


def _static(config: dict, rank: int) -> tuple[dict[str, float], RankMemory]:
    mm = memory_model(build_context(TrainingConfig(**config)))
    return {t.name: t.bytes for t in mm.ranks[rank].terms}, mm.ranks[rank]


def _expected(dense: int, experts: int, d_dense: int, d_experts: int) -> dict[str, float]:
    return {
        "parameters": 2 * (dense + experts),
        "gradients": 4 * (dense + experts),
        "optimizer states": 12 * dense / d_dense + 12 * experts / d_experts,
    }


@pytest.mark.parametrize(
    ("seq", "world", "cp", "d_dense", "d_experts"),
    [
        (131072, 256, 32, 1 * 32, 256 // (1 * 32 * 8)),  # 128K on 256 H100: DP1 x CP32, EDP1
        (262144, 512, 64, 1 * 64, 512 // (1 * 32 * 8)),  # 256K on 512 H100: DP1 x CP64, EDP2
    ],
)
def test_deepseek_v3_first_and_last_rank_bytes(seq, world, cp, d_dense, d_experts):
    config = dict(DSV3, seq_len=seq, num_gpus=world, cp=cp)
    # PP rank 0 holds flat stages 0, 8, 16, 24: E + layer 0 (dense), layers 15-16, 31-32, 47-48 (MoE).
    terms, rank0 = _static(config, 0)
    assert rank0.layers == [0, 15, 16, 31, 32, 47, 48] and rank0.embedding and not rank0.loss
    dense = 7 * (MLA + MLA_NORMS) + DENSE_MLP + 6 * (SHARED + ROUTER_AND_NORM) + EMBEDDING
    experts = 6 * ROUTED // 32  # EP32 x ETP1: 8 of the 256 experts per MoE layer
    for name, value in _expected(dense, experts, d_dense, d_experts).items():
        assert terms[name] == pytest.approx(value, rel=1e-12), name

    # PP rank 7 holds flat stages 7, 15, 23, 31: layers 13-14, 29-30, 45-46 and the MTP layer with the loss.
    terms, rank7 = _static(config, 7)
    assert rank7.layers == [13, 14, 29, 30, 45, 46] and rank7.mtp_layers == 1 and rank7.loss
    dense = (
        6 * (MLA + MLA_NORMS + SHARED + ROUTER_AND_NORM)
        + MTP_DENSE
        + EMBEDDING  # the MTP stage's own copy of the word embeddings
        + EMBEDDING  # the untied output layer
        + 7168  # final RMSNorm
    )
    experts = 7 * ROUTED // 32  # six MoE layers and the MTP layer's experts
    for name, value in _expected(dense, experts, d_dense, d_experts).items():
        assert terms[name] == pytest.approx(value, rel=1e-12), name


# --------------------------------------------------------------------------- Qwen3-235B-A22B, one layer
QWEN_ATTENTION = 4096 * (64 * 128 + 2 * 4 * 128) + 64 * 128 * 4096  # QKV (64 q heads, 4 kv groups) + out proj
QWEN_REPLICATED = 4096 + 2 * 128 + 4096 + 4096 * 128  # input norm, Q/K norms, pre-MLP norm, router (no bias)
QWEN_EXPERTS_PER_RANK = (128 // 32) * 3 * 4096 * 1536  # 4 of 128 SwiGLU experts (width 1536) on each EP rank
QWEN_TABLE = 151936 * 4096 // 4  # vocabulary table split over TP4

QWEN = dict(QWEN_128K, gbs=64, **QWEN_SPLIT)


def test_qwen3_235b_first_and_last_rank_bytes():
    d_dense, d_experts = 2 * 4, 128 // (1 * 32 * 4)  # DP2 x CP4 = 8; EDP = 128 / (ETP1 x EP32 x PP4) = 1
    per_layer_dense = QWEN_ATTENTION // 4 + QWEN_REPLICATED
    # Rank 0: flat stage 0 is E + layer 0, then flat stages 4, 8, ..., 44 hold two layers each.
    terms, rank0 = _static(QWEN, 0)
    assert len(rank0.layers) == 1 + 11 * 2 and rank0.layers[:3] == [0, 7, 8] and rank0.embedding
    dense = 23 * per_layer_dense + QWEN_TABLE
    experts = 23 * QWEN_EXPERTS_PER_RANK
    for name, value in _expected(dense, experts, d_dense, d_experts).items():
        assert terms[name] == pytest.approx(value, rel=1e-12), name
    # Rank 3: flat stages 3, 7, ..., 43 hold two layers each, flat stage 47 holds layer 93 and the loss.
    terms, rank3 = _static(QWEN, 3)
    assert len(rank3.layers) == 11 * 2 + 1 and rank3.layers[-1] == 93 and rank3.loss
    dense = 23 * per_layer_dense + QWEN_TABLE + 4096  # output layer and final norm
    for name, value in _expected(dense, experts, d_dense, d_experts).items():
        assert terms[name] == pytest.approx(value, rel=1e-12), name


def test_precision_aware_optimizer_bf16_grads_and_offload_change_only_what_they_should():
    base = dict(DSV3, seq_len=131072, num_gpus=256, cp=32)
    terms, _ = _static(base, 0)
    params = terms["parameters"] / 2
    dense = 7 * (MLA + MLA_NORMS) + DENSE_MLP + 6 * (SHARED + ROUTER_AND_NORM) + EMBEDDING
    experts = params - dense
    # Precision-aware optimizer: BF16 moments (4 B) and the 16-bit remainder of the FP32 master (2 B).
    aware, _ = _static({**base, "use_precision_aware_optimizer": True, "grad_reduce_in_fp32": False}, 0)
    assert aware["gradients"] == 2 * params
    assert aware["optimizer states"] == pytest.approx(6 * dense / 32 + 6 * experts / 1, rel=1e-12)
    # CPU offload of 75 %: Megatron's HybridDeviceOptimizer keeps FP32 master and moments for the GPU share.
    offload, _ = _static(
        {**base, "use_precision_aware_optimizer": True, "optimizer_cpu_offload_fraction": 0.75}, 0
    )
    assert offload["optimizer states"] == pytest.approx(0.25 * (12 * dense / 32 + 12 * experts), rel=1e-12)
    assert offload["parameters"] == terms["parameters"] and offload["gradients"] == terms["gradients"]
    # No distributed optimizer: nothing is sharded (18 B per parameter).
    plain, _ = _static({**base, "use_distributed_optimizer": False}, 0)
    assert plain["optimizer states"] == pytest.approx(12 * params, rel=1e-12)


def test_fp8_keeps_a_quantized_copy_of_every_gemm_weight_unless_params_are_fp8():
    base = dict(DSV3, seq_len=131072, num_gpus=256, cp=32)
    bf16, _ = _static(base, 0)
    assert "FP8 weight cache" not in bf16
    fp8, _ = _static({**base, "precision": "fp8-blockwise"}, 0)
    # GEMM weights: attention and dense MLP (TP1) and the local experts; no norms, router or embedding.
    gemm = 7 * MLA + (DENSE_MLP - 7168) + 6 * SHARED + 6 * ROUTED // 32
    assert fp8["FP8 weight cache"] == pytest.approx(2 * gemm, rel=1e-12)  # row- and column-wise 1-byte copies
    fp8_params, _ = _static({**base, "precision": "fp8-blockwise", "fp8_param_gather": True}, 0)
    assert "FP8 weight cache" not in fp8_params
    # FP8 parameters: 1-byte weights plus the column-wise copy for backward, the same 2 B as BF16 weights
    assert fp8_params["parameters"] == bf16["parameters"]
