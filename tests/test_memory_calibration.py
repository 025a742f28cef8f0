"""The memory model against measured numbers: Megatron's functional-test goldens, Bridge's Moonlight study, and
the seeds' published layouts on their GPUs.

Measured values are PyTorch *allocated* peaks (torch.cuda.memory_stats), which exclude the CUDA context, NCCL
buffers and allocator fragmentation, so those comparisons use overhead_gib=0. GB here is 1e9 bytes, as both
sources report it.
"""

from __future__ import annotations

import pytest

from conftest import error_codes
from moe_long_context.engine.config import RECOMPUTE_MODULES, TrainingConfig
from moe_long_context.engine.context import Context, build_context
from moe_long_context.engine.representative import representative_layouts
from moe_long_context.engine.rules import run
from moe_long_context.memory.overhead import outside_pytorch_gib
from moe_long_context.memory.rank_memory import memory_model
from moe_long_context.model.specs import ModelSpec
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory
from moe_long_context.tools.pick_recompute import PickRecomputeRequest, pick_recompute

# --------------------------------------------------------------------------- dense 7B functional tests
# Megatron-LM core_r0.19.0 tests/functional_tests/test_cases/gpt/gpt3_7b_{tp1_pp4,tp4_pp1}_memory_speed:
# 32 layers, hidden 4096, 32 heads with 8 query groups, no --swiglu (GELU, ffn 4h = 16384), no
# --normalization (LayerNorm), no --position-embedding-type (learned absolute, 8192 positions), biases on,
# dropout 0.1, untied embeddings, vocab 131073, seq 8192, BF16, distributed optimizer, TE, 8 GPUs.
GPT3_7B = ModelSpec(
    id="gpt3-7b-functional-test",
    name="GPT-3 7B (Megatron functional test)",
    family="gpt",
    num_layers=32,
    hidden_size=4096,
    vocab_size=131073,
    tie_embeddings=False,
    max_position_embeddings=8192,
    add_bias_linear=True,
    gated_linear_unit=False,
    normalization="LayerNorm",
    position_embedding_type="learned_absolute",
    hidden_dropout=0.1,
    attention="gqa",
    num_attention_heads=32,
    num_query_groups=8,
    head_dim=128,
    attention_layer_types=("full",) * 32,
    ffn_hidden_size=16384,
    num_experts=0,
)


def _gpt3_7b(**layout) -> float:
    cfg = TrainingConfig(
        model="gpt3-7b-functional-test",
        launcher="megatron-lm",  # pads the vocabulary to 128 x TP
        num_gpus=8,
        seq_len=8192,
        cross_entropy_fusion="none",  # no --cross-entropy-loss-fusion in the test
        overhead_gib=0,  # the golden is PyTorch's allocated peak
        **layout,
    )
    mm = memory_model(Context(cfg=cfg, model=GPT3_7B, gpu=None))
    # Megatron logs memory on the last rank (tensorboard writer on rank world_size - 1: the last PP stage).
    return mm.ranks[-1].total / 1e9


@pytest.mark.parametrize(
    ("layout", "measured_gb"),
    [
        # golden_values_dev_dgx_h100.json mem-max-allocated-bytes, iterations 2-25: 60720852992
        (dict(tp=1, pp=4, vpp=8, mbs=1, gbs=8), 60.720852992),  # --num-layers-per-virtual-pipeline-stage 1
        # 57143791616, TP4 without sequence parallelism
        (dict(tp=4, pp=1, mbs=2, gbs=8, sequence_parallel=False), 57.143791616),
    ],
)
def test_dense_7b_functional_test_goldens_within_10_percent(layout, measured_gb):
    estimate = _gpt3_7b(**layout)
    assert estimate == pytest.approx(measured_gb, rel=0.10)
    # The model lands within 2 % today (60.15 vs 60.72, 56.90 vs 57.14 GB): keep it there.
    assert estimate == pytest.approx(measured_gb, rel=0.02)


# --------------------------------------------------------------------------- Moonlight-16B recompute table
# Megatron Bridge skills/nemo-mbridge-perf-activation-recompute (study 2026-08-12): Moonlight-16B-A3B BF16
# pretraining recipe (moonlight_16b_pretrain_8gpu_h100_bf16_config) on 8 H100, seq 4096, MBS1 GBS4, TP2 (SP)
# PP1 CP1 EP8, alltoall dispatcher, precision-aware optimizer with BF16 moments and BF16 gradients,
# shared-expert overlap, TE cross entropy. Peak allocated GB by recompute_modules.
MOONLIGHT_ROWS = {
    (): 36.618,
    ("core_attn",): 36.614,
    ("mla_up_proj",): 35.902,
    ("mla_up_proj", "mlp"): 35.917,
    ("moe_act",): 35.941,
    ("layernorm", "moe_act"): 35.949,
}
MEASUREMENT_NOISE_GB = 0.05  # rows closer than this in the study are treated as ties


def _moonlight(modules: tuple[str, ...]) -> float:
    cfg = TrainingConfig(
        model="moonlight-16b-a3b",
        gpu="h100",
        num_gpus=8,
        seq_len=4096,
        tp=2,
        cp=1,
        pp=1,
        ep=8,
        mbs=1,
        gbs=4,
        sequence_parallel=True,
        use_precision_aware_optimizer=True,
        grad_reduce_in_fp32=False,
        moe_shared_expert_overlap=True,
        cross_entropy_fusion="te",
        overhead_gib=0,
        recompute_granularity="selective",
        recompute_modules=list(modules),
    )
    return memory_model(build_context(cfg)).ranks[0].total / 1e9


MOONLIGHT = {modules: _moonlight(modules) for modules in MOONLIGHT_ROWS}
CONTROL = ()


@pytest.mark.parametrize("modules", [m for m in MOONLIGHT_ROWS if m != CONTROL and "layernorm" not in m])
def test_moonlight_recompute_savings_within_half_a_gb(modules):
    """What each label saves against the no-recompute control, estimated vs measured."""
    measured = MOONLIGHT_ROWS[CONTROL] - MOONLIGHT_ROWS[modules]
    estimated = MOONLIGHT[CONTROL] - MOONLIGHT[modules]
    assert estimated == pytest.approx(measured, abs=0.5)


def test_moonlight_same_ordering_where_the_study_tells_rows_apart():
    rows = list(MOONLIGHT_ROWS)
    for a in rows:
        for b in rows:
            if MOONLIGHT_ROWS[a] - MOONLIGHT_ROWS[b] > MEASUREMENT_NOISE_GB:
                assert MOONLIGHT[a] > MOONLIGHT[b], (a, b)
    # core_attn frees only the FP32 softmax statistics under fused attention (study: -0.01 %).
    assert 0 < MOONLIGHT[CONTROL] - MOONLIGHT[("core_attn",)] < 0.01


# Not a fusion question: in Megatron Core (24bad8e, the study's revision) the default MLA spec keeps the input
# norm a separate TENorm (gpt_layer_specs.py, mla_down_proj_fusion=False) and MoE layers a separate pre-MLP
# norm, and transformer_layer.py discards both outputs under "layernorm". The study's recompute rows all sit at
# 35.90-35.95 GB, and "mlp" (dense layer 0, whose ~0.15 GB is held through the whole forward and backward) frees
# nothing either: the recompute rows look capped by a second peak that layer activations do not set.
@pytest.mark.xfail(
    strict=True,
    reason="known gap: layernorm recompute frees ~0.43 GB in the model, 0 in the study; the study's recompute "
    "rows all sit at 35.90-35.95 GB (mlp on dense layer 0 frees nothing too), so their peak is probably set "
    "outside the layer activations",
)
def test_moonlight_layernorm_row_within_half_a_gb():
    measured = MOONLIGHT_ROWS[CONTROL] - MOONLIGHT_ROWS[("layernorm", "moe_act")]
    estimated = MOONLIGHT[CONTROL] - MOONLIGHT[("layernorm", "moe_act")]
    assert estimated == pytest.approx(measured, abs=0.5)


# Checked against Megatron Core 24bad8e / Bridge 600d069 (the study's revisions) and TE 2.14, and found as
# modelled: the master weights are 16-bit remainders (OptimizerConfig.store_param_remainders=True; FusedAdam
# gets master_weights=True and its shard params are BF16 views); BF16 moments are updated in place
# (fuse_unscale), so the step has no FP32 temporaries; the decoupled gradients are views of the BF16 grad buffer;
# DDP holds one BF16 param and one BF16 grad buffer; the alltoall/permute-fusion path, the grouped GEMMs, MLA
# (q, k, v after RoPE) and TE cross entropy save no copies beyond the inventory.
@pytest.mark.xfail(
    strict=True,
    reason="known gap: absolute Moonlight peaks are ~6 GB above the tensor inventory (static 22.3 GB + "
    "~8.4 GB activations); no missing allocation found in MCore 24bad8e / TE 2.14 source",
)
@pytest.mark.parametrize("modules", list(MOONLIGHT_ROWS))
def test_moonlight_absolute_peak_within_half_a_gb(modules):
    assert MOONLIGHT[modules] == pytest.approx(MOONLIGHT_ROWS[modules], abs=0.5)


# --------------------------------------------------------------------------- the seeds' layouts fit
# The seeds' three layouts as engine/layouts.yaml publishes them (the same configurations SKILL.md states):
# DeepSeek-V3 at 128K/256K on H100 with fp8-blockwise, DeepEP, recompute mla_up_proj/layernorm/moe/mlp and
# optimizer CPU offload; Qwen3-235B-A22B at 128K on GB200 with MXFP8, HybridEP, recompute moe_act/layernorm
# and attn/moe_router/moe_preprocess graphs (the seed allows BF16 too; BF16 is estimated not to fit).
PUBLISHED = {layout.id: layout.config for layout in representative_layouts()}
QWEN_128K = PUBLISHED["qwen3-235b-a22b-128k-gb200"]
# DeepSeek-V3 at 128K without its recompute and its optimizer offload.
DSV3_128K = {
    k: v
    for k, v in PUBLISHED["deepseek-v3-128k-h100"].items()
    if k not in ("recompute_granularity", "recompute_modules", "optimizer_cpu_offload_fraction")
}


@pytest.mark.parametrize("config", PUBLISHED.values(), ids=PUBLISHED.keys())
def test_seed_layouts_fit_their_gpus(config):
    r = estimate_memory(EstimateMemoryRequest(**config))
    assert r.valid, error_codes(r)
    assert r.fits and r.peak_gib <= r.usable_gib
    assert "MEMORY_OVER_BUDGET" not in [f.code for f in r.findings]
    # the measured overhead beyond the tensors (allocator cache and memory outside PyTorch) and the MoE assumptions
    # are part of the answer
    outside = outside_pytorch_gib(config.get("dispatcher"))
    assert outside == 8.94  # overhead.yaml: the tightest bound of the measured runs
    assert r.overhead_gib > outside and any("outside PyTorch" in a for a in r.assumptions)
    assert any("balanced routing" in a for a in r.assumptions)


def test_qwen3_in_bf16_is_estimated_not_to_fit():
    r = estimate_memory(EstimateMemoryRequest(**{**QWEN_128K, "precision": "bf16"}))
    assert not r.fits and "MEMORY_OVER_BUDGET" in [f.code for f in r.findings]


def test_dsv3_128k_without_offload_and_recompute_does_not_fit_and_pick_recompute_fixes_it():
    bare = estimate_memory(EstimateMemoryRequest(**DSV3_128K))
    assert bare.valid and not bare.fits and bare.peak_gib > 1.5 * bare.usable_gib
    picked = pick_recompute(PickRecomputeRequest(**DSV3_128K))
    assert picked.fits and picked.peak_gib_after <= picked.usable_gib
    assert picked.peak_gib_before == bare.peak_gib
    assert (
        set(picked.recompute_modules) <= set(RECOMPUTE_MODULES)
        and "core_attn" not in picked.recompute_modules
    )
    # Megatron accepts it: the chosen configuration has no error finding in any rule family.
    chosen = TrainingConfig(
        **DSV3_128K,
        recompute_granularity=picked.recompute_granularity,
        recompute_modules=picked.recompute_modules or None,
        recompute_method=picked.recompute_method,
        recompute_num_layers=picked.recompute_num_layers,
    )
    assert not [f for f in run(build_context(chosen)) if f.severity.value == "error"]
    again = estimate_memory(EstimateMemoryRequest(**chosen.model_dump(exclude_unset=True)))
    assert again.fits and again.peak_gib == picked.peak_gib_after
