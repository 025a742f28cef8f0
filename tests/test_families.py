"""The families built from layer kinds the engine knows (issue 15): config.json loading, presets, counts, tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.errors import InputError
from moe_long_context.faces.cli import main
from moe_long_context.memory.activations import layer_inventory, shard_of
from moe_long_context.model.catalog import load_model
from moe_long_context.model.hf import spec_from_hf_config, supported_model_types
from moe_long_context.model.params import layer_params, model_params
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout
from moe_long_context.tools.size_cp import SizeCpRequest, size_cp

DATA = Path(__file__).parent / "data"
FIXTURES = sorted((DATA / "hf").glob("*.json"))

# Published totals and actives, and what each figure counts. "total" excludes MTP (as model_params does) and counts
# what the checkpoint holds (model_params' checkpoint_total: Megatron may allocate more, e.g. Step-3.5's gate);
# where a card counts without the embedding and output tables, "active" (and with the last flag "total" too) is
# compared without them. A card figure given to one or two digits ("10B") is matched to that rounding, never closer.
#   (id, total, active, active without embeddings?, active tolerance, total without embeddings?)
# fmt: off
PUBLISHED = [
    ("glm-4.5", 355e9, 32e9, True, 0.01, False),
    ("glm-4.5-air", 106e9, 12e9, True, 0.5e9 / 12e9, False),  # "12 billion": rounded
    ("glm-4.7", 355e9, 32e9, True, 0.01, False),  # GLM-4.5's figures: same architecture (unconfirmed for 4.7)
    ("glm-4.7-flash", 30e9, 3e9, True, 0.5e9 / 3e9, False),  # "30B-A3B" from the name
    ("deepseek-v2", 236e9, 21e9, False, 0.5e9 / 21e9, False),
    ("deepseek-v2-lite", 15.7e9, 2.4e9, True, 0.06, False),  # 2.28B without the tables, 2.49B with the input one
    ("qwen3.5-35b-a3b", 35e9, 3e9, False, 0.5e9 / 3e9, False),  # language model only (the hub adds vision)
    ("qwen3.5-397b-a17b", 397e9, 17e9, False, 0.5e9 / 17e9, False),
    ("minimax-m2", 230e9, 10e9, True, 0.5e9 / 10e9, False),
    ("olmoe-1b-7b", 6.9e9, 1.3e9, False, 0.05e9 / 1.3e9, False),
    ("ling-flash-2.0", 102_889_697_280, 6.1e9, False, 0.01, False),  # the checkpoint's count; card: 100B
    ("ernie-4.5-21b-a3b", None, 3e9, False, 0.5e9 / 3e9, False),  # 21.8B computed: the card's 21B truncates
    ("mixtral-8x7b", 46.7e9, 12.9e9, False, 0.01, False),
    ("qwen1.5-moe-a2.7b", 14.3e9, 2.7e9, False, 0.01, False),
    ("gemma-4-26b-a4b", 25.2e9, 3.8e9, False, 0.05e9 / 3.8e9, False),
    ("step-3.5-flash", 196.81e9, 11e9, True, 0.5e9 / 11e9, False),  # "~11B": without the 1.06B of tables
    ("mimo-v2-flash", 309e9, 15e9, False, 0.5e9 / 15e9, False),
    ("sarvam-30b", 30e9, 2.4e9, True, 0.05e9 / 2.4e9, True),  # both figures leave out the 2.1B of tables
    ("sarvam-105b", 105e9, 10.3e9, True, 0.01, False),  # total within 1 % only with the tables
    ("k-exaone-236b-a23b", 236e9, 23e9, False, 0.03, False),  # "A23B": 23.67B with both tables, 22.73B with one
]
# fmt: on


@pytest.mark.parametrize(
    ("model", "total", "active", "without_embeddings", "tolerance", "total_without"), PUBLISHED
)
def test_preset_counts_match_the_published_figures(
    model, total, active, without_embeddings, tolerance, total_without
):
    spec = load_model(model)
    p = model_params(spec)
    if total is not None:
        counted_total = p.checkpoint_total - (p.embedding if total_without else 0)
        assert abs(counted_total / total - 1) < 0.01, counted_total
    counted = p.checkpoint_active - p.embedding if without_embeddings else p.checkpoint_active
    assert abs(counted / active - 1) <= tolerance, counted
    assert spec.published_total_params and spec.sources["published"]
    assert spec.sources["config_json"]  # where the values were read, since the hub itself was not


# The config.json fixtures of families without a preset, against their model cards' (rounded) figures.
FIXTURE_PUBLISHED = [
    ("dots.llm1", 142e9, 14e9),  # rednote-hilab/dots.llm1.base: 142B total, 14B active
    ("hunyuan-a13b", 80e9, 13e9),  # tencent/Hunyuan-A13B: 80B total, 13B active
    ("qwen2-57b-a14b", 57e9, 14e9),  # Qwen/Qwen2-57B-A14B: 57B total, 14B active
    ("glm-4.6", 355e9, 32e9),  # zai-org/GLM-4.6: GLM-4.5's 355B / 32B
]


@pytest.mark.parametrize(("name", "total", "active"), FIXTURE_PUBLISHED)
def test_fixture_counts_match_the_published_figures(name, total, active):
    p = model_params(load_model(str(DATA / "hf" / f"{name}.json")))
    assert abs(p.checkpoint_total / total - 1) < 0.01, p.checkpoint_total
    assert (
        abs(p.checkpoint_active - active) <= 0.5e9 or abs(p.checkpoint_active - p.embedding - active) <= 0.5e9
    )


def test_counts_equal_what_the_checkpoints_hold_to_the_parameter():
    """Counts published to the parameter: Ling-flash-2.0's safetensors metadata (102,889,697,280 BF16 values, plus
    7,936 FP32 expert-bias buffers that are not parameters), the BF16 gpt-oss exports and GLM-5's transformers
    reload in Bridge's verification cards. ERNIE-4.5's card truncates 21.8B to 21B."""
    ernie, ling = load_model("ernie-4.5-21b-a3b"), load_model("ling-flash-2.0")
    assert 21e9 <= model_params(ernie).total < 22e9 and "truncates" in ernie.sources["published"]
    assert model_params(ling).total == 102_889_697_280 and "102,889,697,280" in ling.sources["published"]
    assert ling.num_moe_layers * ling.num_experts == 7_936
    hub = load_model(str(DATA / "hf" / "ling-flash-2.0-hub.json"))  # the hub's model_type: bailing_moe
    assert hub.family == "bailing_moe_v2" and model_params(hub).total == 102_889_697_280
    for model, count in (("gpt-oss-120b", 116_829_156_672), ("gpt-oss-20b", 20_914_757_184),
                         ("glm-5", 743_911_199_232)):  # fmt: skip
        assert model_params(load_model(model)).checkpoint_total == count, model


def test_layer_kinds_add_their_parameters():
    glm, olmoe, qwen15 = load_model("glm-4.5"), load_model("olmoe-1b-7b"), load_model("qwen1.5-moe-a2.7b")
    # GLM-4.5: QKV bias (96 + 2 x 8 heads of 128) and per-head QK norm (2 x 128) on GQA 96/8 heads of 128
    h, n, g, d = 5120, 96, 8, 128
    qkv = h * (n * d + 2 * g * d) + (n * d + 2 * g * d)
    assert layer_params(glm, 0).attention == qkv + n * d * h
    assert layer_params(glm, 0).replicated == 2 * h + 2 * d  # two norms + q/k norm weights
    assert glm.moe_layers[:4] == (False, False, False, True) and glm.mtp_num_layers == 1
    # OLMoE: the Q and K norms span every head (Bridge's OLMoE layer spec): 16 x 128 + 16 x 128
    assert layer_params(olmoe, 0).attention == 4 * 2048 * 2048 + 2 * 2048
    # Qwen1.5-MoE: one shared expert of 5632 with a sigmoid gate (h weights), QKV bias
    moe = layer_params(qwen15, 0)
    assert moe.mlp == 3 * 2048 * 5632
    assert moe.replicated == 2 * 2048 + 60 * 2048 + 2048  # norms, router, shared-expert gate


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_fixture_config_json_loads(path):
    spec = load_model(str(path))
    assert spec.family in supported_model_types() and spec.num_experts >= 8
    assert model_params(spec).total > 1e9


JOBS = [
    ("glm-4.5", 128), ("glm-4.5-air", 32), ("glm-4.7", 128), ("glm-4.7-flash", 16), ("deepseek-v2", 128),
    ("deepseek-v2-lite", 8), ("qwen3.5-35b-a3b", 16), ("qwen3.5-397b-a17b", 256), ("minimax-m2", 128),
    ("olmoe-1b-7b", 8), ("ling-flash-2.0", 32), ("ernie-4.5-21b-a3b", 8), ("mixtral-8x7b", 16),
    ("qwen1.5-moe-a2.7b", 8), ("gemma-4-26b-a4b", 16), ("step-3.5-flash", 128), ("mimo-v2-flash", 128),
    ("sarvam-30b", 16), ("sarvam-105b", 64), ("k-exaone-236b-a23b", 64),
    *((str(p), 256 if "ultra" in p.stem else 64 if "mimo" not in p.stem and "step" not in p.stem else 128)
      for p in FIXTURES),
]  # fmt: skip


@pytest.mark.parametrize(("model", "num_gpus"), JOBS, ids=[Path(m).stem for m, _ in JOBS])
def test_size_cp_and_plan_layout_answer_at_32k(model, num_gpus):
    cp = size_cp(SizeCpRequest(model=model, gpu="h100", seq_len=32768))
    assert cp.cp >= 1 and (cp.cp_comm_type or cp.cp == 1)
    plans = plan_layout(PlanLayoutRequest(model=model, gpu="h100", num_gpus=num_gpus, seq_len=32768))
    assert plans.plans, plans
    assert plans.plans[0].memory.peak_gib <= 80


def test_qwen35_gdn_heads_bound_tp_times_cp():
    spec = load_model("qwen3.5-35b-a3b")
    assert spec.attention_layer_types.count("linear") == 30 and spec.attention_layer_types[3] == "full"
    assert spec.moe_shared_expert_gate and spec.attention_output_gate and spec.qk_layernorm
    result = lint_config(LintConfigRequest(bridge_overrides=["model.tensor_model_parallel_size=2",
                                                             "model.context_parallel_size=16",
                                                             "model.sequence_parallel=true"],
                                           model="qwen3.5-35b-a3b", gpu="h100", num_gpus=32))  # fmt: skip
    assert "GDN_HEADS_TP_CP" in [f.code for f in result.findings]


def test_text_config_and_layer_types_are_read():
    spec = load_model(str(DATA / "hf" / "qwen3.5-35b-a3b-vlm.json"))
    assert spec.attention_layer_types == load_model("qwen3.5-35b-a3b").attention_layer_types
    assert (
        "text_config" in spec.sources["num_layers"] and "layer_types" in spec.sources["attention_layer_types"]
    )


def test_missing_keys_take_the_family_defaults_not_64():
    spec = spec_from_hf_config({"model_type": "qwen3_5_moe", "text_config": {"hidden_size": 2048}})
    assert spec.head_dim == 256 and spec.num_experts == 256  # transformers' Qwen3_5MoeTextConfig defaults
    assert "transformers qwen3_5_moe/configuration_qwen3_5_moe.py default" in spec.sources["head_dim"]
    olmoe = spec_from_hf_config({"model_type": "olmoe", "hidden_size": 1024, "num_attention_heads": 8})
    assert olmoe.head_dim == 128 and olmoe.num_query_groups == 8  # hidden / heads; kv heads default to heads
    with pytest.raises(InputError, match=r"model\.head_dim.*hidden_size=5120 is not a multiple"):
        spec_from_hf_config({"model_type": "glm4_moe", "hidden_size": 5120, "num_attention_heads": 96})


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"model_type": "glm4_moe", "num_attention_heads": 97, "num_key_value_heads": 8, "head_dim": 128},
         r"model\.num_key_value_heads=8 .*divisor of num_attention_heads=97"),
        ({"model_type": "qwen3_5_moe", "linear_num_key_heads": 16, "linear_num_value_heads": 24},
         r"model\.linear_num_value_heads=24"),
        ({"model_type": "ernie4_5_moe", "moe_k": 65}, r"model\.moe_k=65 .*64 experts of moe_num_experts"),
        ({"model_type": "ernie4_5_moe", "moe_layer_interval": 2}, r"model\.moe_layer_interval=2"),
        ({"model_type": "glm4_moe", "head_dim": 128, "first_k_dense_replace": 46}, r"model\.first_k_dense_replace=46"),
        ({"model_type": "qwen2_moe", "mlp_only_layers": [3]}, r"model\.mlp_only_layers"),
        ({"model_type": "deepseek_v2", "num_experts_per_tok": 6, "moe_layer_freq": 2}, r"model\.moe_layer_freq=2"),
        ({"model_type": "deepseek_v2"}, r"model\.num_experts_per_tok.*must set"),
        ({"model_type": "minimax_m2", "num_hidden_layers": "62"}, r"model\.num_hidden_layers='62'"),
        ({"model_type": "qwen3_5_moe", "layer_types": ["full_attention"]}, r"model\.layer_types.*40 layer types"),
    ],
)  # fmt: skip
def test_inconsistent_values_are_refused_naming_the_key(cfg, message):
    with pytest.raises(InputError, match=message):
        spec_from_hf_config(cfg)


def test_unsupported_family_names_the_ways_that_work():
    with pytest.raises(InputError) as err:
        load_model({"model_type": "deepseek_v4", "num_hidden_layers": 61})
    text = str(err.value)
    assert "model.model_type='deepseek_v4'" in text
    assert all(t in text for t in ("glm4_moe", "qwen3_5_moe", "deepseek_v3", "mixtral"))
    assert "Megatron-LM flags" in text and "YAML file of ModelSpec fields" in text


def test_yaml_spec_is_a_model_argument(tmp_path):
    path = tmp_path / "my-moe.yaml"
    fields = dict(num_layers=8, hidden_size=1024, vocab_size=32000, tie_embeddings=False, attention="gqa",
                  num_attention_heads=8, num_query_groups=2, head_dim=128, ffn_hidden_size=4096, num_experts=16,
                  moe_router_topk=2, moe_ffn_hidden_size=512)  # fmt: skip
    path.write_text(json.dumps(fields))  # JSON is YAML
    spec = load_model(str(path))
    assert spec.family == "custom" and spec.attention_layer_types == ("full",) * 8
    assert spec.sources["num_layers"].endswith("my-moe.yaml: num_layers")
    assert size_cp(SizeCpRequest(model=str(path), gpu="h100", seq_len=32768)).cp >= 1
    path.write_text(json.dumps({**fields, "moe_router_topk": 17}))
    with pytest.raises(InputError, match=r"^model\.moe_router_topk"):
        load_model(str(path))
    path.write_text(json.dumps({**fields, "num_layer": 8}))
    with pytest.raises(InputError, match=r"model\.num_layer"):
        load_model(str(path))


def test_models_command_shows_counts_for_a_config_json(capsys):
    assert main(["models", str(DATA / "hf" / "glm-4.6.json")]) == 0
    out = capsys.readouterr().out
    total = model_params(load_model(str(DATA / "hf" / "glm-4.6.json"))).total
    assert f"{total / 1e9:.2f}B" in out and "active" in out
    assert main(["models", "glm-4.5", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["parameters"]
    assert counts["total"] == model_params(load_model("glm-4.5")).total


def test_the_public_glm45_slime_launch_lints_without_a_refusal():
    """THUDM/slime's GLM-4.5 flags (tests/data/glm45_355b_slime.sh) lint: the model is recognised, and the
    only launch errors are slime's own flags and real Megatron-LM rules (slime batches by tokens, so the script has
    no --micro-batch-size, which pretrain_gpt.py 0.19 requires: arguments.py:675)."""
    text = (DATA / "glm45_355b_slime.sh").read_text()
    result = lint_config(LintConfigRequest(megatron_args=text, gpu="h100", num_gpus=64))
    codes = {f.code: f for f in result.findings}
    assert "glm-4.5" in codes["MODEL_RECOGNISED"].message and "GLM-4.7" in codes["MODEL_RECOGNISED"].message
    unknown = {k for f in result.findings if f.code == "LM_UNKNOWN_FLAG" for k in f.keys}
    assert unknown == {"--actor-num-nodes", "--actor-num-gpus-per-node", "--use-dynamic-batch-size",
                       "--max-tokens-per-gpu"}  # fmt: skip
    errors = {f.code for f in result.findings if f.severity.value == "error"}
    assert errors == {"LM_UNKNOWN_FLAG", "PRECISION_AWARE_NEEDS_DISTOPT", "LM_MICRO_BATCH_SIZE_MISSING"}


def test_full_width_qk_norm_keeps_one_statistic_per_token():
    """OLMoE's Q/K norms span every head: the saved pre-norm Q and K carry 2 statistics per token, not one per
    head; the BF16 copies are the same size as with per-head norms."""
    ctx = build_context(TrainingConfig(model="olmoe-1b-7b", gpu="h100", num_gpus=8, seq_len=32768, ep=8))
    saved = {s.name: s.bytes for s in layer_inventory(ctx, shard_of(ctx), 0)}
    tokens, heads, d = 32768, 16, 128
    assert saved["Q and K before their full-width norms"] == (2 * d * 2 * heads + 2 * 4) * tokens


def test_qk_norm_and_qkv_bias_change_nothing_for_cp(tmp_path):
    """Partial rotary (not a spec field: it changes no count), QK norm and QKV bias leave size_cp's answer alone."""
    glm = load_model("glm-4.5")
    base = {
        k: v for k, v in glm.model_dump().items() if k not in ("id", "name", "family", "sources", "aliases")
    }
    answers = []
    for extra in ({}, {"qk_layernorm": False, "add_qkv_bias": False}):
        path = tmp_path / f"glm-{len(answers)}.yaml"
        path.write_text(
            json.dumps({**base, **extra, "attention_layer_types": list(glm.attention_layer_types)})
        )
        result = size_cp(SizeCpRequest(model=str(path), gpu="h100", seq_len=131072))
        answers.append((result.cp, result.cp_comm_type, result.hierarchical_cp_sizes))
    assert answers[0] == answers[1]
