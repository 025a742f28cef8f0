"""Pieces of the memory model, each against numbers derived by hand from Megatron's code."""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.schedule import peak_in_flight, warmup_forwards
from moe_long_context.memory.activations import kept, layer_inventory, removed, shard_of
from moe_long_context.memory.buffers import deepep_buffer_bytes, graph_static_bytes, hybridep_buffer_bytes
from moe_long_context.memory.overhead import allocator_cache_fraction, outside_pytorch_gib
from moe_long_context.memory.rank_memory import memory_model
from moe_long_context.memory.terms import GIB
from seed_layouts import DSV3_128K, DSV3_SPLIT, QWEN_128K, QWEN_SPLIT

QWEN = dict(QWEN_128K, gbs=64, **QWEN_SPLIT)
DSV3 = dict(DSV3_128K, gbs=256, **DSV3_SPLIT)


def ctx_of(**kw):
    return build_context(TrainingConfig(**kw))


# --------------------------------------------------------------------------- schedule


def test_1f1b_rank_r_holds_pp_minus_r_microbatches():
    assert peak_in_flight(4, 0, 1, 16, [10.0]) == (40.0, [4])
    assert peak_in_flight(4, 3, 1, 16, [10.0]) == (10.0, [1])
    assert peak_in_flight(4, 0, 1, 2, [10.0]) == (20.0, [2])  # fewer microbatches than stages
    assert peak_in_flight(1, 0, 1, 64, [10.0]) == (10.0, [1])  # no pipelining: one at a time


def test_interleaved_first_rank_matches_korthikanti_factor():
    # PP8 VPP4: 2 x 7 + 3 x 8 = 38 warmup forwards (chunks 0-3 for microbatches 0-7, chunk 0 for 8-13), then
    # one more forward before the first backward: 39 chunk-microbatches = 32 x (1 + 7 / 32).
    assert warmup_forwards(8, 0, 4, 256) == 38
    total, counts = peak_in_flight(8, 0, 4, 256, [1.0] * 4)
    assert counts == [15, 8, 8, 8] and total == 32 * (1 + 7 / 32)
    # The last rank warms up chunks 0-2 of 8 microbatches, then runs chunk 3 of microbatch 0.
    assert peak_in_flight(8, 7, 4, 256, [1.0] * 4)[1] == [8, 8, 8, 1]
    # EP all-to-all overlap adds one warmup forward.
    assert warmup_forwards(8, 0, 4, 256, extra=1) == 39


def test_interleaved_with_as_many_microbatches_as_stages_runs_all_forwards_first_on_rank_0():
    # M = PP = 4, VPP 8: rank 0's warmup (2 x 3 + 7 x 4 = 34) exceeds the 32 forwards: everything is held.
    assert peak_in_flight(4, 0, 8, 4, [1.0] * 8)[1] == [4] * 8
    # The last rank: 7 x 4 = 28 warmup forwards, then chunk 7 of microbatch 0.
    assert peak_in_flight(4, 3, 8, 4, [1.0] * 8)[1] == [4] * 7 + [1]


def test_peak_weights_chunks_by_their_size():
    # A heavy last chunk (the loss) counts once on the last rank, light chunks count eight times.
    total, counts = peak_in_flight(8, 7, 4, 256, [1.0, 1.0, 1.0, 100.0])
    assert counts == [8, 8, 8, 1] and total == 24 + 100


# --------------------------------------------------------------------------- tensor inventory


def test_qwen3_layer_inventory_by_hand():
    ctx = ctx_of(**QWEN)
    sh = shard_of(ctx)
    tok, rows = 131072 // 4, 131072 // 4 // 4  # CP4, then sequence parallelism over TP4
    assert (sh.tokens, sh.seq_tokens) == (tok, rows)
    n_r, g_r, d, h = 64 // 4, 1, 128, 4096  # 16 query heads and 1 KV group per TP rank
    attention = (
        2 * h * rows  # layer input
        + (2 * h + 4) * rows  # norm output kept by the fused norm+QKV GEMM (+ FP32 rsigma)
        + (2 * d + 4) * (n_r + g_r) * tok  # Q and K before their RMSNorms (+ rsigma per head)
        + 2 * (n_r + 2 * g_r) * d * tok  # Q, K, V
        + 2 * n_r * d * tok  # attention output
        + 4 * n_r * tok  # FP32 softmax statistics
    )
    k, f = 8, 1536
    moe = (
        2 * h * rows  # MoE input (residual)
        + (2 * h + 4) * rows  # pre-MLP norm output
        + 10 * 128 * rows  # router probabilities (2 B) and int64 permutation map (8 B) per expert
        + 2 * k * h * rows  # permuted tokens, top-8 copies of this rank's rows
        + 2 * k * 2 * f * rows  # expert fc1 output (SwiGLU: 2 x 1536)
        + 2 * k * f * rows  # activation output
        + 4 * k * rows  # FP32 routing weights
    )
    inventory = layer_inventory(ctx, sh, 10)
    assert sum(s.bytes for s in inventory) == attention + moe
    # moe_act frees exactly the activation output; layernorm only the separate pre-MLP norm output.
    assert removed(inventory, frozenset({"moe_act"})) == 2 * k * f * rows
    assert removed(inventory, frozenset({"layernorm"})) == (2 * h + 4) * rows
    # moe keeps only its input (the pre-MLP norm output) and the residual.
    assert removed(inventory, frozenset({"moe"})) == moe - 2 * h * rows - (2 * h + 4) * rows
    # core_attn frees only the softmax statistics with fused attention.
    assert removed(inventory, frozenset({"core_attn"})) == 4 * n_r * tok


def test_fp8_caches_gemm_inputs_at_one_byte_unless_the_output_discarding_recompute_frees_them():
    k, f, h, rows = 8, 1536, 4096, 8192
    bf16 = layer_inventory(ctx_of(**QWEN), shard_of(ctx_of(**QWEN)), 10)
    fp8_ctx = ctx_of(**QWEN, precision="mxfp8")
    fp8 = layer_inventory(fp8_ctx, shard_of(fp8_ctx), 10)
    by_name = {s.name: s.bytes for s in fp8}
    assert by_name["permuted tokens (expert fc1 input)"] == 1 * k * h * rows
    assert by_name["expert activation output (fc2 input)"] == 1 * k * f * rows
    assert by_name["expert fc1 output (activation input)"] == 2 * k * 2 * f * rows  # saved by the activation
    saved = sum(s.bytes for s in bf16) - sum(s.bytes for s in fp8)
    assert saved == k * h * rows + k * f * rows + h * rows  # permuted tokens, fc2 input, QKV-GEMM input


def test_mla_up_proj_frees_q_k_v_and_the_up_projection_inputs():
    ctx = ctx_of(**DSV3)
    sh = shard_of(ctx)
    tok = 131072 // 32  # TP1: sequence-parallel and head-sharded tensors both hold 4096 rows
    inventory = layer_inventory(ctx, sh, 5)
    qkv = 2 * 128 * (2 * (128 + 64) + 128) * tok  # Q and K with nope + rope dims, V
    up_inputs = (2 * 1536 + 4) * tok + (2 * 512 + 4) * tok  # q_a and kv_a norm outputs (+ rsigma)
    assert removed(inventory, frozenset({"mla_up_proj"})) == qkv + up_inputs
    # MLA's input norm is a separate module: layernorm recompute frees it and the pre-MLP norm output.
    assert removed(inventory, frozenset({"layernorm"})) == 2 * (2 * 7168 + 4) * tok
    # Offloading expert_fc1 moves the permuted tokens to the CPU.
    full = kept(inventory, frozenset(), frozenset())
    assert full - kept(inventory, frozenset(), frozenset({"expert_fc1"})) == 2 * 8 * 7168 * tok


def test_dense_layer_of_a_moe_model_and_mlp_recompute():
    ctx = ctx_of(**DSV3)
    sh = shard_of(ctx)
    tok = 4096
    inventory = layer_inventory(ctx, sh, 0)  # DeepSeek-V3's first three layers are dense (SwiGLU, 18432)
    mlp = (2 * 7168 + 4) * tok + 2 * 2 * 18432 * tok + 2 * 18432 * tok  # norm output, fc1 output, act output
    assert removed(inventory, frozenset({"mlp"})) == mlp
    assert removed(inventory, frozenset({"moe", "moe_act"})) == 0  # no MoE on this layer
    assert removed(layer_inventory(ctx, sh, 3), frozenset({"mlp"})) == 0  # layer 3 is MoE


def test_context_parallelism_halves_activations_but_not_weights():
    base = memory_model(ctx_of(**QWEN)).ranks[0]
    half = memory_model(ctx_of(**{**QWEN, "cp": 8, "num_gpus": 256})).ranks[0]
    terms = {t.name: t.bytes for t in base.terms}
    terms2 = {t.name: t.bytes for t in half.terms}
    assert terms2["activations: decoder layers"] == pytest.approx(terms["activations: decoder layers"] / 2)
    assert terms2["parameters"] == terms["parameters"]


def test_full_recompute_keeps_layer_inputs_and_recomputes_one_group():
    cfg = dict(DSV3, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    rank = memory_model(ctx_of(**cfg)).ranks[1]  # seven MoE layers... and dense layers 1-2
    terms = {t.name: t.bytes for t in rank.terms}
    layer_input = 2 * 7168 * 4096
    # rank 1 holds 8 layers in 4 chunks of 2, in flight 13/8/8/8 chunk-microbatches = 37 x 2 layer inputs
    assert rank.in_flight == [13, 8, 8, 8]
    assert terms["activations: decoder layers (full recompute: layer inputs)"] == 37 * 2 * layer_input
    # the backward transient is one whole layer re-materialised (the largest on this rank: an MoE layer)
    ctx = ctx_of(**cfg)
    moe_layer = kept(layer_inventory(ctx, shard_of(ctx), 17), frozenset(), frozenset())
    assert terms["backward transient"] == moe_layer


def test_loss_logits_fp32_for_native_cross_entropy_bf16_for_te():
    native = {t.name: t.bytes for t in memory_model(ctx_of(**DSV3)).ranks[7].terms}
    te = {t.name: t.bytes for t in memory_model(ctx_of(**DSV3, cross_entropy_fusion="te")).ranks[7].terms}
    name = "activations: final norm and logits for the loss (+ MTP)"
    tok = 4096
    # one in-flight microbatch of the last chunk, two heads (main loss and MTP), vocab 129280 at TP1
    assert native[name] == 2 * (4 * 129280 * tok + 2 * 2 * 7168 * tok)
    assert te[name] == 2 * (2 * 129280 * tok + 2 * 2 * 7168 * tok)


def test_deepep_buffer_by_hand():
    # EP32 on H100, hidden 7168 in BF16 (14336 B), DeepEP's 20 SMs = 10 channels, 8 NVLink peers, 4 RDMA ranks.
    nvl = 10 * 8 * 288 * (14336 + 8 + 128 * (8 + 4) + 128 * 4)  # 288 NVLink receive tokens (EP 32)
    rdma = 10 * 4 * 128 * 2 * (14336 + 8 + 128 * (8 + 4) + 128 * 4 + 16) + 2**20  # 128 RDMA receive tokens
    assert deepep_buffer_bytes(32, 7168) == nvl + rdma
    assert deepep_buffer_bytes(8, 7168) == 10 * 8 * 256 * (14336 + 8 + 2048)  # intranode only


def test_hybridep_buffer_by_hand():
    # Qwen3 on GB200: 32 EP ranks in one NVL72 domain, 8192 tokens per rank, hidden 4096, 4 local experts.
    worst = 8192 * 32  # every token of the group to one rank
    probs = 4 * 32 * 4
    expected = worst * (4096 * 2 + probs + 4096 // 128 * 4) + worst * (4096 * 2 + probs)
    assert hybridep_buffer_bytes(32, 72, 8192, 4096, 4) == expected


def test_cuda_graph_static_buffers_by_hand():
    ctx = ctx_of(
        **QWEN,
        cuda_graph_impl="transformer_engine",
        cuda_graph_modules=["attn", "moe_router", "moe_preprocess"],
    )
    sh = shard_of(ctx)
    hidden = 2 * 4096 * 8192
    per_layer = 2 * hidden + hidden + 5 * 128 * 8192  # attn in/out; router input, FP32 probs + routing map
    assert graph_static_bytes(ctx, sh, [0, 1, 2]) == 3 * per_layer


def test_overhead_default_is_the_measured_cache_and_outside_memory_and_overhead_gib_replaces_it():
    """Default: the allocator cache (a measured fraction of the tensors) and the memory outside PyTorch (a measured
    constant), both from the calibration corpus; overhead_gib replaces the two with one fixed term."""
    default = memory_model(ctx_of(**DSV3))
    rank = default.ranks[0]
    # bounded by the tightest measured run (the one device-level pair is a full GPU), whatever the dispatcher
    assert (
        outside_pytorch_gib("flex-deepep")
        == outside_pytorch_gib("flex-hybridep")
        == outside_pytorch_gib()
        == 8.94
    )
    outside = outside_pytorch_gib(DSV3.get("dispatcher", "alltoall"))
    terms = {t.name: t.bytes for t in rank.terms}
    tensors = rank.allocated
    assert terms["allocator cache (reserved, not allocated)"] == pytest.approx(
        allocator_cache_fraction("h100") * tensors
    )
    assert terms["memory outside PyTorch (CUDA context, NCCL, comm libraries)"] == outside * GIB
    assert rank.reserved == pytest.approx(tensors * (1 + allocator_cache_fraction("h100")))
    assert rank.total == pytest.approx(rank.reserved + outside * GIB)
    peak = default.peak_rank
    assert default.overhead_gib == pytest.approx((peak.total - peak.allocated) / GIB)
    given = memory_model(ctx_of(**DSV3, overhead_gib=2.5))
    assert given.ranks[0].total == pytest.approx(tensors + 2.5 * GIB)
    assert [t.name for t in given.ranks[0].terms if t.name.endswith("overhead")] == ["fixed overhead"]
    assert given.overhead_gib == pytest.approx(2.5)


def test_bf16_gradients_without_the_precision_aware_optimizer_add_the_optimizer_step_copy():
    """distrib_optimizer.py:2782: a BF16 grad buffer hands the optimizer shard_model_grad.float(), an FP32 copy of
    the rank's shard, after the activations are freed. It sets the peak when it is the larger: GLM-5.2 pretraining on
    352 H100 (PP11, EDP 1, full recompute at 2K) holds 2,415.9M unsharded expert parameters on rank 1."""
    cfg = dict(model="glm-5", gpu="h100", num_gpus=352, seq_len=2048, tp=1, cp=1, ep=32, etp=1, pp=11, gbs=1024,
               pipeline_layout="Etttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttt|ttttmL",
               dispatcher="flex-deepep", recompute_granularity="full", recompute_method="uniform",
               recompute_num_layers=1, overhead_gib=0)  # fmt: skip
    fp32 = memory_model(ctx_of(**cfg, grad_reduce_in_fp32=True)).ranks[1]
    bf16 = memory_model(ctx_of(**cfg, grad_reduce_in_fp32=False)).ranks[1]
    name = "optimizer-step transient (FP32 copy of the BF16 gradient shard)"
    assert name not in {t.name for t in fp32.terms}  # an FP32 buffer's .float() is itself
    terms = {t.name: t.bytes for t in bf16.terms}
    params = terms["parameters"] / 2  # BF16 parameters on the rank
    experts = 8 * 256 * 3 * 6144 * 2048 / 32  # 8 MoE layers x 256 SwiGLU experts (6144 x 2048) over EP 32
    copy = 4 * ((params - experts) / 32 + experts)  # FP32: dense sharded over DP 32, experts over EDP 1
    freed = sum(t.bytes for t in bf16.terms[3:] if t.name != name and "DeepEP" not in t.name)
    assert terms[name] == pytest.approx(copy - freed, rel=1e-3)
    # the precision-aware optimizer takes the BF16 view (decoupled_grad) instead
    aware = memory_model(ctx_of(**cfg, grad_reduce_in_fp32=False, use_precision_aware_optimizer=True)).ranks[
        1
    ]
    assert name not in {t.name for t in aware.terms}


def test_activation_offload_frees_the_offloaded_inputs():
    base = {t.name: t.bytes for t in memory_model(ctx_of(**DSV3)).ranks[0].terms}
    off = {
        t.name: t.bytes
        for t in memory_model(ctx_of(**DSV3, activation_offload=["expert_fc1"])).ranks[0].terms
    }
    # rank 0: 6 MoE layers in chunks in flight 15 (layer 0: dense), 8, 8, 8 -> 2 x (8 + 8 + 8) = 48 MoE layer copies
    assert (
        base["activations: decoder layers"] - off["activations: decoder layers"] == 48 * 2 * 8 * 7168 * 4096
    )
