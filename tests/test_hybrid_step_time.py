"""Step-time FLOPs of Mamba-2, DSA and MLP-only hybrid layers (engine/step_time_hybrid.py), by hand."""

from __future__ import annotations

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.step_time import layer_flops_per_token, step_time
from moe_long_context.model.catalog import load_model
from moe_long_context.model.params import layer_params


def test_mamba_layer_flops_by_hand():
    spec = load_model("nemotron-3-nano")
    # 64 heads, chunk 128, state 128, head dim 64; conv 4 taps over 4096 + 2048 channels
    scan = 2 * 64 * (128 * (128 + 64) / 2 + 2 * 128 * 64)
    conv = 2 * 4 * 6144
    gemms = 2 * layer_params(spec, 0).attention
    assert layer_flops_per_token(spec, 0, 131072) == gemms + scan + conv


def test_mlp_only_layer_has_no_attention_flops():
    spec = load_model("nemotron-3-nano")
    lp = layer_params(spec, 1)  # E
    assert layer_flops_per_token(spec, 1, 131072) == 2 * (lp.mlp + lp.active_experts + 2688 * 128)


def test_dsa_layer_flops_by_hand():
    spec = load_model("glm-5")
    seq = 131072
    indexer = 2 * 32 * 128 * seq / 2  # every earlier key, 32 heads of 128
    sparse = 2 * (64 * (192 + 64) + 64 * 256) * 2048  # MLA over the 2048 selected keys
    lp = layer_params(spec, 5)
    linear = 2 * (lp.attention + lp.mlp + lp.active_experts + 6144 * 256)
    assert layer_flops_per_token(spec, 5, seq) == linear + indexer + sparse
    # the sparse part stops growing past topk, the indexer keeps growing with S
    assert layer_flops_per_token(spec, 5, 2 * seq) - layer_flops_per_token(spec, 5, seq) == indexer


def test_hybrid_step_time_has_no_kv_exchange_for_mamba_layers():
    cfg = TrainingConfig(
        model="nemotron-3-nano", gpu="h100", num_gpus=64, seq_len=131072, tp=1, cp=8, ep=8, gbs=64
    )
    ctx = build_context(cfg)
    result = step_time(ctx)
    assert result.step_s > 0 and result.tflops_per_gpu > 0
    # the 6 attention layers exchange K and V under CP; the Mamba and MoE layers add none
    assert result.terms.get("cp_comm", 0.0) > 0
