"""LoRA in the estimating and planning requests: lora_dim switches Bridge's LoRA on, read as lint reads a PEFT recipe.

Hand check (Qwen3-30B-A3B, rank 32, Bridge's default targets, TP 1, EP 8; per layer, Bridge peft/utils.py:896-1060
gives each adapter dim x (in + out), one per EP rank for the routed experts):
  linear_qkv 2048 -> 32 x 128 + 2 x 4 x 128 = 5120: 32 x 7168 = 229,376
  linear_proj 4096 -> 2048:                          32 x 6144 = 196,608
  expert linear_fc1 2048 -> 2 x 768:                 32 x 3584 = 114,688
  expert linear_fc2 768 -> 2048:                     32 x 2816 =  90,112
48 MoE layers: 20,447,232 dense and 9,830,400 expert adapter parameters, 30,277,632 in all.
"""

from __future__ import annotations

import pytest
from mcp import Client
from pydantic import ValidationError

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.representative import nemotron3_recipes
from moe_long_context.faces.server import server
from moe_long_context.memory.terms import GIB
from moe_long_context.tools.estimate_memory import (
    EstimateMemoryRequest,
    estimate_memory,
    estimate_memory_config,
)
from moe_long_context.tools.estimate_throughput import (
    EstimateThroughputRequest,
    estimate_throughput,
    estimate_throughput_config,
)
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config
from moe_long_context.tools.pick_recompute import PickRecomputeRequest, pick_recompute
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout

QWEN = dict(model="qwen3-30b-a3b", gpu="h100", num_gpus=8, seq_len=4096, ep=8)
DENSE_ADAPTERS, EXPERT_ADAPTERS = 20_447_232, 9_830_400
SUPER_PEFT = next(r for r in nemotron3_recipes() if r.id == "nemotron-3-super-peft-16gpu-h100-bf16")


def _as_request(config: dict) -> dict:
    """A PEFT recipe's engine config as the requests take it: lora_dim (Bridge's 32) and the targets."""
    out = {k: v for k, v in config.items() if k not in ("peft", "lora_dim", "lora_target_modules")}
    return {
        **out,
        "lora_dim": config.get("lora_dim", 32),
        "lora_target_modules": config["lora_target_modules"],
    }


def _component(result, name: str):
    return next(c for c in result.breakdown[0].components if c.component == name)


def test_lora_memory_is_the_frozen_base_and_the_hand_counted_adapters():
    lora = estimate_memory(EstimateMemoryRequest(**QWEN, lora_dim=32))
    full = estimate_memory(EstimateMemoryRequest(**QWEN))
    adapters = DENSE_ADAPTERS + EXPERT_ADAPTERS
    assert _component(lora, "gradients").gib == pytest.approx(adapters * 4 / GIB, abs=1e-3)
    # FP32 master + Adam moments: dense adapters sharded over DP 8, expert adapters over EDP 1
    states = 12 * (DENSE_ADAPTERS / 8 + EXPERT_ADAPTERS)
    assert _component(lora, "optimizer states").gib == pytest.approx(states / GIB, abs=1e-3)
    base = _component(full, "parameters").gib
    assert _component(lora, "parameters").gib == pytest.approx(base + adapters * 2 / GIB, abs=1e-3)
    assert _component(full, "gradients").gib > 100 * _component(lora, "gradients").gib
    assert any(f.code == "LORA_MODELLED" for f in lora.findings)
    assert not any(f.code == "LORA_MODELLED" for f in full.findings)


def test_the_requests_read_a_peft_recipe_as_its_config():
    request, config = _as_request(SUPER_PEFT.config), TrainingConfig(**SUPER_PEFT.config)
    assert (
        estimate_memory(EstimateMemoryRequest(**request)).peak_gib == estimate_memory_config(config).peak_gib
    )
    timed, direct = (
        estimate_throughput(EstimateThroughputRequest(**request)),
        estimate_throughput_config(config),
    )
    assert timed.step_s == direct.step_s
    full = {k: v for k, v in request.items() if k not in ("lora_dim", "lora_target_modules")}
    without = estimate_throughput(EstimateThroughputRequest(**full))
    assert without.step_s > timed.step_s  # full training adds the base's weight-gradient GEMMs
    picked = pick_recompute(PickRecomputeRequest(**request))
    assert picked.fits and picked.recompute_granularity is None  # it fits as shipped, without recompute
    assert picked.peak_gib_before == pytest.approx(estimate_memory_config(config).peak_gib, abs=0.01)


def test_lora_plans_carry_lora_in_bridge_and_no_megatron_lm_launch():
    job = {k: QWEN[k] for k in ("model", "gpu", "num_gpus", "seq_len")}
    plans = plan_layout(PlanLayoutRequest(**job, lora_dim=16))
    assert plans.valid and plans.plans
    for plan in plans.plans:
        assert "peft" not in plan.settings and plan.settings["lora_dim"] == 16  # the requests' own fields
        assert "++peft.dim=16" in plan.bridge_overrides
        assert plan.megatron_args == []  # Megatron-LM has no LoRA
        assert plan.memory.peak_gib <= plan.memory.usable_gib
    assert plans.references == []
    assert any(a.startswith("LoRA rank 16 on linear_qkv") for a in plans.assumptions)


def test_the_default_fp8_plan_says_why_a_lora_job_does_not_fit():
    """Ultra's 32-GPU PEFT job fits in the recipe's BF16; under H100's default FP8 the frozen base also keeps its
    quantized copies, and the reason says so."""
    job = dict(model="nemotron-3-ultra", gpu="h100", num_gpus=32, seq_len=4096, gbs=128, lora_dim=32)
    none = plan_layout(PlanLayoutRequest(**job))
    assert not none.valid and "set precision bf16" in none.no_plan_reason
    assert plan_layout(PlanLayoutRequest(**job, precision="bf16")).valid


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"lora_target_modules": ["in_proj"]}, "lora_target_modules needs lora_dim"),
        ({"lora_dim": 32, "launcher": "megatron-lm"}, "Megatron-LM has no LoRA"),
        ({"lora_dim": 32, "lora_target_modules": [1]}, "must be module names"),
        ({"lora_dim": 0}, "greater than or equal to 1"),
    ],
)
def test_bad_lora_fields_are_refused_naming_the_field(fields, message):
    job = {k: QWEN[k] for k in ("model", "gpu", "num_gpus", "seq_len")}
    for request, base in ((EstimateMemoryRequest, QWEN), (PlanLayoutRequest, job)):
        with pytest.raises(ValidationError, match=message):
            request(**base, **fields)


def test_targets_as_text_are_split_as_the_other_lists():
    given = EstimateMemoryRequest(
        **QWEN, lora_dim=8, lora_target_modules="linear_qkv, linear_proj linear_qkv"
    )
    assert given.lora_target_modules == ("linear_qkv", "linear_proj")


@pytest.mark.anyio
async def test_over_mcp_a_bad_lora_field_is_a_tool_error_the_agent_can_read():
    async with Client(server) as client:
        result = await client.call_tool("estimate_memory", {**QWEN, "lora_target_modules": ["in_proj"]})
    assert result.is_error
    text = result.content[0].text
    assert "lora_target_modules needs lora_dim" in text and "Traceback" not in text


def test_a_lora_plans_bridge_overrides_lint_back_to_the_same_lora_and_peak():
    """A plan is a deliverable: its overrides, read back by lint, are valid, train the same LoRA and give the
    plan's own peak."""
    targets = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2", "in_proj", "out_proj"]
    job = dict(model="nemotron-3-super", gpu="h100", num_gpus=16, seq_len=2048, gbs=16)
    plans = plan_layout(PlanLayoutRequest(**job, lora_dim=32, lora_target_modules=targets, top_n=3))
    for plan in plans.plans:
        linted = lint_config(
            LintConfigRequest(
                bridge_overrides=plan.bridge_overrides, model=job["model"], gpu="h100", num_gpus=16
            )
        )
        assert linted.valid, plan.layout
        config = linted.effective_config
        assert (config["peft"], config["lora_dim"], config["lora_target_modules"]) == ("lora", 32, targets)
        assert linted.corrected_memory.peak_gib == pytest.approx(plan.memory.peak_gib, abs=0.01)


@pytest.mark.parametrize(
    ("targets", "lora"),
    [(["q_proj", "linear_qkv"], True), (["q_proj"], False), ([], False)],
)
def test_a_target_bridge_accepts_is_not_refused_but_listed(targets, lora):
    """Bridge takes any target name and only warns when one matches no module (peft/module_matcher.py:195-209):
    the request keeps the names the engine places and lists the others under not_checked, as lint does; with none
    left (or none given: the matcher then takes every linear) the numbers are full training's, and it says so."""
    result = estimate_memory(EstimateMemoryRequest(**QWEN, lora_dim=32, lora_target_modules=targets))
    [entry] = [n for n in result.not_checked if n.keys == ["lora_target_modules"]]
    assert ("not a modelled module name" in entry.requires) is lora
    assert ("full training" in entry.requires) is not lora
    assert any(f.code == "LORA_MODELLED" for f in result.findings) is lora
    full = estimate_memory(EstimateMemoryRequest(**QWEN))
    assert (result.peak_gib < full.peak_gib) is lora
