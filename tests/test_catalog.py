"""Catalog: presets load, parameter counts match published totals, HF config.json conversion."""

from __future__ import annotations

import json

import pytest

from moe_long_context.errors import InputError
from moe_long_context.model.catalog import gpu_ids, gpus, load_gpu, load_model, model_ids, models
from moe_long_context.model.hf import spec_from_hf_config
from moe_long_context.model.params import layer_params, model_params

EXPECTED_IDS = {
    "deepseek-v3",
    "kimi-k2",
    "qwen3-235b-a22b",
    "qwen3-30b-a3b",
    "qwen3-next-80b-a3b",
    "gpt-oss-120b",
    "gpt-oss-20b",
    "mixtral-8x22b",
    "moonlight-16b-a3b",
    # issue 15: families built from layer kinds the engine already knows (tests/test_families.py)
    "deepseek-v2",
    "deepseek-v2-lite",
    "ernie-4.5-21b-a3b",
    "glm-4.5",
    "glm-4.5-air",
    "glm-4.7",
    "glm-4.7-flash",
    "ling-flash-2.0",
    "minimax-m2",
    "mixtral-8x7b",
    "olmoe-1b-7b",
    "qwen1.5-moe-a2.7b",
    "qwen3.5-35b-a3b",
    "qwen3.5-397b-a17b",
    "deepseek-v3.2",  # issue 16: sparse attention and Mamba hybrids
    "glm-5",
    "nemotron-3-nano",
    "gemma-4-26b-a4b",  # issue 15: two attention shapes, and Sarvam's bridges
    "step-3.5-flash",
    "mimo-v2-flash",
    "sarvam-30b",
    "sarvam-105b",
    "k-exaone-236b-a23b",
    "nemotron-3-super",  # issue 24: LatentMoE and hybrid MTP blocks (tests/test_nemotron3.py)
    "nemotron-3-ultra",
    "nemotron-3.5-lightning",
}


def test_every_catalog_model_and_gpu_is_present():
    assert set(model_ids()) == EXPECTED_IDS
    assert gpu_ids() == ["h100", "h200", "b200", "b300", "gb200", "gb300"]


@pytest.mark.parametrize(
    ("model", "total", "active"),
    [
        ("deepseek-v3", 671e9, None),
        ("kimi-k2", 1.03e12, None),
        ("qwen3-235b-a22b", 235.1e9, 22.2e9),
        ("qwen3-30b-a3b", 30.5e9, 3.35e9),
        ("gpt-oss-120b", 117e9, None),
        ("mixtral-8x22b", 140.6e9, None),
    ],
)
def test_parameter_counts_within_one_percent_of_published(model, total, active):
    p = model_params(load_model(model))
    assert abs(p.total / total - 1) < 0.01
    if active is not None:
        assert abs(p.active / active - 1) < 0.01


def test_deepseek_v3_counts_by_hand():
    spec = load_model("dsv3")
    # MLA, h=7168, n=128, q_lora 1536, kv_lora 512, dqk 128, dr 64, dv 128:
    # q = 7168*1536 + 1536*128*192; kv = 7168*(512+64) + 512*128*256; o = 128*128*7168
    mla = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    dense = layer_params(spec, 0)
    assert dense.attention == mla
    assert dense.mlp == 3 * 7168 * 18432 and dense.experts == 0
    moe = layer_params(spec, 3)
    assert moe.experts == 256 * 3 * 7168 * 2048
    assert moe.mlp == 3 * 7168 * 2048  # one shared expert
    assert moe.active_experts == 8 * 3 * 7168 * 2048
    # the MTP module is counted apart from the 671B (DeepSeek counts it separately too)
    assert 11e9 < model_params(spec).mtp < 12e9


def test_aliases_and_case_insensitive_ids():
    assert load_model("DSV3").id == "deepseek-v3"
    assert load_model("deepseek-ai/DeepSeek-V3").id == "deepseek-v3"
    assert load_model("Qwen3-235B").id == "qwen3-235b-a22b"
    assert load_gpu("H100").id == "h100"
    assert load_gpu("NVIDIA GB200").id == "gb200"


def test_unknown_model_lists_known_ids_and_suggests_closest():
    with pytest.raises(InputError) as err:
        load_model("deepseek-v9")
    text = str(err.value)
    assert "model='deepseek-v9'" in text
    assert "kimi-k2" in text and "did you mean 'deepseek-v3'" in text


def test_unknown_gpu_is_refused_with_the_list():
    with pytest.raises(
        InputError, match=r"gpu='a100' is not allowed: one of b200, b300, gb200, gb300, h100, h200"
    ):
        load_gpu("a100")


def test_model_layer_patterns():
    nxt = load_model("qwen3-next-80b-a3b")
    assert nxt.attention_layer_types.count("full") == 12
    assert nxt.attention_layer_types[3] == "full" and nxt.attention_layer_types[0] == "linear"
    oss = load_model("gpt-oss-120b")
    assert oss.attention_layer_types[:2] == ("sliding", "full") and oss.softmax_sinks
    assert load_model("deepseek-v3").moe_layers[:4] == (False, False, False, True)
    assert load_model("kimi-k2").num_dense_layers == 1


def test_every_field_has_a_source():
    for spec in models():
        # num_hidden_layers, or the per-layer list of a config that gives no count (Nemotron 3 Ultra)
        assert (
            spec.sources["num_layers"]
            .split(" [unconfirmed")[0]
            .endswith(("num_hidden_layers", "layers_block_type"))
        )
        assert "huggingface.co" in spec.sources["num_layers"]
        assert spec.sources.get("published")
    for gpu in gpus():
        assert {"peaks", "usable_hbm_gib", "quant_recipes", "flex_backends"} <= set(gpu.sources)


def test_hf_config_object_and_path(tmp_path):
    cfg = {
        "model_type": "qwen3_moe",
        "num_hidden_layers": 4,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "moe_intermediate_size": 256,
        "num_experts": 16,
        "num_experts_per_tok": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "vocab_size": 1000,
    }
    spec = spec_from_hf_config(cfg)
    assert spec.family == "qwen3_moe" and spec.num_experts == 16 and spec.qk_layernorm
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert load_model(str(path)).num_experts == 16
    assert load_model(cfg).hidden_size == 1024
    assert spec.sources["num_experts"] == "config.json: num_experts"


def test_hf_config_of_other_family_is_refused_clearly():
    with pytest.raises(InputError) as err:
        load_model({"model_type": "llama", "num_hidden_layers": 32})
    assert "model.model_type='llama'" in str(err.value)
    assert "deepseek_v3" in str(err.value) and "mixtral" in str(err.value)


def test_hf_config_missing_key_names_it():
    with pytest.raises(InputError, match=r"model\.n_routed_experts"):
        load_model(
            {
                "model_type": "deepseek_v3",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "vocab_size": 10,
                "num_attention_heads": 2,
                "qk_nope_head_dim": 8,
                "kv_lora_rank": 8,
                "qk_rope_head_dim": 4,
                "v_head_dim": 8,
                "intermediate_size": 64,
                "moe_intermediate_size": 16,
            }
        )


def test_bad_config_path_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"config\.json path"):
        load_model(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="valid JSON"):
        load_model(str(bad))


@pytest.mark.parametrize(
    ("family", "key", "value", "message"),
    [
        (
            "mixtral",
            "num_attention_heads",
            0,
            "model.num_attention_heads=0 is not allowed: an integer from 1",
        ),
        ("qwen3_moe", "hidden_size", "4096", "model.hidden_size='4096' is not allowed"),
        ("deepseek_v3", "num_hidden_layers", 3_000_000_000, "model.num_hidden_layers=3000000000"),
        ("qwen3_next", "full_attention_interval", 0, "model.full_attention_interval=0"),
        ("deepseek_v3", "n_shared_experts", [1], "model.n_shared_experts=[1]"),
        ("gpt_oss", "layer_types", 7, "model.layer_types=7 is not allowed: a list of layer type names"),
    ],
)
def test_hf_config_values_the_converter_computes_with_are_checked_first(family, key, value, message):
    """A mistyped or hostile number is refused by key, not raised inside the arithmetic (or allocated)."""
    cfg = {"model_type": family, "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4}
    with pytest.raises(InputError) as err:
        load_model({**cfg, key: value})
    assert message in str(err.value)
