"""A plan is a claim: what it hands back (each dialect's launch, its findings, what it did not check) must be what
the other tools say about the same settings. Cases found by checking plans against lint and the estimators."""

from __future__ import annotations

import pytest

from moe_long_context.dialects.overrides import architecture_flags, drop_flags, function_flags
from moe_long_context.dialects.tables import megatron_flags
from moe_long_context.engine.config import TrainingConfig
from moe_long_context.model.catalog import load_model, models
from moe_long_context.tools.estimate_throughput import estimate_throughput_config
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout

GLM5 = dict(model="glm-5", gpu="h100", num_gpus=608, seq_len=200000, precision="bf16")


def test_a_dsa_plan_turns_rope_fusion_off_in_both_dialects():
    """MCore asserts DSA runs without RoPE fusion (transformer_config.py:2837-2838) and Megatron-LM turns it on:
    every GLM-5 plan, the published layout's too, writes it off, and its Megatron-LM args lint without errors."""
    r = plan_layout(PlanLayoutRequest(**GLM5, top_n=2))
    assert r.valid
    for plan in r.plans:
        assert plan.settings["apply_rope_fusion"] is False
        assert "--no-rope-fusion" in plan.megatron_args
        assert "model.apply_rope_fusion=false" in plan.bridge_overrides
        linted = lint_config(LintConfigRequest(megatron_args=plan.megatron_args, model="glm-5", gpu="h100",
                                               num_gpus=608))  # fmt: skip
        assert "DSA_ROPE_FUSION" not in {f.code for f in linted.findings}, plan.layout


def test_lint_repairs_rope_fusion_on_a_dsa_launch():
    """The finding's one-flag fix is applied: the corrected launch adds --no-rope-fusion and is clean of it."""
    args = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 19 --context-parallel-size 32 "
            "--expert-model-parallel-size 32 --micro-batch-size 1 --global-batch-size 13 --seq-length 200000 "
            "--cp-comm-type all_gather --recompute-granularity full --recompute-method uniform "
            "--recompute-num-layers 1 --use-distributed-optimizer --bf16")  # fmt: skip
    r = lint_config(LintConfigRequest(megatron_args=args, model="glm-5", gpu="h100", num_gpus=608))
    assert "DSA_ROPE_FUSION" in {f.code for f in r.findings}
    assert any(f.code == "DSA_ROPE_FUSION" and f.settings == {"apply_rope_fusion": False} for f in r.fixes)
    assert "--no-rope-fusion" in r.corrected and "DSA_ROPE_FUSION" not in r.remaining_errors


def test_the_published_sft_layout_is_compared_on_the_plans_job():
    """GLM-5.2's published 200K layout is an offline-packed SFT recipe; a plain request plans unpacked
    pretraining, so the layout is compared (and, if best, adopted) without its data format, and says so."""
    r = plan_layout(PlanLayoutRequest(**GLM5, top_n=1))
    ref = r.references[0]
    assert ref.id == "glm-5.2-200k-h100"
    assert not {"packed_sequences", "pad_to_max_length"} & set(ref.settings)
    top = r.plans[0]
    assert not {"packed_sequences", "pad_to_max_length"} & set(top.settings)
    assert not any("packing" in o for o in top.bridge_overrides)
    if top.layout == ref.layout:
        assert any("without its SFT data format" in w for w in top.why)


def test_a_plan_lists_what_its_own_settings_reach_unchecked():
    """not_checked covers the plans' settings, not only the request's: each item a plan's configuration reaches
    (as estimate_throughput reports it for the same settings) is in the plan result."""
    r = plan_layout(
        PlanLayoutRequest(model="nemotron-3-super", gpu="h100", num_gpus=64, seq_len=131072, top_n=2)
    )
    listed = {n.model_dump_json() for n in r.not_checked}
    for plan in r.plans:
        own = estimate_throughput_config(TrainingConfig(**{**plan.settings, "gpu": "h100", "num_gpus": 64}))
        assert {n.model_dump_json() for n in own.not_checked} <= listed, plan.layout


def test_a_plan_carries_the_dominant_term_findings_of_its_settings():
    """Nemotron 3 Super at 128K on 64 H100: the step-time findings estimate_throughput gives for the top plan's
    settings (context-parallel traffic over a quarter of the step) are on the plan too."""
    r = plan_layout(
        PlanLayoutRequest(model="nemotron-3-super", gpu="h100", num_gpus=64, seq_len=131072, top_n=1)
    )
    plan = r.plans[0]
    own = estimate_throughput_config(TrainingConfig(**{**plan.settings, "gpu": "h100", "num_gpus": 64}))
    dominant = {f.code for f in own.findings if f.code.startswith("STEP_") and f.code.endswith("_DOMINANT")}
    assert dominant, "the case needs a dominant term"
    assert dominant <= {f.code for f in plan.findings}


def test_a_lora_lint_hands_back_no_megatron_lm_translation():
    """Megatron-LM has no LoRA: the translation would train every weight (152.6 GiB for this job on 80 GB cards),
    so none is handed back, and nothing of it counts among the remaining errors."""
    job = dict(model="qwen3-30b-a3b", gpu="h100", num_gpus=8, seq_len=32768)
    plan = plan_layout(PlanLayoutRequest(**job, lora_dim=16, top_n=1)).plans[0]
    r = lint_config(LintConfigRequest(bridge_overrides=plan.bridge_overrides, model=job["model"], gpu="h100",
                                      num_gpus=8))  # fmt: skip
    assert r.valid and r.corrected_other_dialect is None and r.remaining_errors == []
    assert r.effective_config["lora_dim"] == 16


@pytest.mark.parametrize(
    ("model", "gpu", "num_gpus", "seq_len"),
    [("deepseek-v3", "h100", 256, 131072), ("gpt-oss-120b", "b200", 64, 32768),
     ("nemotron-3-super", "h100", 64, 131072), ("qwen3-235b-a22b", "gb200", 72, 131072)],
)  # fmt: skip
def test_the_model_args_and_a_plans_args_are_one_megatron_lm_launch(model, gpu, num_gpus, seq_len):
    """megatron_model_args + a plan's megatron_args is a launch Megatron-LM builds the catalog model from: lint
    recognises the model, finds no error and no defaulted function flag, and gives the plan's own peak."""
    r = plan_layout(PlanLayoutRequest(model=model, gpu=gpu, num_gpus=num_gpus, seq_len=seq_len, precision="bf16",
                                      top_n=1))  # fmt: skip
    plan = r.plans[0]
    launch = r.megatron_model_args + plan.megatron_args
    assert len({t for t in launch if t.startswith("--")}) == sum(
        t.startswith("--") for t in launch
    )  # no repeats
    linted = lint_config(LintConfigRequest(megatron_args=launch, gpu=gpu, num_gpus=num_gpus))
    codes = {f.code for f in linted.findings}
    assert linted.model == model and "MODEL_RECOGNISED" in codes
    assert linted.valid and "MODEL_FLAGS_DEFAULTED" not in codes, codes
    assert linted.corrected_memory.peak_gib == pytest.approx(plan.memory.peak_gib, abs=0.05)


def test_function_flags_are_what_megatron_lm_needs_for_each_family():
    """Hand-read: DeepSeek-V3 is RMSNorm, SwiGLU, bias-free, sigmoid-routed over 8 groups (top 4); GPT-OSS has
    biases, the clamped quick-GeGLU with the +1 offset, learnable sinks and a 128-token window every other layer
    (Bridge gpt_oss_bridge.py:82-88: window - 1 back); Nemotron-H has squared-ReLU experts."""
    assert function_flags(load_model("deepseek-v3")) == [
        "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear", "--moe-router-score-function", "sigmoid",
        "--moe-router-num-groups", "8", "--moe-router-group-topk", "4"]  # fmt: skip
    assert function_flags(load_model("gpt-oss-120b")) == [
        "--normalization", "RMSNorm", "--quick-geglu", "--glu-linear-offset", "1.0", "--activation-func-clamp-value",
        "7.0", "--softmax-type", "learnable", "--window-size", "127,0", "--window-attn-skip-freq", "2"]  # fmt: skip
    super_ = function_flags(load_model("nemotron-3-super"))
    assert "--squared-relu" in super_ and "--swiglu" not in super_
    assert "--qk-layernorm" in function_flags(load_model("qwen3-30b-a3b"))
    flags = megatron_flags()
    assert all(t in flags for s in ("deepseek-v3", "gpt-oss-120b", "qwen3-next-80b-a3b", "glm-4.5")
               for t in function_flags(load_model(s)) if t.startswith("--"))  # fmt: skip


def test_a_launch_that_leaves_the_functions_to_the_defaults_is_warned():
    """The shapes of DeepSeek-V3 without its function flags train LayerNorm, GeLU, biased, softmax-routed layers:
    MODEL_FLAGS_DEFAULTED names exactly the flags to add; with them added it is gone."""
    shapes = architecture_flags(load_model("deepseek-v3"))
    bare = drop_flags(shapes, {t for t in function_flags(load_model("deepseek-v3")) if t.startswith("--")})
    job = "--micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --tensor-model-parallel-size 8"
    r = lint_config(LintConfigRequest(megatron_args=" ".join(bare) + " " + job, gpu="h100", num_gpus=1024))
    warned = next(f for f in r.findings if f.code == "MODEL_FLAGS_DEFAULTED")
    assert (
        warned.severity == "warning"
        and "--normalization RMSNorm --swiglu --disable-bias-linear" in warned.fix
    )
    r = lint_config(LintConfigRequest(megatron_args=" ".join(shapes) + " " + job, gpu="h100", num_gpus=1024))
    assert "MODEL_FLAGS_DEFAULTED" not in {f.code for f in r.findings}


@pytest.mark.parametrize("model", sorted(s.id for s in models()))
def test_every_catalog_model_plans_a_launch_lint_reads_back_as_itself(model):
    """For every catalog model, megatron_model_args + the top plan's megatron_args: lint recognises the model
    (or its declared twin in architecture), finds no error and no defaulted function flag, at the plan's peak.
    Twins in shape are told apart by their router, functions and hybrid pattern (Moonlight / DeepSeek-V2-Lite,
    Nemotron 3 Nano / 3.5 Lightning)."""
    r = plan_layout(PlanLayoutRequest(model=model, gpu="h100", num_gpus=256, seq_len=32768, precision="bf16",
                                      top_n=1))  # fmt: skip
    assert r.plans, r.no_plan_reason
    plan = r.plans[0]
    linted = lint_config(LintConfigRequest(megatron_args=r.megatron_model_args + plan.megatron_args, gpu="h100",
                                           num_gpus=256))  # fmt: skip
    twins = {"glm-4.7": "glm-4.5"}  # one architecture, MODEL_RECOGNISED names both
    assert linted.model == twins.get(model, model) and linted.valid
    assert "MODEL_FLAGS_DEFAULTED" not in {f.code for f in linted.findings}
    assert linted.corrected_memory.peak_gib == pytest.approx(plan.memory.peak_gib, abs=0.05)
