"""Property: whatever the catalog holds, every plan plan_layout returns, and the published layout it compares them
with, is at the one global batch the result states, leaves the headroom margin, and passes check_dp_budget,
estimate_memory and validate_cuda_graph_shapes with no error."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moe_long_context.engine.findings import has_errors
from moe_long_context.model.catalog import load_gpu, model_ids
from moe_long_context.tools.check_dp_budget import CheckDpBudgetRequest, check_dp_budget
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout
from moe_long_context.tools.plan_search import default_gbs
from moe_long_context.tools.validate_cuda_graph_shapes import (
    ValidateCudaGraphsRequest,
    validate_cuda_graph_shapes,
)


def _fields(request, settings_: dict) -> dict:
    return {k: v for k, v in settings_.items() if k in request.model_fields}


def assert_passes_every_tool(cfg: dict, gbs: int, headroom: float) -> None:
    assert cfg["gbs"] == gbs
    budget = check_dp_budget(CheckDpBudgetRequest(**_fields(CheckDpBudgetRequest, cfg)))
    assert not has_errors(budget.findings), [f.code for f in budget.findings if f.severity.value == "error"]
    memory = estimate_memory(EstimateMemoryRequest(**_fields(EstimateMemoryRequest, cfg)))
    assert not has_errors(memory.findings), [f.code for f in memory.findings if f.severity.value == "error"]
    assert memory.peak_gib <= memory.usable_gib * (1 - headroom) + 1e-3, (memory.peak_gib, memory.usable_gib)
    graphs = validate_cuda_graph_shapes(ValidateCudaGraphsRequest(**_fields(ValidateCudaGraphsRequest, cfg)))
    assert graphs.valid, [f.code for f in graphs.findings if f.severity.value == "error"]


def assert_result_holds(r, headroom: float) -> None:
    assert r.valid == bool(r.plans)
    if not r.plans:
        assert r.no_plan_reason  # never an empty answer without a reason
    for p in r.plans:
        assert_passes_every_tool(p.settings, r.gbs, headroom)
        assert p.memory.peak_gib <= p.memory.usable_gib * (1 - headroom) + 1e-3
    for ref in r.references:
        if ref.fits:
            assert_passes_every_tool(ref.settings, r.gbs, headroom)


@pytest.mark.parametrize("model", model_ids())
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gpu=st.sampled_from(["h100", "h200", "b200", "gb200"]),
    num_gpus=st.sampled_from([16, 32, 48, 64, 128]),
    seq_len=st.sampled_from([8192, 32768, 65536]),
    headroom=st.sampled_from([0.0, 0.05, 0.1]),
)
def test_every_plan_passes_every_tool_at_one_global_batch(model, gpu, num_gpus, seq_len, headroom):
    r = plan_layout(
        PlanLayoutRequest(
            model=model, gpu=gpu, num_gpus=num_gpus, seq_len=seq_len, headroom=headroom, top_n=2
        )
    )
    assert (
        r.gbs == default_gbs(seq_len) and r.headroom == headroom
    )  # the stated default batch, no published layout
    assert r.gbs & (r.gbs - 1) == 0 and r.gbs <= 2**23 // seq_len < 2 * r.gbs
    assert_result_holds(r, headroom)
    for p in r.plans:
        assert p.memory.usable_gib == pytest.approx(load_gpu(gpu).usable_hbm_gib)


def test_the_published_layout_is_planned_at_the_users_batch():
    """The user's GBS is the batch of every plan and of the published layout (not the layout's own 64)."""
    r = plan_layout(
        PlanLayoutRequest(
            model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072, gbs=128, top_n=2
        )
    )
    (ref,) = r.references
    assert r.gbs == 128 and ref.settings["gbs"] == 128
    assert all(p.settings["gbs"] == 128 for p in r.plans)
    assert_result_holds(r, 0.05)
