"""Families whose attention layers come in two head shapes (issue 15): Gemma-4 26B-A4B, Step-3.5-Flash and
MiMo-V2-Flash, with Sarvam's two bridges. Counts are hand-computed from the shapes; the rules are the ones Megatron
Bridge 0.6.2's providers enforce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.rules import run
from moe_long_context.engine.rules.cp import max_a2a_size
from moe_long_context.errors import InputError
from moe_long_context.memory.activations import layer_inventory, shard_of
from moe_long_context.model.catalog import load_model
from moe_long_context.model.hf import spec_from_hf_config
from moe_long_context.model.params import attention_params, megatron_only_params, model_params
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout
from moe_long_context.tools.size_cp import SizeCpRequest, size_cp

DATA = Path(__file__).parent / "data" / "hf"


def config(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def errors(model: str, **settings) -> set[str]:
    base = {"gpu": "h100", "num_gpus": 8, "seq_len": 4096, "ep": 8}
    ctx = build_context(TrainingConfig(model=model, **{**base, **settings}))
    return {f.code for f in run(ctx) if f.severity.value == "error"}


def test_gemma4_global_layers_have_their_own_shape_and_k_equals_v():
    spec = load_model("gemma-4-26b-a4b")
    assert spec.attention_layer_types.count("full") == 5 and spec.attention_layer_types[5] == "full"
    h = 2816
    # sliding: 16 query heads, 8 KV heads of 256; global: 16 query heads, 2 KV heads of 512
    assert attention_params(spec, "sliding") == (h * (16 * 256 + 8 * 2 * 256) + 16 * 256 * h, h + 2 * 256)
    assert attention_params(spec, "full") == (h * (16 * 512 + 2 * 2 * 512) + 16 * 512 * h, h + 2 * 512)
    # Megatron keeps the V slice of linear_qkv on the 5 global layers; the checkpoint has no v_proj there
    assert megatron_only_params(spec, "full") == h * 2 * 512 and megatron_only_params(spec, "sliding") == 0
    p = model_params(spec)
    assert p.total - p.checkpoint_total == 5 * h * 2 * 512
    # the dense MLP of 2112 runs beside 128 experts of 704 on every layer (Bridge maps it as the shared expert)
    assert spec.moe_shared_expert_intermediate_size == 2112 and spec.num_dense_layers == 0


def test_step35_megatron_allocation_matches_bridges_verification_card():
    """Bridge's Step-3.5-Flash verification card reports 199,997,706,240 parameters after import, MTP included
    (examples/model_verification_cards/step35-flash/card.yaml)."""
    spec = load_model("step-3.5-flash")
    p = model_params(spec)
    assert p.total + p.mtp == 199_997_706_240
    h = 4096
    # full layers: 64 heads, with the full-width gate Bridge builds on Megatron Core 0.19.2 (no head-wise gate)
    full = h * (64 * 128 + 64 * 128 + 8 * 2 * 128) + 64 * 128 * h
    sliding = h * (96 * 128 + 96 * 128 + 8 * 2 * 128) + 96 * 128 * h
    assert attention_params(spec, "full")[0] == full and attention_params(spec, "sliding")[0] == sliding
    assert megatron_only_params(spec, "full") == h * 64 * 128 - h * 64  # the checkpoint's gate is h x heads
    # the 3 MTP layers are dense (Bridge's dense MTP spec), shaped like the dense sliding layer 1
    assert spec.mtp_num_layers == 3 and spec.mtp_layer_index == 1 and not spec.moe_layers[1]


def test_mimo_v2_flash_narrow_v_and_sinks_on_the_sliding_layers_only():
    spec = load_model("mimo-v2-flash")
    h = 4096
    full = h * (64 * 192 + 4 * (192 + 128)) + 64 * 128 * h  # Q/K 192, V 128
    sliding = h * (64 * 192 + 8 * (192 + 128)) + 64 * 128 * h + 64  # 8 KV heads and one sink per head
    assert attention_params(spec, "full")[0] == full and attention_params(spec, "sliding")[0] == sliding
    assert spec.has_softmax_sinks and not spec.softmax_sinks  # the trunk (full) layers have none
    experts = model_params(spec).experts
    assert experts == 47 * 256 * 3 * h * 2048  # "47 MoE layers ... about 302.8B expert parameters"
    ctx = build_context(TrainingConfig(model="mimo-v2-flash", gpu="h100", num_gpus=8, seq_len=4096, ep=8))
    saved = {s.name: s.bytes for s in layer_inventory(ctx, shard_of(ctx), 0)}
    assert saved["Q, K, V (core-attention inputs)"] == 2 * ((64 + 4) * 192 + 4 * 128) * 4096


def test_mimo_v2_flash_has_no_context_parallelism():
    assert "PROVIDER_NO_CP" in errors("mimo-v2-flash", cp=2, num_gpus=16)
    assert "PROVIDER_TP_KV_HEADS" in errors("mimo-v2-flash", tp=8)  # 4 KV heads on the full layers
    assert not {"PROVIDER_NO_CP", "PROVIDER_TP_KV_HEADS"} & errors("mimo-v2-flash", tp=4)
    result = size_cp(SizeCpRequest(model="mimo-v2-flash", gpu="h100", seq_len=131072))
    assert result.cp == 1 and "largest legal CP is 1" in result.reason
    assert "Bridge provider allows CP <= 1" in result.findings[0].message
    plans = plan_layout(PlanLayoutRequest(model="mimo-v2-flash", gpu="h100", num_gpus=128, seq_len=32768))
    assert plans.plans and all(
        p.settings.get("cp", 1) == 1 and p.settings.get("tp", 1) <= 4 for p in plans.plans
    )


def test_gemma4_moe_refuses_graphs_shared_expert_overlap_and_layernorm_recompute():
    assert "GEMMA4_MOE_CUDA_GRAPHS" in errors(
        "gemma-4-26b-a4b", cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"]
    )
    assert "GEMMA4_MOE_SHARED_EXPERT_OVERLAP" in errors("gemma-4-26b-a4b", moe_shared_expert_overlap=True)
    assert "GEMMA4_MOE_LAYERNORM_RECOMPUTE" in errors(
        "gemma-4-26b-a4b", recompute_granularity="selective", recompute_modules=["layernorm", "moe_act"]
    )
    assert not errors("gemma-4-26b-a4b", recompute_granularity="selective", recompute_modules=["moe_act"])
    # the same settings on another family raise none of them
    assert not {"GEMMA4_MOE_CUDA_GRAPHS", "GEMMA4_MOE_SHARED_EXPERT_OVERLAP"} & errors(
        "qwen3-30b-a3b", moe_shared_expert_overlap=True, cuda_graph_impl="transformer_engine",
        cuda_graph_modules=["attn"],
    )  # fmt: skip
    plans = plan_layout(PlanLayoutRequest(model="gemma-4-26b-a4b", gpu="h100", num_gpus=16, seq_len=32768))
    assert plans.plans and all(p.settings.get("cuda_graph_impl", "none") == "none" for p in plans.plans)


def test_ulysses_is_bounded_by_the_smallest_head_shape():
    """Gemma-4's global layers have 2 KV heads: a2a CP stops at 2, so long contexts go to all_gather (sliding
    windows allow a2a or all_gather only in TE 2.14). Step-3.5's 8 KV heads on both shapes allow a2a up to 8."""
    gemma, step = load_model("gemma-4-26b-a4b"), load_model("step-3.5-flash")
    assert max_a2a_size(gemma, 1) == 2 and max_a2a_size(step, 1) == 8 and max_a2a_size(step, 8) == 1
    assert "CP_A2A_HEADS" in errors("gemma-4-26b-a4b", cp=4, num_gpus=32, cp_comm_type="a2a")
    ctx = build_context(
        TrainingConfig(
            model="gemma-4-26b-a4b",
            gpu="h100",
            num_gpus=16,
            seq_len=65536,
            tp=4,
            cp=2,
            ep=8,
            cp_comm_type="a2a",
        )
    )
    message = next(f.message for f in run(ctx) if f.code == "CP_A2A_HEADS")
    assert "4 query and 1 KV heads per rank on its full-attention layers" in message  # 2 KV heads, replicated
    assert not {"CP_A2A_HEADS"} & errors("gemma-4-26b-a4b", cp=2, num_gpus=16, cp_comm_type="a2a")
    assert (
        size_cp(SizeCpRequest(model="gemma-4-26b-a4b", gpu="h100", seq_len=131072)).cp_comm_type
        == "all_gather"
    )


def test_tp_must_divide_every_shapes_heads():
    codes = errors("step-3.5-flash", tp=64, num_gpus=64)  # 64 full heads divide, 96 sliding heads do not
    assert "TP_DIVIDES_HEADS" in codes
    ctx = build_context(
        TrainingConfig(model="step-3.5-flash", gpu="h100", num_gpus=64, seq_len=4096, tp=64, ep=8)
    )
    message = next(f.message for f in run(ctx) if f.code == "TP_DIVIDES_HEADS")
    assert "96" in message and "layer types" in message


def test_sarvam_bridges():
    s30, s105 = load_model("sarvam-30b"), load_model("sarvam-105b")
    assert s30.family == "sarvam_moe" and (s30.num_attention_heads, s30.num_query_groups, s30.head_dim) == (
        64,
        4,
        64,
    )
    assert s30.moe_shared_expert_intermediate_size == 1024 and s30.num_dense_layers == 1 and s30.qk_layernorm
    assert s105.is_mla and s105.q_lora_rank is None and s105.kv_lora_rank == 512
    # the MLA bridge never reads q_lora_rank, so a config that sets it still builds without query LoRA
    assert spec_from_hf_config({**config("sarvam-105b.json"), "q_lora_rank": 1536}).q_lora_rank is None


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("gemma-4-26b-a4b-vlm.json", {"enable_moe_block": False}, r"model\.enable_moe_block=False .*dense Gemma-4"),
        ("mimo-v2-flash.json", {"swa_num_attention_heads": 32},
         r"model\.swa_num_attention_heads=32 .*num_attention_heads=64.*mimo_v2_flash_bridge\.py"),
        ("mimo-v2-flash.json", {"hybrid_layer_pattern": [0, 2] * 24}, r"model\.hybrid_layer_pattern"),
        ("mimo-v2-flash.json", {"moe_layer_freq": [1, 0] + [1] * 46}, r"model\.moe_layer_freq"),
        ("step-3.5-flash.json", {"layer_types": ["full_attention"] * 47}, r"model\.layer_types.*45 or 48"),
        ("step-3.5-flash.json", {"moe_layers_enum": "0,1,5"}, r"model\.moe_layers_enum"),
        ("step-3.5-flash.json", {"attention_other_setting": {"attention_type": "sliding_attention",
                                                            "num_attention_heads": 96, "num_attention_groups": 7}},
         r"model\.attention_other_setting\.num_attention_groups=7"),
    ],
)  # fmt: skip
def test_inconsistent_shapes_are_refused_by_key(name, change, message):
    cfg = config(name)
    target = cfg.get("text_config", cfg)
    target.update(change)
    with pytest.raises(InputError, match=message):
        spec_from_hf_config(cfg)


def test_step35_layer_types_may_list_the_mtp_layers():
    cfg = config("step-3.5-flash.json")
    assert len(cfg["layer_types"]) == 48  # 45 decoder + 3 MTP entries, as the hub writes them
    spec = spec_from_hf_config(cfg)
    assert (
        spec.attention_layer_types.count("full") == 12 and spec.attention_layer_types.count("sliding") == 33
    )
    assert spec_from_hf_config({**cfg, "layer_types": cfg["layer_types"][:45]}) == spec
    no_types = spec_from_hf_config({k: v for k, v in cfg.items() if k != "layer_types"})
    assert set(no_types.attention_layer_types) == {"full"} and not no_types.attention_shapes


def test_models_command_shows_the_checkpoint_and_megatron_totals(capsys):
    from moe_long_context.faces.cli import main

    assert main(["models", "step-3.5-flash", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["parameters"]
    p = model_params(load_model("step-3.5-flash"))
    assert counts["total (checkpoint)"] == p.checkpoint_total and counts["total"] == p.total
    assert counts["megatron-only (in total)"] == p.total - p.checkpoint_total > 2e9
    assert main(["models", "sarvam-30b", "--json"]) == 0
    assert "total (checkpoint)" not in json.loads(capsys.readouterr().out)["parameters"]  # nothing differs


def test_step35_warns_that_megatron_core_0_19_has_one_rope_base():
    """Bridge 0.6.2 sets rotary_base = rope_theta[0] and stores rotary_base_per_layer, which no Megatron Core
    0.19.2 code reads (step35_bridge.py:319-322): a warning, on Step-3.5 only, that changes no count."""
    ctx = build_context(TrainingConfig(model="step-3.5-flash", gpu="h100", num_gpus=64, seq_len=4096, ep=8))
    found = [f for f in run(ctx) if f.code == "STEP35_ROPE_PER_LAYER"]
    assert len(found) == 1 and found[0].severity.value == "warning" and "#4473" in found[0].message
    other = build_context(TrainingConfig(model="mimo-v2-flash", gpu="h100", num_gpus=64, seq_len=4096, ep=8))
    assert "STEP35_ROPE_PER_LAYER" not in {f.code for f in run(other)}


@pytest.mark.parametrize(
    ("model", "overrides", "num_gpus", "fixed"),
    [
        ("gemma-4-26b-a4b",
         ["model.tensor_model_parallel_size=2", "model.expert_model_parallel_size=8",
          "model.cuda_graph_impl=transformer_engine", "model.cuda_graph_modules=[attn]",
          "model.moe_shared_expert_overlap=true", "model.recompute_granularity=selective",
          "model.recompute_modules=[layernorm,moe_act]", "model.seq_length=32768", "model.sequence_parallel=true"],
         16, {"GEMMA4_MOE_CUDA_GRAPHS", "GEMMA4_MOE_LAYERNORM_RECOMPUTE", "GEMMA4_MOE_SHARED_EXPERT_OVERLAP"}),
        ("mimo-v2-flash",
         ["model.tensor_model_parallel_size=8", "model.context_parallel_size=2", "model.expert_model_parallel_size=8",
          "model.seq_length=8192", "model.sequence_parallel=true", "model.cp_comm_type=a2a"],
         64, {"PROVIDER_TP_KV_HEADS", "PROVIDER_NO_CP"}),
    ],
)  # fmt: skip
def test_provider_errors_are_repaired_and_the_repair_lints_clean(model, overrides, num_gpus, fixed):
    from moe_long_context.tools.lint_config import LintConfigRequest, lint_config

    first = lint_config(
        LintConfigRequest(bridge_overrides=overrides, model=model, gpu="h100", num_gpus=num_gpus)
    )
    assert fixed <= {f.code for f in first.fixes}
    again = lint_config(
        LintConfigRequest(bridge_overrides=first.corrected, model=model, gpu="h100", num_gpus=num_gpus)
    )
    assert not [f.code for f in again.findings if f.severity.value == "error"]


def test_attention_flops_use_each_layer_types_own_heads():
    """Core attention per token: 2 x heads x (d_qk + d_v) / 2 x keys. Gemma-4's sliding layers (16 heads of 256)
    count their own shape over the window's mean causal context, 2W - W (W - 1) / T keys; its global layers
    (16 heads of 512) twice the width over the whole sequence."""
    from moe_long_context.engine.step_time import layer_flops_per_token

    spec, seq = load_model("gemma-4-26b-a4b"), 131072
    sliding = layer_flops_per_token(spec, 0, seq) - layer_flops_per_token(spec, 0, 1)
    assert sliding == pytest.approx(2 * 16 * 256 * (2 * 1024 - 1024 * 1023 / seq - 1), rel=1e-12)
    full = layer_flops_per_token(spec, 5, seq) - layer_flops_per_token(spec, 5, 1)
    assert full == 2 * 16 * 512 * (seq - 1)


def test_model_flops_count_sliding_windows_as_bridge_does():
    """Megatron Bridge 0.6.2 counts a sliding-window layer's core attention over its mean causal context
    (flop_utils.py:1031-1043); Megatron-LM's training.py would count GPT-OSS's 18 windowed layers over the whole
    4K sequence, 5 % more. By hand at 4096: 18 full + 18 windowed (W = 128) attention layers, 128 experts top-4 of
    2880 x 2880 SwiGLU, logits over 201,088; the Bridge runs' own TFLOP/s / tokens/s give 32.58-32.63 GFLOP."""
    from moe_long_context.engine.step_time import model_flops_per_token

    spec, seq = load_model("gpt-oss-120b"), 4096
    h, q, kv, w = 2880, 64 * 64, 8 * 64, 128
    proj = h * (q + 2 * kv) + q * h
    attention = 18 * (proj + q * seq) + 18 * (proj + q * (2 * w - w * (w - 1) / seq))
    moe = 36 * (h * 128 + 4 * 3 * h * 2880)
    by_hand = 3 * 2 * (attention + moe + h * 201088)
    assert model_flops_per_token(spec, seq, 0) == pytest.approx(by_hand, rel=1e-3)
    for tflops, tokens in (
        (934, 28672),
        (535, 16398),
        (1077, 33017),
    ):  # perf summary 26.08, cards GB200/GB300
        assert model_flops_per_token(spec, seq, 0) == pytest.approx(tflops * 1e12 / tokens, rel=0.006)


def test_gemma4_logit_softcapping_keeps_one_more_logits_tensor():
    """scale x tanh(logits / scale) (modeling_gemma4.py _logit_softcapping): tanh keeps its BF16 output, one
    tokens x vocab / TP tensor: 2 B x 262,144 / 4 x 4096 = 0.5 GiB on the loss stage at the SFT recipe's shape."""
    from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory

    assert load_model("gemma-4-26b-a4b").final_logit_softcapping == 30.0
    result = estimate_memory(
        EstimateMemoryRequest(model="gemma-4-26b-a4b", gpu="h100", num_gpus=8, seq_len=4096, tp=4, ep=8, etp=1,
                              mbs=1, gbs=32, recompute_granularity="full", recompute_method="uniform",
                              recompute_num_layers=1)
    )  # fmt: skip
    rows = {c["component"]: c["gib"] for c in result.model_dump()["breakdown"][-1]["components"]}
    assert rows["activations: logit softcapping (tanh output)"] == 0.5
    bad = {**config("gemma-4-26b-a4b-vlm.json")}
    bad["text_config"] = {**bad["text_config"], "final_logit_softcapping": "30"}
    with pytest.raises(InputError, match=r"model\.final_logit_softcapping='30'"):
        spec_from_hf_config(bad)


ODD_VALUES = [None, 0, -1, 3.5, "x", "3,4", [], [1, 0], {}, {"a": 1}, True, 10**9, [None], float("nan")]
NEW_KEYS = ["model_type", "architectures", "attention_other_setting", "moe_layers_enum", "hybrid_layer_pattern",
            "moe_layer_freq", "is_moe_layer", "layer_types", "swa_num_key_value_heads", "global_head_dim",
            "num_global_key_value_heads", "attention_k_eq_v", "final_logit_softcapping", "share_expert_dim",
            "num_attention_groups", "v_head_dim", "num_shared_experts", "text_config"]  # fmt: skip


@pytest.mark.parametrize(
    "name", ["gemma-4-26b-a4b-vlm.json", "step-3.5-flash.json", "mimo-v2-flash.json", "sarvam-105b.json"]
)
def test_odd_values_of_the_new_keys_are_refused_by_name_never_a_crash(name):
    for key in NEW_KEYS:
        for value in ODD_VALUES:
            cfg = config(name)
            target = cfg["text_config"] if key in cfg.get("text_config", {}) else cfg
            target[key] = value
            try:
                spec_from_hf_config(cfg)
            except InputError as exc:
                assert str(exc).startswith("model"), (key, value, str(exc))
