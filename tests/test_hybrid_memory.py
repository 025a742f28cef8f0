"""Memory terms of Mamba-2 and DSA layers (memory/hybrid_layers.py), by hand, and their names in estimate_memory."""

from __future__ import annotations

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.memory.activations import shard_of
from moe_long_context.memory.hybrid_layers import (
    dsa_inventory,
    dsa_transient,
    layer_inventory,
    mamba_inventory,
    mamba_transient,
)
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory

GIB = 1 << 30


def ctx_of(**cfg):
    return build_context(TrainingConfig(**cfg))


def nano(cp: int, seq: int = 131072):
    return ctx_of(
        model="nemotron-3-nano", gpu="h100", num_gpus=8 * cp, seq_len=seq, tp=1, cp=cp, ep=8, gbs=8 * cp
    )


def test_mamba_layer_inventory_by_hand():
    ctx = nano(cp=8)
    tok = 131072 // 8
    inv = {s.name: s.bytes for s in mamba_inventory(ctx, shard_of(ctx))}
    assert inv["layer input (residual)"] == 2 * 2688 * tok
    assert inv["Mamba norm output (in_proj input, norm fused into it)"] == (2 * 2688 + 4) * tok
    # z and x (2 x 4096), dt (64 heads), B and C (2 x 8 groups x 128 state)
    assert (
        inv["Mamba in_proj output z, x, B, C, dt (scan input, head-sharded)"] == 2 * (8192 + 64 + 2048) * tok
    )
    # the kernel gets z and no norm weight, so it keeps its ungated output (out_x) beside the gated one it returns
    assert inv["Mamba scan output before the z gate (the kernel keeps it for dz)"] == 2 * 4096 * tok
    assert inv["Mamba scan output (gated y, norm input)"] == 2 * 4096 * tok
    assert inv["Mamba norm output (out_proj input)"] == 2 * 4096 * tok
    assert inv["Mamba gated-norm statistics (FP32)"] == 4 * 8 * tok
    assert len(inv) == 7


def test_mamba_groups_repeat_when_cp_exceeds_them():
    """8 groups over CP 16: each rank holds one whole group for the whole sequence (mamba_context_parallel.py:119-124),
    i.e. 16 groups' worth per token of its CP shard."""
    ctx = nano(cp=16)
    tok = 131072 // 16
    inv = {s.name: s.bytes for s in mamba_inventory(ctx, shard_of(ctx))}
    assert (
        inv["Mamba in_proj output z, x, B, C, dt (scan input, head-sharded)"]
        == 2 * (8192 + 64 + 2 * 16 * 128) * tok
    )


def test_mamba_scan_states_transient():
    """FP32 [S / 128 chunks, 64 heads / CP, 64 head dim, 128 state] on each rank."""
    ctx = nano(cp=8)
    assert mamba_transient(ctx, shard_of(ctx)) == 4 * (131072 // 128) * (64 // 8) * 64 * 128 == GIB // 4


def test_mlp_only_hybrid_layer_keeps_its_input_under_full_recompute():
    ctx = nano(cp=8)
    inv = layer_inventory(ctx, shard_of(ctx), 1)  # E
    inputs = [s for s in inv if s.layer_input]
    assert [s.name for s in inputs] == ["MoE input (residual)"] and inputs[0].bytes == 2 * 2688 * 16384
    assert not any("attention" in s.name for s in inv)


def glm(cp: int = 32):
    return ctx_of(model="glm-5", gpu="gb200", num_gpus=192, seq_len=131072, tp=1, cp=cp, pp=6, ep=32, gbs=56)


def test_dsa_indexer_terms_by_hand():
    ctx = glm()
    tok, seq = 131072 // 32, 131072
    inv = {s.name: s.bytes for s in dsa_inventory(ctx, shard_of(ctx))}
    assert inv["DSA indexer q and head weights (TP-replicated)"] == 2 * (32 * 128 + 32) * tok
    assert inv["DSA indexer k over the whole sequence (allgather CP)"] == 2 * 128 * seq
    assert inv["MLA latent K/V gathered over the sequence (allgather CP)"] == 2 * (512 + 64) * seq
    assert inv["DSA top-k indices (int64)"] == 8 * 2048 * tok
    # FP32 scores [4096, 131072] = 2 GiB: the cuDNN backend caps its chunk at 1 GiB and top-k scratch at 2 GiB
    assert dsa_transient(ctx, shard_of(ctx)) == GIB + 2 * GIB
    # at CP 1 and 4K tokens the whole score matrix (64 MiB) is smaller than either cap
    small = ctx_of(model="glm-5", gpu="gb200", num_gpus=192, seq_len=4096, tp=1, cp=1, pp=6, ep=32, gbs=1024)
    assert dsa_transient(small, shard_of(small)) == 2 * 4 * 4096 * 4096


def test_terms_are_named_in_the_breakdown():
    result = estimate_memory(
        EstimateMemoryRequest(
            model="glm-5", gpu="gb200", num_gpus=192, seq_len=131072, tp=1, cp=32, pp=6, ep=32, gbs=56,
            cp_comm_type="all_gather", recompute_granularity="full", recompute_method="uniform",
            recompute_num_layers=1,
        )
    )  # fmt: skip
    text = result.model_dump_json()
    assert "DSA indexer FP32 score chunk and top-k scratch (cuDNN backend)" in text
    assert any("DSA layers:" in a for a in result.assumptions)
    nano_result = estimate_memory(
        EstimateMemoryRequest(
            model="nemotron-3-nano", gpu="h100", num_gpus=64, seq_len=131072, tp=1, cp=8, ep=8, gbs=64
        )
    )
    assert "Mamba SSD inter-chunk states" in nano_result.model_dump_json()
    assert any("Mamba-2 layers:" in a for a in nano_result.assumptions)


def test_readme_states_the_glm52_calibration_the_engine_computes():
    """README 'How far to trust the numbers': GLM-5.2 at 200K on 608 H100 against the card's 81,005 MiB."""
    from pathlib import Path

    from moe_long_context.engine.representative import representative_layouts

    config = next(lay.config for lay in representative_layouts() if lay.id == "glm-5.2-200k-h100")
    peak = estimate_memory(EstimateMemoryRequest(**config)).peak_gib
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    mib = round(peak * 1024, -1)
    assert f"{peak:.1f} GiB" in readme and f"{mib:,.0f} MiB" in readme
    error = round(100 * (1 - peak * 1024 / 81005))
    assert f"**{error} % below** the measurement" in readme


def test_cuda_graph_buffers_follow_the_hybrid_layer_kinds():
    """attn graphs capture the 6 attention layers, mamba graphs the 23 Mamba layers (MambaLayer checks
    CudaGraphModule.mamba, ssm/mamba_layer.py:110); one input and one output buffer each."""
    from moe_long_context.memory.buffers import graph_static_bytes

    def static(modules):
        ctx = ctx_of(model="nemotron-3-nano", gpu="gb200", num_gpus=8, seq_len=4096, ep=8, gbs=64,
                     cuda_graph_impl="transformer_engine", cuda_graph_modules=modules)  # fmt: skip
        return graph_static_bytes(ctx, shard_of(ctx), list(range(52)))

    layer_io = 2 * 2 * 2688 * 4096
    assert static(["attn"]) == 6 * layer_io
    assert static(["mamba"]) == 23 * layer_io
    assert static(["mlp"]) == 0  # the pattern has no dense MLP layer


def test_a_hybrid_whose_mlps_are_all_moe_counts_as_all_moe():
    from moe_long_context.model.catalog import load_model

    assert load_model("nemotron-3-nano").all_layers_moe and not load_model("glm-5").all_layers_moe
