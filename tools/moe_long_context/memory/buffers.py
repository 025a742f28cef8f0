"""Communication and CUDA-graph buffers on one rank: DeepEP, HybridEP, per-layer and full-iteration graphs."""

from __future__ import annotations

from functools import cache

from ..engine.context import Context
from .activations import BF16, FP32, Shard
from .terms import Term

# Full-iteration CUDA graphs keep the whole step's intermediates in the graph pool: Bridge's CUDA-graph
# skill reports 1.5-2x peak memory; the engine adds the lower end (half the activation peak).
FULL_ITERATION_GRAPH_FACTOR = 0.5

# DeepEP intranode/internode buffer sizing (deepseek-ai/DeepEP csrc/config.hpp get_nvl/rdma_buffer_size_hint,
# deep_ep/buffer.py get_dispatch_config/get_combine_config): per EP size, the NVLink and RDMA receive
# chunk sizes in tokens; Megatron sizes the buffer for the larger of dispatch and combine (fused_a2a.py).
DEEPEP_NUM_SMS = 20  # Megatron token_dispatcher.py: unset moe_flex_dispatcher_num_sms -> DeepEP default 20
DEEPEP_RECV_TOKENS = {  # ranks: (NVL recv tokens, RDMA recv tokens after alignment to the send chunk)
    2: (256, 132),
    4: (256, 132),
    8: (256, 132),
    16: (288, 140),
    24: (288, 128),
    32: (288, 128),
    64: (288, 140),
    128: (560, 132),
    144: (720, 132),
    160: (720, 132),
}
DEEPEP_MAX_TOPK = 128
DEEPEP_MAX_SCALES = 128
DEEPEP_SOURCE_META = 8  # internode::get_source_meta_bytes(): two int32


@cache
def deepep_buffer_bytes(ranks: int, hidden: int) -> float:
    """DeepEP NVLink + RDMA buffers Megatron allocates for an EP group of ``ranks`` (BF16 dispatch)."""
    key = min((k for k in DEEPEP_RECV_TOKENS if k >= ranks), default=max(DEEPEP_RECV_TOKENS))
    nvl_recv, rdma_recv = DEEPEP_RECV_TOKENS[key]
    hidden_bytes = hidden * BF16
    channels = DEEPEP_NUM_SMS // 2
    nvl_ranks = min(ranks, 8)
    rdma_ranks = max(ranks // 8, 1)
    per_token = DEEPEP_MAX_TOPK * (8 + 4) + DEEPEP_MAX_SCALES * 4
    nvl = channels * nvl_ranks * nvl_recv * (hidden_bytes + DEEPEP_SOURCE_META + per_token)
    rdma = 0.0
    if ranks > 8:
        rdma = channels * rdma_ranks * rdma_recv * 2 * (hidden_bytes + DEEPEP_SOURCE_META + per_token + 16)
        rdma += 2**20
    return nvl + rdma


def hybridep_buffer_bytes(ranks: int, domain: int, tokens: float, hidden: int, local_experts: int) -> float:
    """HybridEP dispatch and combine buffers (DeepEP hybrid-ep HybridEpBuffer::allocate_buffer): sized for the
    worst case where every token of the EP group lands on one rank, plus inter-node staging."""
    per_node = min(ranks, domain)
    nodes = max(1, ranks // per_node)
    worst = tokens * per_node * nodes
    probs = local_experts * per_node * FP32
    dispatch = worst * (hidden * BF16 + probs + hidden / 128 * FP32)
    combine = worst * (hidden * BF16 + probs)
    staging = tokens * (nodes - 1) * (3 * (hidden * BF16 + probs) + hidden / 128 * FP32)
    return dispatch + combine + staging


def graph_static_bytes(ctx: Context, sh: Shard, layers: list[int]) -> float:
    """Static input/output buffers of per-layer CUDA graphs, one set per captured layer."""
    c, m = ctx.cfg, ctx.model
    hidden = BF16 * m.hidden_size * sh.seq_tokens
    mods = set(c.cuda_graph_modules or [])
    total = 0.0
    for i in layers:
        moe = m.moe_layers[i]
        kind = m.attention_layer_types[i]  # a hybrid layer is a Mamba mixer, an attention or an MLP
        if not mods:
            total += 2 * hidden  # whole layer
            continue
        if "attn" in mods and kind not in ("mamba", "none"):
            total += 2 * hidden
        if "mamba" in mods and kind == "mamba":
            total += 2 * hidden
        if "mlp" in mods and not moe and m.layer_has_mlp(kind):
            total += 2 * hidden
        if "moe" in mods and moe:
            total += 2 * hidden
        if "moe_router" in mods and moe:
            total += hidden + (FP32 + 1) * m.num_experts * sh.seq_tokens  # input, FP32 probs, routing map
    return total


def buffer_terms(ctx: Context, sh: Shard, layers: list[int], held: float) -> list[Term]:
    c, m, gpu = ctx.cfg, ctx.model, ctx.gpu
    out = []
    group = c.ep * ctx.etp
    if m.is_moe and c.dispatcher == "flex-deepep" and group > 1:
        out.append(
            Term(
                "DeepEP buffers",
                deepep_buffer_bytes(group, m.moe_token_width),  # LatentMoE dispatches latent tokens
                f"NVLink/RDMA receive buffers for {group} EP ranks, {DEEPEP_NUM_SMS} SMs",
            )
        )
    if m.is_moe and c.dispatcher == "flex-hybridep" and group > 1:
        domain = gpu.nvlink_domain if gpu is not None else 8
        out.append(
            Term(
                "HybridEP buffers",
                hybridep_buffer_bytes(group, domain, sh.seq_tokens, m.moe_token_width, m.num_experts // c.ep),
                f"worst-case receive buffers for {group} EP ranks ({min(group, domain)} per NVLink domain), "
                f"{sh.seq_tokens:,.0f} tokens per rank",
            )
        )
    if c.cuda_graph_impl in ("transformer_engine", "local"):
        out.append(
            Term(
                "CUDA-graph static buffers",
                graph_static_bytes(ctx, sh, layers),
                "input/output buffers of each captured module, one set per layer",
            )
        )
    elif c.cuda_graph_impl == "full_iteration":
        out.append(
            Term(
                "CUDA-graph pool (full iteration)",
                FULL_ITERATION_GRAPH_FACTOR * held,
                f"{FULL_ITERATION_GRAPH_FACTOR:g} x the activation peak stays pinned in the graph pool",
            )
        )
    return out
