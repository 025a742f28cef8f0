"""Mamba layers under TP and CP: the head-sharding all-to-alls CP adds (Megatron Core 0.19.2
ssm/mamba_context_parallel.py:140-211), no core_attn replay for a layer that has no core attention, and the
STEP_MAMBA_SPLIT_UNPROVEN bound that the measured TP 1 / TP 2 pairs of Nemotron 3 Super call for."""

from __future__ import annotations

import re

import pytest

from moe_long_context.engine.context import build_context
from moe_long_context.engine.step_time import _group_bandwidth, step_time
from moe_long_context.engine.step_time_hybrid import mamba_cp_exchange_width
from moe_long_context.evals.calibration.corpus import load_corpus
from moe_long_context.model.catalog import load_model
from moe_long_context.tools.estimate_throughput import estimate_throughput_config


@pytest.fixture(scope="module")
def points():
    return {p.id: p for p in load_corpus().points}


def test_exchange_width_is_the_in_proj_output_and_y_with_group_state_repeated_past_the_groups():
    """Nemotron 3.5 Lightning: 64 heads of 64 (d_inner 4096), 8 groups of state 128. Per token the CP all-to-alls
    carry z, x and y (3 x 4096), dt (64) and B, C (2 x 8 x 128); at CP 16 a rank's 8 groups are fewer than the CP
    ranks, so B and C are repeated 16 / 8 = 2 times (mamba_context_parallel.py:118-125, 168-184). TP 2 halves
    every width and leaves 4 groups a rank, repeated 4 times at CP 16."""
    spec = load_model("nemotron-3.5-lightning")
    assert mamba_cp_exchange_width(spec, tp=1, cp=2) == 3 * 4096 + 64 + 2 * 8 * 128 == 14400
    assert mamba_cp_exchange_width(spec, tp=1, cp=16) == 3 * 4096 + 64 + 2 * 8 * 128 * 2 == 16448
    assert mamba_cp_exchange_width(spec, tp=2, cp=16) == (3 * 4096 + 64) / 2 + 2 * 4 * 128 * 4 == 10272


def test_a_mamba_layer_pays_its_cp_all_to_alls_and_no_core_attn_replay(points):
    """The Lightning card run with CP 2 on H100 (selective recompute with core_attn): each Mamba layer moves
    2 passes x 4096 CP-local tokens x 14,400 elements x 2 bytes x 1/2 over NVLink, unhidden; its SSD scan is its
    own term and is not replayed by core_attn, which checkpoints only a TransformerLayer's core attention."""
    cfg = points["card-nemotron-3.5-lightning-pretrain-h100-16"].training_config()
    assert (cfg.cp, cfg.tp, cfg.mbs, cfg.seq_len) == (2, 1, 1, 8192)
    assert "core_attn" in (cfg.recompute_modules or [])
    ctx = build_context(cfg)
    st = step_time(ctx)
    mamba = st.layer_terms[("mamba", False)]
    volume = 2 * 4096 * 14400 * 2 * (2 - 1) / 2
    assert mamba["cp_comm"] == pytest.approx(volume / _group_bandwidth(ctx.gpu, 2, 1))
    assert "recompute:core_attn" not in mamba and "attention" not in mamba and mamba["mamba_scan"] > 0
    attention = st.layer_terms[("full", False)]
    assert attention["recompute:core_attn"] > 0


def _bound(result) -> tuple[float, float]:
    """(step seconds with the scan not shortened, the low end of the quoted tokens/s) from the finding."""
    found = [f for f in result.findings if f.code == "STEP_MAMBA_SPLIT_UNPROVEN"]
    assert len(found) == 1, [f.code for f in result.findings]
    step = float(re.search(r"the step is ([0-9.]+) s", found[0].message).group(1))
    low = float(re.search(r"as ([0-9,]+)-", found[0].fix).group(1).replace(",", ""))
    return step, low


def test_super_at_tp2_on_gb200_is_bounded_by_the_unshortened_scan_and_the_bound_meets_the_measurement(points):
    """Bridge's Nemotron 3 Super MXFP8 row on 64 GB200 (TP 2 + SP, 26.08): 7,040 tokens/s per GPU measured, 9,678
    estimated. Unshortened by the 2-way split, the scan adds its 2.33 s again; the step becomes 9.11 s, 7,197 tokens/s per GPU,
    1.02x the measurement (65,536 tokens a GPU per step at 7,040/s is 9.31 s)."""
    point = points["perf-26.08-nemotron-3-super-gb200-mxfp8-64"]
    result = estimate_throughput_config(point.training_config())
    step, low = _bound(result)
    scan = result.terms_s["mamba_scan"]
    assert step == pytest.approx(result.step_s + scan * (2 - 1), abs=0.01)  # PP 1: no bubble
    per_gpu = low / 64
    assert per_gpu / point.measured.tokens_per_s_per_gpu == pytest.approx(1.02, abs=0.02)
    assert result.tokens_per_s / 64 / point.measured.tokens_per_s_per_gpu == pytest.approx(1.37, abs=0.02)


def test_no_bound_without_a_head_split_or_without_mamba(points):
    """GB300's Super recipe runs TP 1 (in band, 1.10): nothing to qualify; nor for a model with no Mamba layer."""
    for pid in ("perf-26.08-nemotron-3-super-gb300-mxfp8-64", "perf-26.08-qwen3-30b-a3b-gb200-mxfp8-8"):
        result = estimate_throughput_config(points[pid].training_config())
        assert result.valid
        assert "STEP_MAMBA_SPLIT_UNPROVEN" not in {f.code for f in result.findings}


def test_a_wider_split_loses_only_the_measured_factor_of_two():
    """Super at 128K on 64 H100 with TP 2 x CP 16: no pair measures a 32-way split, so the bound doubles the scan
    (what the 2-way pairs showed) rather than multiplying it by 32; PP 2's bubble stretches it like the step."""
    from moe_long_context.engine.config import TrainingConfig

    cfg = TrainingConfig(
        model="nemotron-3-super", gpu="h100", num_gpus=64, seq_len=131072, tp=2, cp=16, pp=2, ep=16,
        sequence_parallel=True, mbs=1, gbs=64, cp_comm_type="p2p", recompute_granularity="selective",
        recompute_modules=["moe"], precision="fp8-blockwise", dispatcher="flex-deepep",
        use_precision_aware_optimizer=True, optimizer_cpu_offload_fraction=1.0,
    )  # fmt: skip
    result = estimate_throughput_config(cfg)
    step, low = _bound(result)
    ctx = build_context(cfg)
    st = step_time(ctx)
    assert step == pytest.approx(st.step_s + st.terms["mamba_scan"] * st.pipeline_factor / 64, abs=0.01)
    assert result.tokens_per_step / step == pytest.approx(low, rel=1e-3)
    assert 0.8 < result.step_s / step < 0.9
