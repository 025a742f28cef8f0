"""plan_layout answers for the sparse-attention and Mamba-hybrid families at 128K (and Nemotron-3 Nano at 1M)."""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules import run
from moe_long_context.engine.rules.mamba import mamba_tp_cp_problems
from moe_long_context.tools.plan_layout import plan_layout
from moe_long_context.tools.plan_models import PlanLayoutRequest

CASES = [
    dict(model="nemotron-3-nano", gpu="h100", num_gpus=64, seq_len=131072),
    dict(model="nemotron-3-nano", gpu="h100", num_gpus=128, seq_len=1048576),
    dict(model="glm-5", gpu="gb200", num_gpus=192, seq_len=131072),
    dict(model="deepseek-v3.2", gpu="h100", num_gpus=256, seq_len=131072, launcher="megatron-lm"),
]


@pytest.mark.parametrize("request_", CASES, ids=[f"{c['model']}-{c['seq_len']}" for c in CASES])
def test_plan_layout_answers_with_a_plan_that_fits(request_):
    result = plan_layout(PlanLayoutRequest(**request_))
    assert result.plans, result.findings
    for plan in result.plans:
        assert plan.memory.peak_gib <= plan.memory.usable_gib
        settings = plan.settings
        ctx = build_context(TrainingConfig(**settings))
        assert not [f.code for f in run(ctx) if f.severity is Severity.error]
        if ctx.model.has_dsa and settings.get("cp", 1) > 1:
            assert settings["cp_comm_type"] == "all_gather"
        if ctx.model.has_mamba:
            assert mamba_tp_cp_problems(64, 8, settings.get("tp", 1), settings.get("cp", 1)) == []
