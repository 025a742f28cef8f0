"""Issue 16 families: glm_moe_dsa, deepseek_v32 and nemotron_h load from config.json; DeepSeek-V4, Kimi-Linear and
Granite-MoE-Hybrid are refused with the reason; parameter counts by hand and against the published totals."""

from __future__ import annotations

import pytest

from moe_long_context.errors import InputError
from moe_long_context.model.catalog import load_model
from moe_long_context.model.hf import spec_from_hf_config
from moe_long_context.model.params import layer_params, model_params

NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"


def test_nemotron_nano_layer_sequence_comes_from_the_pattern():
    spec = load_model("nemotron-3-nano")
    assert spec.family == "nemotron_h" and spec.is_hybrid and spec.num_layers == 52
    types = spec.attention_layer_types
    assert types.count("mamba") == 23 and types.count("full") == 6 and types.count("none") == 23
    # the six attention layers (0-based), as the pattern places them
    assert [i for i, t in enumerate(types) if t == "full"] == [5, 12, 19, 26, 33, 42]
    assert sum(spec.moe_layers) == 23 and spec.moe_layers[1] and not spec.moe_layers[0]
    assert spec.mamba_conv_kernel == 4 and "d_conv=4" in spec.sources["mamba_conv_kernel"]


def test_nemotron_nano_layers_by_hand():
    spec = load_model("nemotron-3-nano")
    h = 2688
    # Mamba-2 (mamba_mixer.py:282): in_proj h -> 2*4096 + 2*8*128 + 64; conv over 4096 + 2048 channels, width 4, bias;
    # A_log, D, dt_bias per head; gated norm over d_inner; out_proj 4096 -> h; fused input norm h.
    mamba = layer_params(spec, 0)
    assert mamba.attention == h * 10304 + 6144 * 5 + 3 * 64 + 4096 + 4096 * h
    assert mamba.replicated == h and mamba.mlp == mamba.experts == 0
    # MoE layer: squared ReLU (not gated): 128 experts of 2 x h x 1856, a 3712-wide shared expert, the router (its
    # expert-bias correction is a buffer, router.py register_buffer, so not a parameter)
    moe = layer_params(spec, 1)
    assert moe.attention == 0
    assert moe.experts == 128 * 2 * h * 1856 and moe.active_experts == 6 * 2 * h * 1856
    assert moe.mlp == 2 * h * 3712 and moe.replicated == h + h * 128
    # attention layer: GQA 32 heads, 2 groups of 128, no MLP
    attn = layer_params(spec, 5)
    assert attn.attention == h * (32 * 128 + 2 * 2 * 128) + 32 * 128 * h and attn.mlp == attn.experts == 0


def test_dsa_indexer_is_added_to_mla_and_replicated():
    spec = load_model("glm-5")
    assert spec.family == "glm_moe_dsa" and set(spec.attention_layer_types) == {"dsa"}
    assert (spec.dsa_index_n_heads, spec.dsa_index_head_dim, spec.dsa_index_topk) == (32, 128, 2048)
    assert spec.moe_router_score_function == "sigmoid" and spec.mtp_num_layers == 1
    h, n = 6144, 64
    mla = h * 2048 + 2048 * n * 256 + h * (512 + 64) + 512 * n * (192 + 256) + n * 256 * h
    indexer = 2048 * 32 * 128 + h * 128 + 2 * 128 + h * 32  # dsa.py:1158-1206, parallel_mode duplicated
    dense = layer_params(spec, 0)
    assert dense.attention == mla
    assert dense.replicated == h + 2048 + 512 + indexer + h  # input norm, q/kv norms, indexer, pre-MLP norm


@pytest.mark.parametrize(
    ("model", "total", "active", "without_embedding"),
    [
        ("nemotron-3-nano", 31.6e9, 3.6e9, False),
        ("glm-5", 744e9, 40e9, True),  # GLM-5's 40B active leaves out the embedding and output layer
        ("deepseek-v3.2", 671e9, None, False),
    ],
)
def test_parameter_counts_within_one_percent_of_published(model, total, active, without_embedding):
    p = model_params(load_model(model))
    assert abs(p.total / total - 1) < 0.01
    if active is not None:
        engine_active = p.active - (p.embedding if without_embedding else 0)
        assert abs(engine_active / active - 1) < 0.01


def test_glm5_aliases():
    assert load_model("GLM-5.2").id == "glm-5" and load_model("glm-5.1").id == "glm-5"


def nemotron_config(**changes):
    cfg = {
        "model_type": "nemotron_h",
        "hybrid_override_pattern": "M*ME",
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "mamba_num_heads": 8,
        "mamba_head_dim": 32,
        "ssm_state_size": 16,
        "n_groups": 2,
        "intermediate_size": 512,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 128,
        "vocab_size": 1000,
    }
    cfg.update(changes)
    return {k: v for k, v in cfg.items() if v is not None}


def test_layers_block_type_is_read_like_the_pattern():
    cfg = nemotron_config(
        hybrid_override_pattern=None, layers_block_type=["mamba", "attention", "mamba", "moe"]
    )
    spec = spec_from_hf_config(cfg)
    assert spec.hybrid_layer_pattern == "M*ME"
    assert spec.sources["hybrid_layer_pattern"].endswith("layers_block_type")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"hybrid_override_pattern": "M*MX"}, "model.hybrid_override_pattern"),
        ({"num_hidden_layers": 5}, "model.num_hidden_layers"),
        ({"num_nextn_predict_layers": 1}, "model.mtp_hybrid_override_pattern"),  # Bridge raises without it
        (
            {"num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*-"},
            "model.mtp_hybrid_override_pattern",
        ),
        (
            {"num_nextn_predict_layers": 1, "mtp_layers_block_type": ["attention", "ffn"]},
            "model.mtp_layers_block_type",
        ),
        ({"num_nextn_predict_layers": -1}, "model.num_nextn_predict_layers"),
        (
            {
                "num_nextn_predict_layers": 1,
                "mtp_hybrid_override_pattern": "*E",
                "mtp_use_repeated_layer": "yes",
            },
            "model.mtp_use_repeated_layer",
        ),
        ({"mamba_num_heads": None}, "model.mamba_num_heads"),
    ],
)
def test_bad_nemotron_configs_name_the_field(changes, field):
    with pytest.raises(InputError) as err:
        spec_from_hf_config(nemotron_config(**changes))
    assert err.value.field == field


@pytest.mark.parametrize(
    ("model_type", "words"),
    [
        ("deepseek_v4", ["dsv4_hybrid", "deepseek_v4_bridge.py:397", "transformer_config.py:294-295"]),
        ("kimi_linear", ["KDA", "gated_delta_net"]),
        ("granitemoehybrid", ["no bridge"]),
    ],
)
def test_families_core_cannot_build_are_refused_with_the_reason(model_type, words):
    with pytest.raises(InputError) as err:
        spec_from_hf_config({"model_type": model_type, "num_hidden_layers": 4})
    text = str(err.value)
    assert err.value.field == "model.model_type"
    assert all(w in text for w in words), text


@pytest.mark.parametrize(
    "name", ["deepseek-v4-flash", "DeepSeek-V4-Pro", "deepseek_v4", "kimi-linear-48b-a3b"]
)
def test_refused_catalog_names_give_the_reason(name):
    with pytest.raises(InputError) as err:
        load_model(name)
    assert "Megatron Core 0.19.2" in str(err.value)
