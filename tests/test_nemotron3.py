"""Nemotron 3 Super, Nemotron 3 Ultra and Nemotron 3.5 Lightning (issue 24): config.json and catalog loading,
LatentMoE and the repeated hybrid MTP block, parameter counts by hand and against the published figures.

Fixtures (tests/data/hf/), the architecture keys of the public config.json files as mirrored in
ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce aic-core/src/aiconfigurator_core/model_configs/:
  nemotron-3-super.json        nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8_config.json
  nemotron-3-ultra.json        nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16_config.json (no num_hidden_layers:
                               transformers 5 gives layers_block_type and mtp_layers_block_type lists)
  nemotron-3.5-lightning.json  nvidia--NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4_config.json (moe_latent_size null)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from moe_long_context.model.catalog import load_model
from moe_long_context.model.params import layer_params, model_params, mtp_layer_params

DATA = Path(__file__).parent / "data" / "hf"
PRESETS = ["nemotron-3-super", "nemotron-3-ultra", "nemotron-3.5-lightning"]


@pytest.mark.parametrize("model", PRESETS)
def test_preset_and_config_json_give_the_same_model(model):
    preset, fixture = load_model(model), load_model(str(DATA / f"{model}.json"))
    assert preset.family == fixture.family == "nemotron_h"
    fields = ("hybrid_layer_pattern", "mtp_block_pattern", "mtp_num_layers", "mtp_use_repeated_layer",
              "moe_latent_size", "num_experts", "moe_router_topk", "mamba_num_heads")  # fmt: skip
    assert {f: getattr(preset, f) for f in fields} == {f: getattr(fixture, f) for f in fields}
    assert model_params(preset) == model_params(fixture)


@pytest.mark.parametrize(
    ("model", "layers", "mamba", "moe", "attention", "latent", "heads"),
    [
        ("nemotron-3-super", 88, 40, 40, 8, 1024, 128),
        ("nemotron-3-ultra", 108, 48, 48, 12, 2048, 256),
        ("nemotron-3.5-lightning", 52, 23, 23, 6, None, 64),
    ],
)
def test_layer_kinds_mtp_block_and_latent_width(model, layers, mamba, moe, attention, latent, heads):
    spec = load_model(model)
    types = spec.attention_layer_types
    assert (spec.num_layers, types.count("mamba"), spec.num_moe_layers, types.count("full")) == (
        layers, mamba, moe, attention)  # fmt: skip
    assert spec.moe_latent_size == latent and spec.mamba_num_heads == heads
    assert spec.moe_token_width == (latent or spec.hidden_size)
    # one MTP block of an attention layer then an MoE layer, repeated by Bridge (nemotron_h_bridge.py:305)
    assert spec.mtp_block_pattern == "*E" and spec.mtp_num_layers == 1 and spec.mtp_use_repeated_layer
    first_attention = types.index("full")
    assert spec.mtp_block_layers == (first_attention, spec.hybrid_layer_pattern.index("E"))
    assert spec.mtp_weight_blocks(2) == 1  # the recipes' mtp_num_layers=2 run one block twice


def test_super_layers_by_hand():
    spec = load_model("nemotron-3-super")
    h, latent = 4096, 1024
    # Mamba-2: in_proj h -> 2 x 8192 + 2 x 8 x 128 + 128; conv over 8192 + 2048 channels, width 4, bias; A_log, D,
    # dt_bias per head; gated norm over d_inner; out_proj 8192 -> h
    mamba = layer_params(spec, 0)
    assert mamba.attention == h * 18560 + 10240 * 5 + 3 * 128 + 8192 + 8192 * h and mamba.replicated == h
    # LatentMoE: 512 experts of 2 x 1024 x 2688 (squared ReLU, not gated) on latent tokens, a 5376-wide shared
    # expert at h, the router and two TP-replicated latent projections h <-> 1024 (moe_layer.py:273-296)
    moe = layer_params(spec, 1)
    assert moe.experts == 512 * 2 * latent * 2688 and moe.active_experts == 22 * 2 * latent * 2688
    assert moe.mlp == 2 * h * 5376
    assert moe.replicated == h + h * 512 + 2 * h * latent and moe.replicated_gemm == 2 * h * latent
    attention = layer_params(spec, 7)
    assert attention.attention == h * (32 * 128 + 2 * 2 * 128) + 32 * 128 * h and attention.mlp == 0
    # the MTP block: enorm, hnorm, eh_proj 2h -> h, its attention and MoE layers, a final norm
    mtp = mtp_layer_params(spec)
    assert mtp.total == attention.total + moe.total + 2 * h * h + 3 * h
    assert model_params(spec).mtp == mtp.total  # one block's weights, however many depths run


def test_an_unrepeated_mtp_block_holds_weights_per_depth():
    cfg = load_model("nemotron-3.5-lightning").model_copy(
        update={"mtp_use_repeated_layer": False, "mtp_num_layers": 2}
    )
    assert cfg.mtp_weight_blocks(2) == 2
    assert model_params(cfg).mtp == 2 * mtp_layer_params(cfg).total


# Published figures: (total without MTP, within 1 %; total with MTP as the hub lists the BF16 checkpoint, to its
# rounding; active without the input embedding, NVIDIA's convention (the Nano report: 3.2B active, 3.6B with
# embeddings), to the published rounding).
PUBLISHED = [
    ("nemotron-3-super", 120e9, 124e9, 12e9, 0.5e9),
    ("nemotron-3-ultra", 550e9, 561e9, 55e9, 0.55e9),
    ("nemotron-3.5-lightning", 31.6e9, None, 3.2e9, 0.032e9),
]


@pytest.mark.parametrize(("model", "total", "with_mtp", "active", "tolerance"), PUBLISHED)
def test_counts_match_the_published_figures(model, total, with_mtp, active, tolerance):
    spec = load_model(model)
    p = model_params(spec)
    assert abs(p.total / total - 1) < 0.01, p.total
    if with_mtp is not None:
        assert abs(p.total + p.mtp - with_mtp) <= 0.5e9, p.total + p.mtp
    input_embedding = spec.hidden_size * spec.vocab_size  # untied: the output layer is in the active count
    assert abs(p.active - input_embedding - active) <= tolerance, p.active - input_embedding
    assert spec.published_total_params == total and spec.sources["published"]
    assert "aiconfigurator" in spec.sources["config_json"]


def test_lightning_trunk_is_nanos():
    nano, lightning = load_model("nemotron-3-nano"), load_model("nemotron-3.5-lightning")
    assert nano.hybrid_layer_pattern == lightning.hybrid_layer_pattern
    assert model_params(nano).total == model_params(lightning).total
    assert nano.mtp_num_layers == 0 and model_params(lightning).mtp > 1.3e9
    assert abs(model_params(lightning).active / 3.6e9 - 1) < 0.01  # 3.6B with both tables (the Nano report)
