"""A plan is a claim: what it hands back (each dialect's launch, its findings, what it did not check) must be what
the other tools say about the same settings. Cases found by checking plans against lint and the estimators."""

from __future__ import annotations

from moe_long_context.engine.config import TrainingConfig
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
