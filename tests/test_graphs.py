"""validate_cuda_graph_shapes: the CUDA-graph rules of Megatron Core 0.19 and Bridge 0.6, and the shapes."""

from __future__ import annotations

import pytest

from conftest import error_codes, the
from moe_long_context.engine.findings import Severity
from moe_long_context.tools.validate_cuda_graph_shapes import (
    ValidateCudaGraphsRequest,
    validate_cuda_graph_shapes,
)

# 94 layers + embedding + loss = 96 = 4 PP ranks x 12 virtual stages x 2 (a split Megatron accepts, so the
# pipeline rules every tool applies stay quiet)
QWEN = dict(
    model="qwen3-235b-a22b",
    seq_len=131072,
    tp=4,
    cp=4,
    pp=4,
    vpp=12,
    ep=32,
    num_gpus=128,
    gbs=16,
    account_for_embedding_in_pipeline_split=True,
    account_for_loss_in_pipeline_split=True,
)
TE = dict(cuda_graph_impl="transformer_engine")


def graphs(**kw):
    return validate_cuda_graph_shapes(ValidateCudaGraphsRequest(**kw))


def test_seed_qwen_setting_is_valid_with_static_shapes():
    r = graphs(
        **QWEN, **TE, cuda_graph_modules=["attn", "moe_router", "moe_preprocess"], dispatcher="flex-hybridep"
    )
    assert r.valid, error_codes(r)
    shape = r.captured_shapes[0]
    # [seq / CP / TP (SP on), MBS, hidden] = [131072 / 4 / 4, 1, 4096]
    assert shape.shape == [8192, 1, 4096] and shape.dtype == "bfloat16"
    assert r.microbatches_captured == 8  # PP > 1: every microbatch (16 / (1 x DP 2))
    assert any("seq_len fixed at 131072" in s for s in r.static_requirements)


def test_no_pp_captures_one_microbatch():
    r = graphs(
        model="qwen3-30b-a3b", seq_len=8192, ep=8, num_gpus=8, gbs=64, **TE, cuda_graph_modules=["attn"]
    )
    assert r.microbatches_captured == 1 and r.captured_shapes[0].shape == [8192, 1, 2048]


@pytest.mark.parametrize(
    ("settings", "code"),
    [
        (
            {
                "cuda_graph_modules": ["moe", "moe_router"],
                "moe_capacity_factor": 1.0,
                "moe_pad_expert_input_to_capacity": True,
            },
            "GRAPH_MOE_AND_ROUTER",
        ),
        ({"cuda_graph_modules": ["moe"]}, "GRAPH_MOE_NEEDS_DROP_PAD"),
        ({"cuda_graph_modules": ["mlp"]}, "GRAPH_MLP_ALL_MOE"),
        ({"cuda_graph_modules": ["moe_preprocess"]}, "GRAPH_PREPROCESS_NEEDS_ROUTER"),
        (
            {
                "cuda_graph_modules": ["attn"],
                "recompute_granularity": "full",
                "recompute_method": "uniform",
                "recompute_num_layers": 1,
            },
            "GRAPH_FULL_RECOMPUTE",
        ),
        (
            {
                "cuda_graph_modules": ["moe"],
                "moe_capacity_factor": 1.0,
                "moe_pad_expert_input_to_capacity": True,
                "activation_offload": ["expert_fc1"],
            },
            "GRAPH_ACTIVATION_OFFLOAD",
        ),
        (
            {
                "cuda_graph_modules": ["moe_router"],
                "recompute_granularity": "selective",
                "recompute_modules": ["moe"],
            },
            "GRAPH_MOE_RECOMPUTE_ROUTER",
        ),
        ({"cuda_graph_modules": ["attn"], "expandable_segments": True}, "GRAPH_EXPANDABLE_SEGMENTS"),
        ({"cuda_graph_modules": ["attn"], "variable_seq_lengths": True}, "GRAPH_STATIC_SHAPES"),
        ({"cuda_graph_modules": ["router"]}, "GRAPH_MODULE_UNKNOWN"),
        (
            {"cuda_graph_modules": ["moe_router", "moe_preprocess"], "moe_capacity_factor": 1.0},
            "GRAPH_PREPROCESS_D2H",
        ),
        (
            {"cuda_graph_modules": ["moe_router"], "ep_overlap": True},
            None,
        ),  # legal: EP overlap without moe/mlp
        (
            {
                "cuda_graph_modules": ["moe_router", "moe_preprocess"],
                "moe_router_padding_for_quantization": True,
                "precision": "fp8-blockwise",
            },
            None,
        ),  # legal: MCore transformer_config.py:2512-2516 reads only the deprecated moe_router_padding_for_fp8
    ],
)
def test_each_graph_rule_is_an_error_with_a_fix(settings, code):
    r = graphs(**QWEN, **TE, **settings)
    if code is None:
        assert r.valid, error_codes(r)
        return
    assert code in error_codes(r), [(f.code, f.message) for f in r.findings]
    f = next(f for f in r.findings if f.code == code)
    assert f.fix and f.source.startswith(("MCore", "LM", "Bridge"))


def test_full_iteration_rules():
    r = graphs(**QWEN, cuda_graph_impl="full_iteration", cuda_graph_modules=["attn"])
    assert {"GRAPH_FULL_ITERATION_MODULES", "GRAPH_FULL_ITERATION_NAN_CHECK"} <= set(error_codes(r))
    ok = graphs(
        **QWEN,
        cuda_graph_impl="full_iteration",
        check_for_nan_in_loss=False,
        recompute_granularity="full",
        recompute_method="uniform",
        recompute_num_layers=1,
    )
    assert ok.valid, error_codes(ok)


def test_activation_offload_with_scoped_local_graphs():
    r = graphs(**QWEN, cuda_graph_impl="local", cuda_graph_modules=["attn"], activation_offload=["core_attn"])
    assert {"GRAPH_ACTIVATION_OFFLOAD", "GRAPH_LOCAL_SCOPED_BRIDGE"} <= set(error_codes(r))


def test_deprecated_scope_values_are_migrated():
    r = graphs(
        **QWEN, cuda_graph_impl="local", cuda_graph_modules=["full_iteration"], check_for_nan_in_loss=False
    )
    assert r.cuda_graph_impl == "full_iteration" and r.valid
    assert the(r, "GRAPH_SCOPE_RENAMED").severity == Severity.info
    whole = graphs(**QWEN, **TE, cuda_graph_modules=["full"])
    assert whole.cuda_graph_modules == [] and "GRAPH_SCOPE_RENAMED" in [f.code for f in whole.findings]


def test_packed_sequences_need_padding_in_bridge():
    r = graphs(**QWEN, **TE, cuda_graph_modules=["attn", "moe_router"], packed_sequences=True)
    assert {"GRAPH_PACKED_PAD_TO_MAX", "GRAPH_PACKED_CU_SEQLENS"} <= set(error_codes(r))
    ok = graphs(
        **QWEN,
        **TE,
        cuda_graph_modules=["attn", "moe_router"],
        packed_sequences=True,
        pad_to_max_length=True,
        pad_cu_seqlens=True,
    )
    assert ok.valid, error_codes(ok)


def test_graphs_off_is_valid_and_captures_nothing():
    r = graphs(**QWEN)
    assert r.valid and r.captured_shapes == [] and r.microbatches_captured is None


def test_seq_divisibility_applies_to_shapes():
    r = graphs(**{**QWEN, "seq_len": 131080}, **TE, cuda_graph_modules=["attn"])
    assert "SEQ_CP_TP_DIVISIBILITY" in error_codes(r)


def test_scoped_local_graphs_are_a_bridge_only_refusal():
    # Bridge utils/cuda_graph.py:134-152 refuses scoped local graphs; Megatron Core 0.19
    # (transformer_config.py:2445-2519) and Megatron-LM's validate_args accept them.
    local = dict(QWEN, cuda_graph_impl="local", cuda_graph_modules=["attn"])
    assert "GRAPH_LOCAL_SCOPED_BRIDGE" in error_codes(graphs(**local))
    assert "GRAPH_LOCAL_SCOPED_BRIDGE" not in error_codes(graphs(**local, launcher="megatron-lm"))
