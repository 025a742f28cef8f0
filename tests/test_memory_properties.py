"""Property tests: pick_recompute never hands back something Megatron refuses; the tools never crash."""

from __future__ import annotations

import contextlib
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from moe_long_context.engine.config import RECOMPUTE_MODULES, TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import errors
from moe_long_context.engine.pipeline import propose_splits
from moe_long_context.engine.rules import run
from moe_long_context.errors import InputError
from moe_long_context.model.catalog import gpu_ids, load_model, model_ids
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory
from moe_long_context.tools.pick_recompute import PickRecomputeRequest, pick_recompute

RECOMPUTE_FIELDS = ("recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers")

knobs = st.fixed_dictionaries(
    {
        "gpu": st.sampled_from(gpu_ids()),
        "seq_len": st.sampled_from([4096, 32768, 131072]),
        "mbs": st.sampled_from([1, 2]),
        "precision": st.sampled_from(
            ["bf16", "fp8-delayed", "fp8-tensorwise", "fp8-blockwise", "mxfp8", "nvfp4"]
        ),
        "dispatcher": st.sampled_from(["alltoall", "allgather", "flex-deepep", "flex-hybridep"]),
        "cuda_graph_impl": st.sampled_from(["none", "transformer_engine", "full_iteration", "local"]),
        "cuda_graph_modules": st.sampled_from(
            [None, ["attn"], ["attn", "moe_router", "moe_preprocess"], ["moe_router"], ["mlp"]]
        ),
        "check_for_nan_in_loss": st.booleans(),
        "ep_overlap": st.booleans(),
        "moe_shared_expert_overlap": st.booleans(),
        "moe_grouped_gemm": st.booleans(),
        "use_precision_aware_optimizer": st.booleans(),
        "grad_reduce_in_fp32": st.booleans(),
        "optimizer_cpu_offload_fraction": st.sampled_from([0.0, 0.5, 1.0]),
        "activation_offload": st.sampled_from(
            [None, ["expert_fc1"], ["moe_act"], ["core_attn", "attn_proj"]]
        ),
        "launcher": st.sampled_from(["bridge", "megatron-lm"]),
        # what the user already had: the picker replaces it
        "recompute_granularity": st.sampled_from([None, "selective"]),
        "recompute_modules": st.sampled_from([None, ["core_attn"], ["moe"], ["up_proj", "norm"]]),
    }
)


@st.composite
def configs(draw):
    """Mostly layouts whose world factors and whose layers split (the engine's own split proposals), so
    the picker really searches; the knobs are drawn freely, rule violations included."""
    model = draw(st.sampled_from(model_ids()))
    spec = load_model(model)
    tp, cp = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    pp, vpp = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([None, 2, 4]))
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8, 16, 32) if spec.num_experts % e == 0]))
    dp = draw(st.sampled_from([1, 2]))
    world = math.lcm(tp * cp * pp, ep * pp) * dp
    vpp = vpp if pp > 1 else None
    split = {}
    if pp > 1:
        proposals = propose_splits(spec.num_layers, pp, vpp, spec.mtp_num_layers, limit=1)
        if not proposals:
            vpp, proposals = None, propose_splits(spec.num_layers, pp, None, spec.mtp_num_layers, limit=1)
        split = proposals[0].settings if proposals else {}
    knob = draw(knobs)
    microbatches = pp * draw(st.sampled_from([1, 2, 4]))
    data_parallel = world // (tp * cp * pp)
    return {
        **knob,
        **split,
        "model": model,
        "num_gpus": world,
        "tp": tp,
        "cp": cp,
        "pp": pp,
        "vpp": vpp,
        "ep": ep,
        "gbs": knob["mbs"] * data_parallel * microbatches,
    }


def _error_codes(config: dict) -> set[str]:
    return {f.code for f in errors(run(build_context(TrainingConfig(**config))))}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs())
def test_pick_recompute_never_returns_a_label_or_combination_megatron_rejects(config):
    try:
        r = pick_recompute(PickRecomputeRequest(**config))
    except InputError:
        return
    assert set(r.recompute_modules) <= set(RECOMPUTE_MODULES)
    assert "core_attn" not in r.recompute_modules
    cleared = {**config, **dict.fromkeys(RECOMPUTE_FIELDS)}
    chosen = {
        **cleared,
        **r.other_settings,
        "recompute_granularity": r.recompute_granularity,
        "recompute_modules": r.recompute_modules or None,
        "recompute_method": r.recompute_method,
        "recompute_num_layers": r.recompute_num_layers,
    }
    # Whatever errors the configuration has without recompute may remain; the pick adds none.
    chosen_errors = _error_codes(chosen)
    assert chosen_errors <= _error_codes(cleared)
    assert r.valid == (not chosen_errors)
    if r.peak_gib_after is not None:
        again = estimate_memory(EstimateMemoryRequest(**chosen))
        assert again.peak_gib == r.peak_gib_after
        assert r.fits == (r.peak_gib_after <= r.budget_gib) and r.budget_gib == round(r.usable_gib * 0.95, 3)
        assert r.peak_gib_after <= estimate_memory(EstimateMemoryRequest(**cleared)).peak_gib
    if r.fits:
        assert r.next_steps == []


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=configs(),
    label=st.sampled_from(["layernorm", "moe_act", "mla_up_proj", "mlp", "shared_experts", "moe"]),
)
def test_adding_a_recompute_label_never_raises_the_estimate(config, label):
    base = {**config, "recompute_granularity": "selective", "recompute_modules": ["gdn_norm_out"]}
    try:
        before = estimate_memory(EstimateMemoryRequest(**base))
        after = estimate_memory(
            EstimateMemoryRequest(**{**base, "recompute_modules": ["gdn_norm_out", label]})
        )
    except InputError:
        return
    if before.peak_gib is not None:
        assert after.peak_gib <= before.peak_gib + 1e-3


anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.lists(st.text(max_size=8), max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(
    data=st.dictionaries(
        st.sampled_from(
            [
                "num_gpus",
                "tp",
                "cp",
                "pp",
                "vpp",
                "ep",
                "gbs",
                "mbs",
                "seq_len",
                "gpu",
                "pipeline_layout",
                "overhead_gib",
                "optimizer_cpu_offload_fraction",
                "recompute_modules",
                "recompute_granularity",
                "recompute_method",
                "recompute_num_layers",
                "cross_entropy_fusion",
                "activation_offload",
                "cuda_graph_modules",
                "precision",
                "bogus",
            ]
        ),
        anything,
        max_size=8,
    ),
    model=st.sampled_from(model_ids()),
)
def test_no_generated_input_makes_the_memory_tools_raise_anything_else(data, model):
    data.setdefault("model", model)
    data.setdefault("num_gpus", 64)
    for request, fn in ((EstimateMemoryRequest, estimate_memory), (PickRecomputeRequest, pick_recompute)):
        with contextlib.suppress(ValidationError, InputError):
            fn(request.model_validate(data))
