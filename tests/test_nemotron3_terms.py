"""What LatentMoE and the repeated hybrid MTP block change (issue 24): the rules they add, the memory and step-time
terms at the latent width, the MTP depths, and Megatron's model FLOPs for hybrids, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules import run
from moe_long_context.engine.step_time import model_flops_per_token, step_time
from moe_long_context.memory.activations import shard_of
from moe_long_context.memory.hybrid_layers import layer_inventory
from moe_long_context.memory.weights import rank_params
from moe_long_context.model.catalog import load_model
from moe_long_context.model.params import mtp_layer_params

SUPER_JSON = json.loads((Path(__file__).parent / "data" / "hf" / "nemotron-3-super.json").read_text())
# the Bridge 0.6.2 64-H100 Super layout (recipes/nemotronh/h100/nemotron_3_super.py:160-247)
SUPER = dict(model="nemotron-3-super", gpu="h100", num_gpus=64, seq_len=4096, tp=1, pp=2, ep=32, gbs=1280,
             mtp_num_layers=2, dispatcher="flex-hybridep")  # fmt: skip


def ctx_of(**kw):
    return build_context(TrainingConfig(**{**SUPER, **kw}))


def codes(**kw) -> dict[str, Severity]:
    return {f.code: f.severity for f in run(ctx_of(**kw))}


def without_latent() -> dict:
    return {k: v for k, v in SUPER_JSON.items() if k != "moe_latent_size"}


def test_latent_moe_refuses_shared_expert_overlap():
    """MCore moe_layer.py:469-475: a LatentMoE layer raises in training with shared-expert overlap."""
    assert codes(moe_shared_expert_overlap=True).get("LATENT_MOE_SHARED_EXPERT_OVERLAP") is Severity.error
    assert "LATENT_MOE_SHARED_EXPERT_OVERLAP" not in codes()
    nano = dict(model="nemotron-3.5-lightning", ep=8, num_gpus=16, gbs=16)  # no latent: overlap is legal
    assert "LATENT_MOE_SHARED_EXPERT_OVERLAP" not in codes(**nano, moe_shared_expert_overlap=True)


def test_the_mtp_block_is_not_captured_by_per_layer_graphs():
    """cuda_graphs.py:2043-2050, 2174-2179: the hybrid MTP block is a HybridStack, not a graphable layer."""
    graphs = dict(cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn", "mamba", "moe_router"])
    assert codes(**graphs).get("MTP_BLOCK_NOT_GRAPHED") is Severity.info
    assert "MTP_BLOCK_NOT_GRAPHED" not in codes()
    assert "MTP_BLOCK_NOT_GRAPHED" not in codes(**graphs, mtp_num_layers=0)


def test_expert_tokens_and_dispatch_run_at_the_latent_width():
    latent, full = ctx_of(), ctx_of(model=without_latent())
    for ctx, width in ((latent, 1024), (full, 4096)):
        sh = shard_of(ctx)
        inv = {s.name: s.bytes for s in layer_inventory(ctx, sh, 1)}
        assert (
            inv["permuted tokens (expert fc1 input)"] == 2 * 22 * width * 4096
        )  # BF16 x top-k x width x tokens
        assert ("combined latent tokens (fc2_latent_proj input)" in inv) is (width == 1024)
    # EP all-to-all volume is top-k x width per token: a quarter at 1024 of 4096
    ep = step_time(latent).terms["ep_comm"] / step_time(full).terms["ep_comm"]
    assert ep == pytest.approx(1024 / 4096)


def test_mtp_depths_share_one_block_of_weights():
    ctx = ctx_of()
    block = mtp_layer_params(ctx.model)
    one, two = rank_params(ctx, [], 1, False, True), rank_params(ctx, [], 2, False, True)
    assert one == two  # the repeated block: its weights once, however many depths
    assert one.experts == block.experts / 32  # EP 32
    unrepeated = dict(SUPER_JSON, mtp_use_repeated_layer=False)
    assert rank_params(ctx_of(model=unrepeated), [], 2, False, True).experts == 2 * block.experts / 32


def test_megatron_hybrid_model_flops_by_hand():
    """Megatron-LM training.py:428-545 hybrid_flops (Bridge flop_utils.py:655-749): layers by symbol, the MTP block
    per depth, Mamba with d_in = 2 h, MoE without the router, LatentMoE experts on 1024-wide tokens."""
    h, s, d_in = 4096, 4096, 8192
    attention = 4 * 4096 * (h + h * 2 / 32) + 2 * s * 4096  # 32 heads x 128 = 4096, 2 KV groups
    mamba = 2 * h * (2 * d_in + 2 * 8 * 128 + 128) + 7 * d_in * 128 + 2 * d_in * h
    moe = 4 * 1024 * 2688 * 22 + 4 * h * 1024 + 4 * h * 5376
    logits = 2 * h * 131072
    depths = 2
    expected = 3 * (40 * mamba + (40 + depths) * moe + (8 + depths) * attention + (1 + depths) * logits)
    assert model_flops_per_token(load_model("nemotron-3-super"), s, depths) == pytest.approx(expected)


LIGHTNING_FSDP = dict(model="nemotron-3.5-lightning", gpu="gb200", num_gpus=8, seq_len=8192, ep=8, gbs=512,
                      mtp_num_layers=2, use_megatron_fsdp=True)  # fmt: skip


def test_megatron_fsdp_refuses_per_layer_graphs_with_ep_overlap():
    """mcore_fsdp_adapter.py:168-178: the 1F1B EP overlap under Megatron-FSDP needs none or full_iteration graphs."""
    overlap = dict(LIGHTNING_FSDP, ep_overlap=True)

    def found(**kw):
        return {f.code: f.severity for f in run(build_context(TrainingConfig(**{**overlap, **kw})))}

    assert (
        found(cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"]).get("FSDP_EP_OVERLAP_GRAPHS")
        is Severity.error
    )
    assert "FSDP_EP_OVERLAP_GRAPHS" not in found(
        cuda_graph_impl="full_iteration", check_for_nan_in_loss=False
    )
    assert "FSDP_EP_OVERLAP_GRAPHS" not in found(
        cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"], use_megatron_fsdp=False
    )
    assert found(use_distributed_optimizer=False).get("FSDP_SETS_OPTIMIZER") is Severity.info
    assert found(launcher="megatron-lm").get("FSDP_LM_CKPT_FORMAT") is Severity.warning


def test_megatron_fsdp_shards_weights_and_gradients():
    from moe_long_context.memory.rank_memory import memory_model

    ctx = build_context(TrainingConfig(**LIGHTNING_FSDP))
    rank = memory_model(ctx).ranks[0]
    terms = {t.name: t.bytes for t in rank.terms}
    p = rank_params(ctx, rank.layers, rank.mtp_layers, True, True)
    share = p.dense / 8 + p.experts / 1  # DP 8 for the dense weights, EDP 1 for the experts (EP 8 of 8 GPUs)
    assert terms["parameters (Megatron-FSDP shard)"] == pytest.approx(2 * share)
    assert terms["gradients (Megatron-FSDP shard)"] == pytest.approx(4 * share)  # FP32 main gradients
    assert terms["Megatron-FSDP all-gathered units"] == pytest.approx(2 * 2 * p.largest_layer)
    plain = {
        t.name: t.bytes
        for t in memory_model(build_context(TrainingConfig(**dict(LIGHTNING_FSDP, use_megatron_fsdp=False))))
        .ranks[0]
        .terms
    }
    assert plain["parameters"] == pytest.approx(2 * (p.dense + p.experts))


def test_mxfp8_parameter_gather_needs_buffer_reuse_only_without_fsdp():
    """Bridge training/config.py:1349-1359 asserts reuse_grad_buf_for_mxfp8_param_ag for MXFP8 parameter gathering
    only when Megatron-FSDP is off; with it on, Bridge turns the reuse off itself (:1090-1094)."""
    mx = dict(
        LIGHTNING_FSDP, precision="mxfp8", fp8_param_gather=True, reuse_grad_buf_for_mxfp8_param_ag=False
    )

    def errors(**kw):
        ctx = build_context(TrainingConfig(**{**mx, **kw}))
        return {f.code for f in run(ctx) if f.severity is Severity.error}

    assert "PRECISION_PARAM_GATHER" not in errors()
    assert "PRECISION_PARAM_GATHER" in errors(use_megatron_fsdp=False)
    assert "PRECISION_PARAM_GATHER" not in errors(
        use_megatron_fsdp=False, reuse_grad_buf_for_mxfp8_param_ag=True
    )


def test_the_planner_offers_hybrids_no_vpp_and_no_gpt_split():
    from moe_long_context.tools.plan_search import HYBRID_IGNORES, _split_options

    options = _split_options(load_model("nemotron-3-super"), 8, 2, {})  # 88 layers: 11 per stage
    assert options and all(vpp is None and not set(split) & HYBRID_IGNORES for vpp, split in options)
    gpt = _split_options(load_model("deepseek-v3"), 8, 1, {})
    assert any(vpp for vpp, _ in gpt)


# Model TFLOP/s per GPU and step time Bridge r0.6.0's verification cards measured (examples/model_verification_cards/
# <model>/card.yaml): Bridge counts the FLOPs with its hybrid formula, so FLOPs per token = TFLOP/s x GPUs x step /
# tokens must equal the engine's count.
CARD_FLOPS = [  # (model, seq, TFLOP/s per GPU, GPUs, step ms, tokens per step, card lines)
    ("nemotron-3-super", 4096, 248.610, 64, 27588.580, 1280 * 4096),  # nemotron-3-super-120b-a12b :640-670
    ("nemotron-3-super", 8192, 559.390, 64, 9926.350, 512 * 8192),  # nemotron-3-super-120b-a12b :671-700
    ("nemotron-3.5-lightning", 8192, 200.180, 16, 36869.270, 512 * 8192),  # nemotron-3.5-lightning :150-192
    ("nemotron-3.5-lightning", 8192, 686.920, 8, 21483.630, 512 * 8192),  # nemotron-3.5-lightning :193-234
]


@pytest.mark.parametrize(("model", "seq", "tflops", "gpus", "step_ms", "tokens"), CARD_FLOPS)
def test_model_flops_are_the_ones_bridge_reports(model, seq, tflops, gpus, step_ms, tokens):
    measured = tflops * 1e12 * gpus * step_ms / 1e3 / tokens
    assert model_flops_per_token(load_model(model), seq, 2) == pytest.approx(measured, rel=1e-3)
