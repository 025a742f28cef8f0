"""Step-time model: Megatron's FLOPs formula by hand, and the published 4K throughput anchors."""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.step_time import model_flops_per_token, step_time
from moe_long_context.model.catalog import load_model


def test_model_flops_match_megatron_formula_for_qwen3_30b():
    m = load_model("qwen3-30b-a3b")
    s, h, n, g, d, v = 4096, 2048, 32, 4, 128, 151936
    # Megatron (training.py num_floating_point_operations), per token, x3 (fwd+bwd) x2 (FMA):
    attn = 6 * (h * (n * d + 2 * g * d) + n * d * h)  # QKV + output projection
    core = 6 * (n * d) / 2 * 2 * s  # causal QK^T and AV
    moe = 6 * (8 * 3 * h * 768) + 6 * h * 128  # 8 routed experts (SwiGLU) + the router
    logits = 6 * h * v
    expected = 48 * (attn + core + moe) + logits
    assert model_flops_per_token(m, s, 0) == pytest.approx(expected, rel=1e-9)


def test_model_flops_mla_core_term_for_dsv3():
    m = load_model("deepseek-v3")
    a = model_flops_per_token(m, 8192, 0) - model_flops_per_token(m, 4096, 0)
    # doubling s adds the core term once more: 6 x n (dqk + dr + dv)/2 x s per layer
    assert a == pytest.approx(61 * 6 * 128 * (128 + 64 + 128) / 2 * 4096, rel=1e-9)


ANCHORS = [
    # Megatron Bridge performance summary, 4K, forced-balance dropless (memory-model.md section 5)
    ("DSV3 1024 H100 FP8", 338, dict(model="deepseek-v3", gpu="h100", num_gpus=1024, tp=2, pp=8, vpp=4, ep=64,
                                     gbs=8192, precision="fp8-blockwise", dispatcher="flex-deepep",
                                     pipeline_layout="Et|(tt|)*30mL")),
    ("Qwen3-235B 256 H100 FP8", 253, dict(model="qwen3-235b-a22b", gpu="h100", num_gpus=256, tp=2, pp=8, vpp=4,
                                          ep=32, gbs=8192, precision="fp8-blockwise", ep_overlap=True,
                                          pipeline_layout="Ett|(ttt|)*30ttL")),
    ("DSV3 256 GB200 MXFP8", 1276, dict(model="deepseek-v3", gpu="gb200", num_gpus=256, tp=1, pp=4, vpp=4, ep=64,
                                        gbs=4096, precision="mxfp8", dispatcher="flex-hybridep", ep_overlap=True,
                                        pipeline_layout="Ettt|(t*4|)*14ttmL")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "tflops", "kw"), ANCHORS, ids=[a[0] for a in ANCHORS])
def test_4k_anchors_within_25_percent(name, tflops, kw):
    ctx = build_context(TrainingConfig(seq_len=4096, mbs=1, sequence_parallel=kw["tp"] > 1, **kw))
    assert ctx.split.split is not None, ctx.split.problems
    st = step_time(ctx)
    assert abs(st.tflops_per_gpu / tflops - 1) < 0.25, (name, st.tflops_per_gpu, st.terms)
    assert 0 < st.mfu < 1 and st.step_s > 0


def test_more_cp_communication_costs_time():
    base = dict(model="qwen3-235b-a22b", gpu="h100", num_gpus=256, tp=2, pp=8, vpp=4, ep=32, gbs=512,
                seq_len=65536, sequence_parallel=True, pipeline_layout="Ett|(ttt|)*30ttL")  # fmt: skip
    p2p = step_time(build_context(TrainingConfig(cp=4, **{**base, "num_gpus": 1024})))
    assert p2p.terms["cp_comm"] > 0
    slower = step_time(build_context(TrainingConfig(cp=4, **{**base, "num_gpus": 1024}, cp_comm_type="a2a")))
    assert slower.terms["cp_comm"] > p2p.terms["cp_comm"]  # a2a is not overlapped with attention
