"""The per-layer step-time inputs beyond GEMM FLOPs (engine/step_time_layers.py) and NVFP4's measured GEMM rate
(evals/calibration/fp4_rate.py), by hand."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.representative import nemotron3_recipes
from moe_long_context.engine.step_time import step_time
from moe_long_context.engine.step_time_layers import bf16_edge_layers, mlp_elementwise_bytes
from moe_long_context.engine.sustained_rate import fp4_over_fp8, fp4_over_fp8_as, fp4_table
from moe_long_context.evals.calibration.corpus import load_corpus
from moe_long_context.evals.calibration.fp4_rate import fp4_rate, measured_pairs, solve
from moe_long_context.model.catalog import load_gpu, load_model
from moe_long_context.tools.estimate_throughput import estimate_throughput_config

# Bridge 0.6.2's GB300 Super layout (perf_recipes/nemotronh/gb300/nemotronh.py:151-182), one PP stage
SUPER_GB300 = dict(model="nemotron-3-super", gpu="gb300", num_gpus=64, seq_len=8192, tp=1, pp=1, ep=64, mbs=1,
                   gbs=512, mtp_num_layers=2, dispatcher="flex-hybridep", precision="mxfp8")  # fmt: skip


def ctx_of(**kw):
    return build_context(TrainingConfig(**{**SUPER_GB300, **kw}))


def test_mlp_elementwise_bytes_by_hand():
    """6 bytes per fc1 output element and 4 per activation element, per token (dense, shared) or routed copy
    (top-k), plus 8 per element of the routed token at the expert's input width."""
    sup, dsv3 = load_model("nemotron-3-super"), load_model("deepseek-v3")
    # Super: squared ReLU (fc1 = ffn), shared expert 5376, 22 routed copies of 2688 at the 1024 latent width
    assert mlp_elementwise_bytes(sup, True, "none") == (10 * 5376, 22 * (10 * 2688 + 8 * 1024))
    assert mlp_elementwise_bytes(sup, False, "mamba") == (0.0, 0.0)  # a mixer layer has no MLP
    # DeepSeek-V3: SwiGLU (fc1 = 2 x ffn), shared 2048, 8 routed copies of 2048 at the 7168 hidden size
    assert mlp_elementwise_bytes(dsv3, True, "full") == (16 * 2048, 8 * (16 * 2048 + 8 * 7168))
    assert mlp_elementwise_bytes(dsv3, False, "full") == (16 * 18432, 0.0)  # its three dense layers


def test_memory_bound_term_of_one_moe_layer_by_hand():
    """One Super MoE layer and microbatch on GB300: (48 x hidden + shared + routed) bytes x 8192 tokens at HBM
    speed (TP1, ETP1: every token is the rank's own)."""
    hbm = load_gpu("gb300").hbm_bandwidth_tbps * 1e12
    layer = step_time(ctx_of()).layer_terms[("none", True)]
    per_token = 48 * 4096 + 10 * 5376 + 22 * (10 * 2688 + 8 * 1024)
    assert layer["memory_bound"] == pytest.approx(per_token * 8192 / hbm, rel=1e-9)


def test_bf16_edge_layers_follow_megatron_core():
    """fp8_utils.is_first_last_bf16_layer / fp4_utils.get_fp4_context: decoder layer numbers below the start count
    or within the end count of num_layers run without the quantization context; the flag off or BF16, none."""
    assert bf16_edge_layers(ctx_of()) == frozenset()
    assert bf16_edge_layers(ctx_of(first_last_layers_bf16=True)) == {
        0,
        87,
    }  # Megatron Core's defaults: 1 and 1
    assert bf16_edge_layers(ctx_of(precision="bf16", first_last_layers_bf16=True)) == frozenset()
    edge = ctx_of(precision="nvfp4", first_last_layers_bf16=True, num_layers_at_start_in_bf16=0,
                  num_layers_at_end_in_bf16=14)  # fmt: skip  # the Super NVFP4 recipe's
    assert bf16_edge_layers(edge) == frozenset(range(74, 88))


def test_bf16_edge_layers_run_their_gemms_at_the_bf16_rate():
    """MXFP8 on GB300 runs GEMMs at 50 % of 5,000 TFLOP/s, BF16 at 62 % of 2,500: an edge layer's GEMM time
    grows by 2500 / 1550; nothing else in the step moves."""
    plain, edged = ctx_of(), ctx_of(first_last_layers_bf16=True, num_layers_at_start_in_bf16=0,
                                    num_layers_at_end_in_bf16=14)  # fmt: skip
    a, b = step_time(plain), step_time(edged)
    m = plain.model
    gemm = sum(a.layer_terms[(m.attention_layer_types[i], m.moe_layers[i])]["gemm"] for i in range(74, 88))
    microbatches = 512 // 64
    assert b.terms["gemm"] - a.terms["gemm"] == pytest.approx(
        microbatches * gemm * (2500 / 1550 - 1), rel=1e-9
    )
    assert {k: v for k, v in b.terms.items() if k != "gemm"} == pytest.approx(
        {k: v for k, v in a.terms.items() if k != "gemm"}, rel=1e-12
    )


def test_nvfp4_pairs_are_the_super_runs_that_differ_only_in_precision():
    pairs = measured_pairs(load_corpus())
    assert len(pairs) == 10
    for mx, nv in pairs:
        assert (mx.model, mx.container, mx.config["gpu"]) == (nv.model, nv.container, nv.config["gpu"])
        assert mx.config["precision"] == "mxfp8" and nv.config["precision"] == "nvfp4"
        assert nv.config["num_layers_at_end_in_bf16"] == 14


def test_the_solved_rate_reproduces_each_measured_ratio():
    """At the solved FP4 / FP8 rate the estimated NVFP4 / MXFP8 tokens/s ratio is the measured one."""
    mx, nv = measured_pairs(load_corpus())[0]
    x = solve(mx, nv)
    assert 1.0 < x < 2.0  # far below GB200's nominal 2x FP4 / FP8 peak ratio
    with fp4_over_fp8_as(x):
        step_nv = estimate_throughput_config(nv.training_config()).step_s
    step_mx = estimate_throughput_config(mx.training_config()).step_s
    measured = nv.measured.tokens_per_s_per_gpu / mx.measured.tokens_per_s_per_gpu
    assert step_mx / step_nv == pytest.approx(measured, rel=1e-3)  # step_s is rounded to 0.1 ms


def test_the_committed_rate_is_the_median_of_the_pairs():
    table = fp4_rate(load_corpus())
    assert fp4_table() == table  # engine/fp4_rate.yaml is current (also held by test_calibration)
    assert table["over_fp8"] == pytest.approx(statistics.median(table["solved"].values()), abs=1e-3)
    assert fp4_over_fp8() == table["over_fp8"]
    # measured: NVFP4 trains 0-4 % faster than MXFP8 at the same settings
    assert all(1.0 <= r <= 1.05 for r in table["measured_nvfp4_over_mxfp8"].values())


def test_the_docs_quote_the_committed_rate():
    """README and the precision reference state the FP4 / FP8 rate engine/fp4_rate.yaml holds."""
    root = Path(__file__).resolve().parents[1]
    quoted = f"{fp4_over_fp8():.2f}x"
    for doc in ("README.md", "references/dispatch-precision-offload.md"):
        text = " ".join((root / doc).read_text().split())
        assert (
            f"those pairs give ({quoted})" in text
            or f"those pairs give (`engine/fp4_rate.yaml`, {quoted}" in text
        ), doc


def test_the_nvfp4_recipes_carry_their_presets_bf16_layers():
    """Bridge 0.6.2 training/mixed_precision.py:421-442, as the precision reference quotes: the Super NVFP4 preset
    keeps the last 14 layers in BF16, Ultra's the last 16, neither any at the start; other recipes set none."""
    seen = set()
    for recipe in nemotron3_recipes():
        c = TrainingConfig(**recipe.config)
        if c.precision == "nvfp4" and c.model in ("nemotron-3-super", "nemotron-3-ultra"):
            end = {"nemotron-3-super": 14, "nemotron-3-ultra": 16}[c.model]
            assert (c.first_last_layers_bf16, c.num_layers_at_start_in_bf16, c.num_layers_at_end_in_bf16) == (
                True, 0, end), recipe.id  # fmt: skip
            seen.add(c.model)
        else:
            assert not c.first_last_layers_bf16, recipe.id
    assert seen == {"nemotron-3-super", "nemotron-3-ultra"}
