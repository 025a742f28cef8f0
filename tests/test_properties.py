"""Property tests: the folding identities hold whenever no error is reported; no input crashes a tool."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from moe_long_context.engine.findings import has_errors
from moe_long_context.errors import InputError
from moe_long_context.model.catalog import model_ids
from moe_long_context.tools.check_dp_budget import CheckDpBudgetRequest, check_dp_budget
from moe_long_context.tools.size_cp import SizeCpRequest, size_cp
from moe_long_context.tools.validate_cuda_graph_shapes import (
    ValidateCudaGraphsRequest,
    validate_cuda_graph_shapes,
)

pow2 = st.sampled_from([1, 2, 4, 8, 16, 32, 64])
models = st.sampled_from(model_ids())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=models,
    world=st.sampled_from([8, 16, 24, 32, 64, 96, 128, 256, 512, 1024]),
    tp=pow2,
    cp=pow2,
    pp=st.sampled_from([1, 2, 3, 4, 8, 16]),
    ep=pow2,
    vpp=st.sampled_from([None, 2, 4]),
    mbs=st.sampled_from([1, 2]),
    gbs=st.sampled_from([None, 64, 256, 1000, 1024]),
    seq=st.sampled_from([None, 4096, 32768, 131072, 200000]),
)
def test_no_error_means_both_folding_identities_hold(model, world, tp, cp, pp, ep, vpp, mbs, gbs, seq):
    r = check_dp_budget(
        CheckDpBudgetRequest(
            model=model, num_gpus=world, tp=tp, cp=cp, pp=pp, ep=ep, vpp=vpp, mbs=mbs, gbs=gbs, seq_len=seq
        )
    )
    if not has_errors(r.findings):
        assert tp * cp * r.dp * pp == world
        assert r.etp * ep * r.edp * pp == world
        assert r.min_gpus == pp * max(tp * cp, ep * r.etp) <= world
        assert r.num_microbatches * mbs * r.dp == r.gbs
    for alt in r.alternatives:
        assert alt.dp >= 1 and alt.edp >= 1


anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.lists(st.integers(-5, 100), max_size=5),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(
    data=st.dictionaries(
        st.sampled_from(
            [
                "model",
                "num_gpus",
                "tp",
                "cp",
                "pp",
                "vpp",
                "ep",
                "etp",
                "gbs",
                "mbs",
                "seq_len",
                "gpu",
                "pipeline_layout",
                "cp_comm_type",
                "hierarchical_cp_sizes",
                "sequence_parallel",
                "bogus",
            ]
        ),
        anything,
        max_size=8,
    ),
    model=models,
)
def test_no_generated_input_makes_a_tool_raise_anything_else(data, model):
    data.setdefault("model", model)
    for request, fn in (
        (CheckDpBudgetRequest, check_dp_budget),
        (SizeCpRequest, size_cp),
        (ValidateCudaGraphsRequest, validate_cuda_graph_shapes),
    ):
        with contextlib.suppress(ValidationError, InputError):
            fn(request.model_validate(data))


big = st.integers(1, 65536)


@settings(max_examples=200, deadline=None)
@given(
    model=models,
    world=big,
    tp=big,
    cp=big,
    pp=st.integers(1, 512),
    ep=big,
    seq=st.integers(1, 16 * 1024 * 1024),
    gbs=st.one_of(st.none(), st.integers(1, 10**6)),
    layout=st.one_of(
        st.none(), st.sampled_from(["Et|(tt|)*30mL", "E(t|)*4000L", "Et*999|tL", "((t|)*3)*2", "|||"])
    ),
)
def test_extreme_but_typed_inputs_answer_quickly(model, world, tp, cp, pp, ep, seq, gbs, layout):
    with contextlib.suppress(InputError):
        check_dp_budget(
            CheckDpBudgetRequest(
                model=model,
                num_gpus=world,
                tp=tp,
                cp=cp,
                pp=pp,
                ep=ep,
                seq_len=seq,
                gbs=gbs,
                pipeline_layout=layout,
            )
        )
    with contextlib.suppress(InputError):
        size_cp(SizeCpRequest(model=model, seq_len=seq, tp=tp, num_gpus=world))
    with contextlib.suppress(InputError):
        validate_cuda_graph_shapes(
            ValidateCudaGraphsRequest(
                model=model, seq_len=seq, tp=tp, cp=cp, pp=pp, ep=ep, cuda_graph_impl="transformer_engine"
            )
        )
