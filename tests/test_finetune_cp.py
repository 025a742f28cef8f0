"""Fine-tuning with CP > 1: Bridge 0.6.2 ConfigContainer.validate (training/config.py:1435-1457) asserts
model.calculate_per_token_loss on and ddp.average_in_collective off when the dataset is a fine-tuning one (LoRA's
and offline packing's). The lint verdicts, the repair, and the plans that must carry the setting."""

from __future__ import annotations

from moe_long_context.tools.lint_config import LintConfigRequest, lint_config
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout

PACKED = ["model.tensor_model_parallel_size=2", "model.context_parallel_size=4", "model.expert_model_parallel_size=8",
          "model.sequence_parallel=true", "model.seq_length=32768", "dataset.seq_length=32768",
          "dataset.enable_offline_packing=true", "train.micro_batch_size=1", "train.global_batch_size=32"]  # fmt: skip


def _lint(overrides: list[str]):
    return lint_config(
        LintConfigRequest(bridge_overrides=overrides, model="qwen3-30b-a3b", gpu="h100", num_gpus=64)
    )


def _codes(r) -> dict[str, str]:
    return {f.code: f.severity.value for f in r.findings if f.code.startswith("FINETUNE")}


def test_packed_sft_with_cp_leaving_the_loss_to_the_recipe_is_warned():
    r = _lint(PACKED)
    assert r.valid and _codes(r) == {"FINETUNE_CP_PER_TOKEN_LOSS_UNSEEN": "warning"}
    f = next(f for f in r.findings if f.code == "FINETUNE_CP_PER_TOKEN_LOSS_UNSEEN")
    assert "packed SFT with CP=4" in f.message and "model.calculate_per_token_loss=true" in f.fix
    assert f.keys == ["model.calculate_per_token_loss", "model.context_parallel_size"]


def test_the_loss_written_off_is_an_error_repaired_in_both_dialects():
    r = _lint([*PACKED, "model.calculate_per_token_loss=false"])
    assert not r.valid and _codes(r) == {"FINETUNE_CP_PER_TOKEN_LOSS": "error"}
    assert [f.settings for f in r.fixes if f.code == "FINETUNE_CP_PER_TOKEN_LOSS"] == [
        {"calculate_per_token_loss": True}]  # fmt: skip
    assert "model.calculate_per_token_loss=true" in r.corrected
    assert "--calculate-per-token-loss" in r.corrected_other_dialect
    assert "FINETUNE_CP_PER_TOKEN_LOSS" not in r.remaining_errors


def test_average_in_collective_on_is_an_error_and_the_right_settings_are_clean():
    r = _lint([*PACKED, "model.calculate_per_token_loss=true", "ddp.average_in_collective=true"])
    assert _codes(r) == {"FINETUNE_CP_AVERAGE_IN_COLLECTIVE": "error"}
    assert (
        _codes(_lint([*PACKED, "model.calculate_per_token_loss=true", "ddp.average_in_collective=false"]))
        == {}
    )


def test_only_fine_tuning_with_cp_reaches_the_asserts():
    cp1 = [o.replace("context_parallel_size=4", "context_parallel_size=1") for o in PACKED]
    assert _codes(_lint([*cp1, "model.calculate_per_token_loss=false"])) == {}
    pretraining = [o for o in PACKED if "offline_packing" not in o]
    assert _codes(_lint([*pretraining, "ddp.average_in_collective=true"])) == {}
    lora = [*pretraining, "++peft.dim=16"]
    assert _codes(_lint(lora)) == {"FINETUNE_CP_PER_TOKEN_LOSS_UNSEEN": "warning"}
    assert "LoRA with CP=4" in next(f.message for f in _lint(lora).findings if f.code.startswith("FINETUNE"))


def test_a_lora_plan_with_cp_writes_the_per_token_loss_and_lints_clean():
    """Every LoRA plan at 128K on 16 H100 shards the sequence, so each must carry the setting Bridge asserts."""
    r = plan_layout(PlanLayoutRequest(model="qwen3-30b-a3b", gpu="h100", num_gpus=16, seq_len=131072, lora_dim=16,
                                      top_n=2))  # fmt: skip
    assert r.valid and r.plans
    for plan in r.plans:
        assert plan.settings["cp"] > 1 and "model.calculate_per_token_loss=true" in plan.bridge_overrides
        linted = lint_config(LintConfigRequest(bridge_overrides=plan.bridge_overrides, model="qwen3-30b-a3b",
                                               gpu="h100", num_gpus=16))  # fmt: skip
        assert not _codes(linted), plan.layout
