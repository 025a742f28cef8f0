"""The per-rank memory model: parameters, gradients, optimizer states, activations and buffers per PP rank.

Static memory follows Megatron-LM ``theoretical_memory_usage.py`` (core_r0.19.0) per rank, with what it
leaves out (reference memory-model.md 1c, 3a, 4d): the distributed optimizer shards dense weights over
DP x CP and experts over EDP (as Megatron Bridge's estimator does), the precision-aware optimizer's
BF16 moments, BF16 gradient buffers, optimizer CPU offload, TE's cached FP8 weight copies, the real
pipeline split (layout strings, uneven stages, MTP and embedding copies). Activations come from the
tensor inventory in ``activations.py`` times the microbatches in flight (``schedule.py``).
Everything is bytes internally and GiB (2^30) in results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .activations import BF16, FP32, Saved, Shard, kept, layer_inventory, removed, shard_of
from .config import precision_is_quantized
from .context import Context
from .params import LayerParams, layer_params, mtp_layer_params, position_embedding_params
from .schedule import peak_in_flight

GIB = float(2**30)

# Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP (default 128;
# LM training/tokenizer _vocab_size_with_padding). Bridge keeps a preset (Hugging Face) vocabulary as is.
VOCAB_DIVISIBLE_BY = 128

# The engine's default for memory outside PyTorch's allocated tensors (CUDA context, NCCL and library
# workspaces, allocator fragmentation), see DEFAULT_OVERHEAD_WHY.
DEFAULT_OVERHEAD_GIB = 6.0
DEFAULT_OVERHEAD_WHY = (
    "6 GiB outside allocated tensors (CUDA context, NCCL and cuBLAS/TE workspaces, allocator "
    "fragmentation): Megatron Bridge's H100 memory study (skill nemo-mbridge-perf-activation-recompute, "
    "Nemotron 3 Nano) ran out of memory with about 72.9 GiB allocated of the 79.11 GiB PyTorch reports, and "
    "its Moonlight study shows ~3.4 GB reserved above the allocated peak; set overhead_gib to replace it"
)

# Full-iteration CUDA graphs keep the whole step's intermediates in the graph pool: Bridge's CUDA-graph
# skill reports 1.5-2x peak memory; the engine adds the lower end (half the activation peak).
FULL_ITERATION_GRAPH_FACTOR = 0.5

# DeepEP intranode/internode buffer sizing (deepseek-ai/DeepEP csrc/config.hpp get_nvl/rdma_buffer_size_hint,
# deep_ep/buffer.py get_dispatch_config/get_combine_config): per EP size, the NVLink and RDMA receive
# chunk sizes in tokens; Megatron sizes the buffer for the larger of dispatch and combine (fused_a2a.py).
DEEPEP_NUM_SMS = 20
DEEPEP_RECV_TOKENS = {  # ranks: (NVL recv tokens, RDMA recv tokens after alignment to the send chunk)
    2: (256, 128),
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
DEEPEP_SOURCE_META = 8


@dataclass
class Term:
    """One named memory term of one rank, with how it was computed."""

    name: str
    bytes: float
    basis: str


@dataclass
class RankMemory:
    """Memory of one pipeline rank at its peak."""

    pp_rank: int
    layers: list[int]
    mtp_layers: int
    embedding: bool
    loss: bool
    in_flight: list[int]  # microbatches held per virtual stage at the peak
    terms: list[Term] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(t.bytes for t in self.terms)


@dataclass
class MemoryModel:
    """Every PP rank's memory and the assumptions behind the numbers."""

    ranks: list[RankMemory]
    overhead_gib: float
    assumptions: list[str]

    @property
    def peak_rank(self) -> RankMemory:
        return max(self.ranks, key=lambda r: (r.total, -r.pp_rank))


# --------------------------------------------------------------------------- parameters


def padded_vocab(ctx: Context) -> int:
    """Vocabulary rows the embedding and output layer hold across TP."""
    v, t = ctx.model.vocab_size, ctx.cfg.tp
    if ctx.cfg.launcher == "megatron-lm":
        multiple = VOCAB_DIVISIBLE_BY * t
        return math.ceil(v / multiple) * multiple
    return math.ceil(v / t) * t


@dataclass(frozen=True)
class RankParams:
    """Parameters one rank holds, split by optimizer sharding group."""

    dense: float  # TP-sharded and replicated weights, embeddings: distributed optimizer over DP x CP
    experts: float  # routed experts: distributed optimizer over EDP
    gemm: float  # GEMM weights (dense and expert) that FP8 compute caches quantized


def _layer_share(lp: LayerParams, tp: int, expert_shards: int) -> tuple[float, float, float]:
    dense = (lp.attention + lp.mlp) / tp + lp.replicated
    experts = lp.experts / expert_shards
    gemm = (lp.attention + lp.mlp) / tp + experts
    return dense, experts, gemm


def rank_params(ctx: Context, layers: list[int], mtp: int, embedding: bool, loss: bool) -> RankParams:
    """Parameters on a rank holding decoder ``layers``, ``mtp`` MTP layers and the embedding / loss."""
    m, c = ctx.model, ctx.cfg
    shards = c.ep * ctx.etp
    dense = experts = gemm = 0.0
    for i in layers:
        d, e, g = _layer_share(layer_params(m, i), c.tp, shards)
        dense, experts, gemm = dense + d, experts + e, gemm + g
    if mtp:
        d, e, g = _layer_share(mtp_layer_params(m), c.tp, shards)
        dense, experts, gemm = dense + mtp * d, experts + mtp * e, gemm + mtp * g
    table = padded_vocab(ctx) * m.hidden_size / c.tp
    if embedding:
        dense += table + position_embedding_params(m)
    if mtp and not embedding:
        dense += table  # the MTP stage keeps its own copy of the word embeddings (gpt_model.py mtp_process)
    if loss or (mtp and not loss):
        dense += table  # output layer (untied, or the tied copy on the last stage); a BF16 GEMM, not TE
    if loss:
        dense += m.hidden_size * m.norm_params_per_width  # final norm
    if embedding and loss and m.tie_embeddings:
        dense -= table  # one shared table when the first stage is also the last
    return RankParams(dense=dense, experts=experts, gemm=gemm)


def master_and_moment_bytes(ctx: Context) -> tuple[int, int]:
    """Bytes per parameter of the master weights and of both Adam moments.

    Default: FP32 master + FP32 exp_avg and exp_avg_sq (12 B). The precision-aware optimizer keeps BF16
    moments and, with BF16 parameters, only the 16 low bits of the FP32 master (store_param_remainders,
    on by default: MCore optimizer_config.py, distrib_optimizer.py) - 6 B. With CPU offload Megatron
    builds a HybridDeviceOptimizer instead (optimizer/__init__.py), whose GPU share is an FP32 copy of
    the parameters with FP32 Adam moments (12 B).
    """
    c = ctx.cfg
    if not c.use_precision_aware_optimizer or c.optimizer_cpu_offload_fraction > 0:
        return FP32, 2 * FP32
    return BF16, 2 * BF16


def static_terms(ctx: Context, p: RankParams) -> list[Term]:
    """Parameters, gradients, optimizer states (GPU share) and FP8 weight caches of one rank."""
    c = ctx.cfg
    lay = ctx.layout
    total = p.dense + p.experts
    d_dense = (lay.dp or 1) * c.cp if c.use_distributed_optimizer else 1
    d_exp = (lay.edp or 1) if c.use_distributed_optimizer else 1
    grad = FP32 if c.grad_reduce_in_fp32 else BF16
    master, moments = master_and_moment_bytes(ctx)
    state = master + moments
    on_gpu = 1.0 - c.optimizer_cpu_offload_fraction
    opt = (p.dense * state / d_dense + p.experts * state / d_exp) * on_gpu
    params_m = total / 1e6
    terms = [
        Term("parameters", BF16 * total, f"{params_m:,.1f}M params x 2 B (BF16)"),
        Term(
            "gradients",
            grad * total,
            f"{params_m:,.1f}M x {grad} B ({'FP32' if grad == FP32 else 'BF16'} main-gradient buffer)",
        ),
        Term(
            "optimizer states",
            opt,
            f"({master} B master + {moments} B Adam moments) x ({p.dense / 1e6:,.1f}M dense / {d_dense} "
            f"+ {p.experts / 1e6:,.1f}M expert / {d_exp})"
            + (f" x {on_gpu:g} kept on GPU" if on_gpu < 1 else ""),
        ),
    ]
    if precision_is_quantized(c.precision) and not c.fp8_param_gather:
        per = 1 if c.precision == "nvfp4" else 2
        terms.append(
            Term(
                "FP8 weight cache",
                per * p.gemm,
                f"{p.gemm / 1e6:,.1f}M GEMM weights x {per} B (TE keeps row- and column-wise quantized "
                "copies across the microbatches of a step)",
            )
        )
    return terms


# --------------------------------------------------------------------------- activations


@dataclass(frozen=True)
class ChunkActivations:
    """One microbatch's activation bytes for one model chunk, and the transients of its backward."""

    kept: float
    layer_transient: float  # re-materialised recompute plus offloaded tensors reloaded, for one layer
    terms: dict[str, float]


def _full_recompute_kept(ctx: Context, inventories: list[list[Saved]], offload: frozenset[str]):
    """(kept bytes, transient) of a chunk under full recompute (uniform or block)."""
    c = ctx.cfg
    n = max(1, c.recompute_num_layers or 1)
    full = [kept(inv, frozenset(), offload) for inv in inventories]
    inputs = [sum(s.bytes for s in inv if s.layer_input) for inv in inventories]
    if c.recompute_method == "block":
        kept_bytes = sum(inputs[:n]) + sum(full[n:])
        transient = max(full[:n], default=0.0)
    else:  # uniform: every group of n layers keeps only its first input
        kept_bytes = sum(inputs[i] for i in range(0, len(inventories), n))
        transient = max((sum(full[i : i + n]) for i in range(0, len(inventories), n)), default=0.0)
    return kept_bytes, transient


class InventoryCache:
    """Layer inventories by (attention type, MoE or dense): a model has only a few distinct layer kinds."""

    def __init__(self, ctx: Context, sh: Shard):
        self.ctx, self.sh = ctx, sh
        self._by_kind: dict[tuple[str, bool], list[Saved]] = {}

    def __call__(self, index: int) -> list[Saved]:
        m = self.ctx.model
        key = (m.attention_layer_types[index], m.moe_layers[index])
        if key not in self._by_kind:
            self._by_kind[key] = layer_inventory(self.ctx, self.sh, index)
        return self._by_kind[key]


def chunk_activations(
    ctx: Context, sh: Shard, layers: list[int], mtp: int, embedding: bool, loss: bool, cache: InventoryCache
) -> ChunkActivations:
    m, c = ctx.model, ctx.cfg
    offload = frozenset(c.activation_offload or [])
    full = c.recompute_granularity == "full"
    recompute = sh.recompute
    inventories = [cache(i) for i in layers]
    if mtp:
        inventories += [cache(m.num_layers - 1)] * mtp
    terms: dict[str, float] = {}
    if full:
        kept_bytes, transient = _full_recompute_kept(ctx, inventories, offload)
        terms["decoder layers (full recompute: layer inputs)"] = kept_bytes
    else:
        kept_per_layer = [kept(inv, recompute, offload) for inv in inventories]
        kept_bytes = sum(kept_per_layer)
        # Backward runs the layers in reverse: while layer j re-materialises what recompute dropped (and
        # reloads what was offloaded), the layers after it have already released their activations.
        transient, released = 0.0, 0.0
        for j in range(len(inventories) - 1, -1, -1):
            inv = inventories[j]
            reload = sum(s.bytes for s in inv if s.offload & offload and not s.removed_by & recompute)
            transient = max(transient, removed(inv, recompute) + reload - released)
            released += kept_per_layer[j]
        terms["decoder layers"] = kept_bytes
    h, rows = m.hidden_size, sh.seq_tokens
    if mtp:
        extra = mtp * 4 * BF16 * h * rows  # enorm/hnorm inputs and the 2h-wide eh_proj input
        terms["MTP norms and eh_proj input"] = extra
        kept_bytes += extra
    if embedding:
        emb = 8 * sh.tokens + (h * rows if m.hidden_dropout > 0 else 0)  # int64 token ids (+ dropout mask)
        terms["embedding (token ids, dropout mask)"] = emb
        kept_bytes += emb
    heads = int(loss) + mtp
    if heads:
        per = FP32 if c.cross_entropy_fusion != "te" else BF16
        logits = per * padded_vocab(ctx) / c.tp * sh.tokens
        norm = 2 * BF16 * h * rows
        terms["final norm and logits for the loss" + (" (+ MTP)" if mtp else "")] = heads * (logits + norm)
        kept_bytes += heads * (logits + norm)
    return ChunkActivations(kept=kept_bytes, layer_transient=transient, terms=terms)


def _stage_layers(ctx: Context) -> list[list[list[int]]]:
    """Decoder layer indices of every (PP rank, virtual stage), numbered in virtual-stage order."""
    split = ctx.split.split
    assert split is not None
    out = [[[] for _ in range(split.vpp)] for _ in range(split.pp)]
    index = 0
    for v in range(split.vpp):
        for r in range(split.pp):
            count = split.stages[r][v].decoders
            out[r][v] = list(range(index, index + count))
            index += count
    return out


def rank_memory(
    ctx: Context, rank: int, layers_by_stage: list[list[list[int]]], sh: Shard, cache: InventoryCache
) -> RankMemory:
    c, m = ctx.cfg, ctx.model
    split = ctx.split.split
    stages = split.stages[rank]
    layers = [i for chunk in layers_by_stage[rank] for i in chunk]
    mtp = sum(s.mtp for s in stages)
    has_e, has_l = any(s.embedding for s in stages), any(s.loss for s in stages)
    mem = RankMemory(rank, layers, mtp, has_e, has_l, [])
    mem.terms += static_terms(ctx, rank_params(ctx, layers, mtp, has_e, has_l))

    chunks = [
        chunk_activations(ctx, sh, layers_by_stage[rank][v], s.mtp, s.embedding, s.loss, cache)
        for v, s in enumerate(stages)
    ]
    held, counts = peak_in_flight(
        c.pp, rank, split.vpp, ctx.num_microbatches or c.pp, [ch.kept for ch in chunks], c.ep_overlap
    )
    mem.in_flight = counts
    for name in dict.fromkeys(k for ch in chunks for k in ch.terms):
        per = [ch.terms.get(name, 0.0) for ch in chunks]
        amount = sum(n * b for n, b in zip(counts, per, strict=True))
        mem.terms.append(Term(f"activations: {name}", amount, _in_flight_basis(counts, per)))

    layer_transient = max(ch.layer_transient for ch in chunks)
    loss_transient = 0.0
    if has_l and c.cross_entropy_fusion != "te":
        loss_transient = BF16 * padded_vocab(ctx) / c.tp * sh.tokens * (1 + mtp)
    embed_grad = BF16 * padded_vocab(ctx) / c.tp * m.hidden_size if has_e else 0.0
    backward = max(layer_transient, loss_transient)
    # The embedding's dense BF16 weight gradient appears after chunk 0 of a microbatch finished its backward.
    embed_excess = max(0.0, embed_grad - chunks[0].kept * (counts[0] > 0) - backward) if has_e else 0.0
    if backward:
        what = []
        if layer_transient:
            what.append("one layer's recomputed or reloaded tensors")
        if loss_transient:
            what.append("BF16 logits next to the FP32 loss copy")
        mem.terms.append(Term("backward transient", backward, "the larger of: " + "; ".join(what)))
    if embed_excess:
        mem.terms.append(
            Term(
                "embedding weight-gradient transient", embed_excess, "dense BF16 gradient of the vocab table"
            )
        )
    mem.terms += buffer_terms(ctx, sh, layers, held)
    return mem


def _in_flight_basis(counts: list[int], per_microbatch: list[float]) -> str:
    gib = "/".join(f"{b / GIB:.3g}" for b in per_microbatch)
    if len(counts) == 1:
        return f"{gib} GiB per microbatch x {counts[0]} in flight"
    return f"GiB per microbatch by virtual stage {gib} x in flight " + "/".join(str(n) for n in counts)


# --------------------------------------------------------------------------- buffers


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
        if not mods:
            total += 2 * hidden  # whole layer
            continue
        if "attn" in mods:
            total += 2 * hidden
        if "mlp" in mods and not moe:
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
                deepep_buffer_bytes(group, m.hidden_size),
                f"NVLink/RDMA receive buffers for {group} EP ranks, {DEEPEP_NUM_SMS} SMs",
            )
        )
    if m.is_moe and c.dispatcher == "flex-hybridep" and group > 1:
        domain = gpu.nvlink_domain if gpu is not None else 8
        out.append(
            Term(
                "HybridEP buffers",
                hybridep_buffer_bytes(group, domain, sh.seq_tokens, m.hidden_size, m.num_experts // c.ep),
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


# --------------------------------------------------------------------------- the model


def overhead_gib(ctx: Context) -> float:
    return ctx.cfg.overhead_gib if ctx.cfg.overhead_gib is not None else DEFAULT_OVERHEAD_GIB


def memory_model(ctx: Context) -> MemoryModel | None:
    """Memory of every PP rank, or None when the configuration has no pipeline split or layout."""
    if ctx.split.split is None or ctx.layout.dp is None or ctx.layout.edp is None or not ctx.cfg.seq_len:
        return None
    sh = shard_of(ctx)
    layers_by_stage = _stage_layers(ctx)
    overhead = overhead_gib(ctx) * GIB
    cache = InventoryCache(ctx, sh)
    ranks = []
    for r in range(ctx.cfg.pp):
        mem = rank_memory(ctx, r, layers_by_stage, sh, cache)
        why = (
            "overhead_gib as given"
            if ctx.cfg.overhead_gib is not None
            else "engine default (see assumptions)"
        )
        mem.terms.append(Term("fixed overhead", overhead, why))
        ranks.append(mem)
    return MemoryModel(ranks=ranks, overhead_gib=overhead / GIB, assumptions=assumptions(ctx, sh))


def optimizer_assumption(ctx: Context) -> str:
    c = ctx.cfg
    master, moments = master_and_moment_bytes(ctx)
    text = (
        f"Parameters BF16 (2 B); gradients {'FP32 (4 B)' if c.grad_reduce_in_fp32 else 'BF16 (2 B)'}; "
        f"optimizer states {master} B master + {moments} B Adam moments per parameter"
    )
    if c.use_precision_aware_optimizer and c.optimizer_cpu_offload_fraction == 0:
        text += " (precision-aware optimizer: BF16 moments, 16-bit remainders of the FP32 master)"
    if c.use_distributed_optimizer:
        text += ", sharded over DP x CP (dense weights) and EDP (routed experts) by the distributed optimizer"
    else:
        text += ", not sharded (no distributed optimizer)"
    if c.optimizer_cpu_offload_fraction:
        text += (
            f"; {c.optimizer_cpu_offload_fraction:.0%} of them on the CPU (HybridDeviceOptimizer; its GPU share keeps "
            "FP32 master and moments)"
        )
    return text + "."


def assumptions(ctx: Context, sh: Shard) -> list[str]:
    c, m = ctx.cfg, ctx.model
    out = [
        "Per rank, bytes of every term are shown in GiB (2^30); the peak is the most loaded PP rank.",
        optimizer_assumption(ctx),
        f"Activations per microbatch: {sh.tokens:,} tokens per CP rank ({c.seq_len:,} / CP {c.cp} x MBS {c.mbs})"
        + (f", sequence-parallel tensors / TP {c.tp}" if ctx.sequence_parallel else "")
        + "; fused (flash/cuDNN) attention keeps no s x s scores.",
        "Tensor inventory per layer after the NVIDIA MoE team's list (memory-model.md 4b/4c), checked against "
        "Megatron Core 0.19: TE fuses the attention/dense-MLP input norms into the GEMMs, so layernorm recompute "
        "frees only MLA's input norm and MoE's pre-MLP norm.",
        "In-flight microbatches from Megatron's schedule: 1F1B holds PP - rank microbatches; interleaved 1F1B "
        "is simulated chunk by chunk (the first rank holds about 1 + (PP-1)/(PP x VPP) times the 1F1B amount).",
        "Backward transient: one layer's recomputed (or reloaded) tensors, or on the last stage the BF16 "
        "logits next to the FP32 loss copy, whichever is larger; weight gradients accumulate in place.",
    ]
    if m.is_moe:
        out.append(
            "MoE: drop-less and balanced routing (each EP rank receives top-k x its tokens); routing imbalance "
            "adds to the expert terms. Probabilities are applied in the expert activation."
        )
    if precision_is_quantized(c.precision):
        out.append(
            f"{c.precision}: GEMM inputs cached at 1 byte unless an output-discarding recompute frees them; "
            + (
                "FP8 parameters replace the BF16 weights' quantized cache (fp8_param_gather)."
                if c.fp8_param_gather
                else "TE keeps quantized weight copies (2 B per GEMM weight) across microbatches."
            )
        )
    if ctx.mtp_layers:
        out.append(
            f"MTP: {ctx.mtp_layers} layer(s) like the last decoder layer on the stage the split puts them, with "
            "their own word-embedding copy and a second logits/loss tensor per in-flight microbatch."
        )
    if any(m.attention_layer_types[i] == "linear" for i in range(m.num_layers)):
        out.append(
            "Gated DeltaNet layers: approximate inventory (fla chunked kernel saves q, k, v, FP32 gates)."
        )
    if c.dispatcher == "flex-hybridep":
        out.append(
            "HybridEP buffers sized for the worst case (all tokens to one rank), as HybridEpBuffer allocates."
        )
    if c.dispatcher == "flex-ncclep":
        out.append("NCCL EP buffers are sized by moe_expert_rank_capacity_factor and are not modelled.")
    if c.cuda_graph_impl in ("transformer_engine", "local"):
        out.append(
            "Per-layer CUDA graphs: captured activations are counted as activations; Megatron's shared graph "
            "pool reuses buffers across microbatches, so one set of static input/output buffers per captured "
            "layer is added (order-of-magnitude: Bridge reports 'a few GB')."
        )
    if c.activation_offload:
        out.append(
            "Activation offload: offloaded inputs leave the GPU after the forward; one layer's worth is "
            "back on the GPU during its backward."
        )
    if c.overhead_gib is None:
        out.append(f"Fixed overhead: {DEFAULT_OVERHEAD_WHY}.")
    else:
        out.append(f"Fixed overhead: {c.overhead_gib:g} GiB as given (overhead_gib).")
    out.append(
        "Not modelled: the optimizer step's temporaries (smaller than the forward/backward peak in these "
        "layouts), token-routing imbalance, packed-sequence padding, NCCL user buffers."
    )
    return out
