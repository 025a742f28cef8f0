"""The per-rank memory model: every PP rank's memory at its peak, term by term, and the assumptions.

Static terms come from ``weights.py`` (parameters, gradients, optimizer states, FP8 weight caches) and
``buffers.py`` (dispatcher and CUDA-graph buffers); activations are the tensor inventory of
``activations.py`` per model chunk, times the microbatches each chunk holds at the peak (``schedule.py``),
plus the largest backward transient; a stated fixed overhead covers what PyTorch does not allocate.
Everything is bytes internally and GiB (2^30) in results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from ..engine.config import precision_is_quantized
from ..engine.context import Context
from ..engine.schedule import peak_in_flight
from ..model.params import spec_cache
from .activations import BF16, FP32, Saved, Shard, kept, removed, shard_of
from .buffers import buffer_terms
from .hybrid_layers import assumptions as hybrid_assumptions
from .hybrid_layers import kind_transient, layer_inventory
from .overhead import (
    CACHE_TERM,
    FIXED_TERM,
    OUTSIDE_TERM,
    OVERHEAD_TERMS,
    allocator_cache_fraction,
    outside_pytorch_gib,
)
from .overhead import why as overhead_why
from .terms import GIB, Term
from .weights import optimizer_assumption, padded_vocab, rank_params, static_terms, step_grad_copy_bytes


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

    @property
    def allocated(self) -> float:
        """PyTorch's allocated peak: every term but the memory outside the tensors."""
        return sum(t.bytes for t in self.terms if t.name not in OVERHEAD_TERMS)

    @property
    def reserved(self) -> float:
        """PyTorch's reserved pool at the peak: the tensors and the allocator's cached blocks."""
        return self.allocated + sum(t.bytes for t in self.terms if t.name == CACHE_TERM)


@dataclass
class MemoryModel:
    """Every PP rank's memory and the assumptions behind the numbers (written when first read: pick_recompute and
    the planner ask for hundreds of models and read only their totals)."""

    ranks: list[RankMemory]
    overhead_gib: float
    ctx: Context = field(repr=False)
    shard: Shard = field(repr=False)

    @cached_property
    def assumptions(self) -> list[str]:
        return assumptions(self.ctx, self.shard)

    @property
    def peak_rank(self) -> RankMemory:
        return max(self.ranks, key=lambda r: (r.total, -r.pp_rank))


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
    """Layer inventories by (attention type, MoE or dense): a model has only a few distinct layer kinds; and
    chunk activations by the kinds of their layers, which most chunks of a split share."""

    def __init__(self, ctx: Context, sh: Shard):
        self.ctx, self.sh = ctx, sh
        self._by_kind: dict[tuple[str, bool], list[Saved]] = {}
        self._chunks: dict[tuple, ChunkActivations] = {}
        self._static: dict[object, list[Term]] = {}

    def static(self, params) -> list[Term]:
        """static_terms of these parameters, once per distinct parameter count (most PP ranks share one)."""
        found = self._static.get(params)
        if found is None:
            found = self._static[params] = static_terms(self.ctx, params)
        return found

    def chunk(self, layers: list[int], mtp: int, embedding: bool, loss: bool) -> ChunkActivations:
        """chunk_activations of these layers, computed once per sequence of layer kinds and stage role."""
        key = (self._kinds(layers), mtp, embedding, loss)
        found = self._chunks.get(key)
        if found is None:
            found = self._chunks[key] = chunk_activations(
                self.ctx, self.sh, layers, mtp, embedding, loss, self
            )
        return found

    def _kinds(self, layers: list[int]) -> tuple:
        """The (attention type, MoE) of each layer, kept per model by (first layer, count): a chunk's layers are
        consecutive (_stage_layers numbers them so)."""
        if not layers:
            return ()
        table = spec_cache(self.ctx.model).setdefault("chunk_kinds", {})
        span = (layers[0], len(layers))
        found = table.get(span)
        if found is None:
            types, moe = self.ctx.model.attention_layer_types, self.ctx.model.moe_layers
            found = table[span] = tuple([(types[i], moe[i]) for i in layers])
        return found

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
        inventories += [cache(i) for i in m.mtp_block_layers] * mtp  # every depth keeps its own activations
    terms: dict[str, float] = {}
    if full:
        kept_bytes, transient = _full_recompute_kept(ctx, inventories, offload)
        terms["decoder layers (full recompute: layer inputs)"] = kept_bytes
    else:
        # layers of a kind share one inventory list: sum each list once
        per_inventory: dict[int, tuple[float, float]] = {}
        for inv in inventories:
            if id(inv) not in per_inventory:
                reload = sum(s.bytes for s in inv if s.offload & offload and not s.removed_by & recompute)
                per_inventory[id(inv)] = (kept(inv, recompute, offload), removed(inv, recompute) + reload)
        kept_per_layer = [per_inventory[id(inv)][0] for inv in inventories]
        kept_bytes = sum(kept_per_layer)
        # Backward runs the layers in reverse: while layer j re-materialises what recompute dropped (and
        # reloads what was offloaded), the layers after it have already released their activations.
        transient, released = 0.0, 0.0
        for j in range(len(inventories) - 1, -1, -1):
            transient = max(transient, per_inventory[id(inventories[j])][1] - released)
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
        if m.final_logit_softcapping:  # scale * tanh(logits / scale): tanh keeps its BF16 output for backward
            capped = heads * BF16 * padded_vocab(ctx) / c.tp * sh.tokens
            terms["logit softcapping (tanh output)"] = capped
            kept_bytes += capped
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
    """One PP rank at its peak: static terms, activations held by the schedule, transients and buffers."""
    c, m = ctx.cfg, ctx.model
    split = ctx.split.split
    stages = split.stages[rank]
    layers = [i for chunk in layers_by_stage[rank] for i in chunk]
    mtp = sum(s.mtp for s in stages)
    has_e, has_l = any(s.embedding for s in stages), any(s.loss for s in stages)
    mem = RankMemory(rank, layers, mtp, has_e, has_l, [])
    params = rank_params(ctx, layers, mtp, has_e, has_l)
    mem.terms += cache.static(params)
    static_count = len(mem.terms)

    chunks = [cache.chunk(layers_by_stage[rank][v], s.mtp, s.embedding, s.loss) for v, s in enumerate(stages)]
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
    transient, what = kind_transient(ctx, sh, {m.attention_layer_types[i] for i in layers})
    if transient:
        mem.terms.append(
            Term(f"layer-kind transient: {what}", transient, "one layer at a time, see assumptions")
        )
    # The optimizer step runs after the activations and transients are gone; its FP32 gradient copies set the
    # peak when they are larger (BF16 gradient buffers with experts unsharded over a small EDP).
    step_copy = step_grad_copy_bytes(ctx, params)
    freed = sum(t.bytes for t in mem.terms[static_count:])
    if step_copy > freed:
        mem.terms.append(
            Term(
                "optimizer-step transient (FP32 copy of the BF16 gradient shard)",
                step_copy - freed,
                f"{step_copy / GIB:.3g} GiB of FP32 gradients (distrib_optimizer.py:2782) less the "
                f"{freed / GIB:.3g} GiB of activations and transients freed before the step",
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


# --------------------------------------------------------------------------- the model


def _outside_key(ctx: Context) -> tuple[str, bool]:
    """The dispatcher and whether its expert group leaves the NVLink domain (what the outside memory depends on)."""
    domain = ctx.gpu.nvlink_domain if ctx.gpu is not None else 8
    return ctx.cfg.dispatcher, ctx.layout.ep * ctx.layout.etp > domain


def _overhead_parts(ctx: Context) -> tuple[float, float]:
    """(share of the tensors the allocator caches, bytes beyond them whatever the tensors): (0, overhead_gib) as
    given, else the measured cache share and memory outside PyTorch (overhead.py)."""
    if ctx.cfg.overhead_gib is not None:
        return 0.0, ctx.cfg.overhead_gib * GIB
    share = allocator_cache_fraction(ctx.gpu.id if ctx.gpu is not None else None)
    return share, outside_pytorch_gib(*_outside_key(ctx)) * GIB


def overhead_gib(ctx: Context) -> float:
    """The overhead every rank carries whatever its tensors: overhead_gib as given, else the memory outside
    PyTorch (the allocator cache, proportional to the tensors, comes on top; see ``overhead_terms``)."""
    return _overhead_parts(ctx)[1] / GIB


def overhead_terms(ctx: Context, allocated: float) -> list[Term]:
    """Memory beyond the tensors: the request's fixed overhead_gib, or the two measured parts (overhead.py)."""
    return _overhead_of(ctx)(allocated)


def tensor_budget(ctx: Context, budget: float) -> float:
    """The tensor bytes (PyTorch's allocated) a rank may hold and stay within ``budget`` bytes: overhead_terms adds
    the memory outside PyTorch and a fixed share of the tensors as the allocator's cache, so a rank fits exactly
    when its tensors are at most (budget - outside) / (1 + share); with overhead_gib given, budget less it. The
    planner bounds tensors against it (plan_bounds.py): without the share its bound let through DeepSeek-V3
    candidates whose selective recompute was 5 GiB over."""
    share, fixed = _overhead_parts(ctx)
    return (budget - fixed) / (1 + share)


def _overhead_of(ctx: Context):
    """overhead_terms for this configuration as a function of the tensors' bytes (its table lookups made once)."""
    share, fixed = _overhead_parts(ctx)
    if ctx.cfg.overhead_gib is not None:
        return lambda allocated: [Term(FIXED_TERM, fixed, "overhead_gib as given")]
    return lambda allocated: [
        Term(CACHE_TERM, share * allocated, f"{share:.1%} of the {allocated / GIB:.3g} GiB of tensors"),
        Term(OUTSIDE_TERM, fixed, "device - reserved (see assumptions)"),
    ]


def memory_model(ctx: Context) -> MemoryModel | None:
    """Memory of every PP rank, or None when the configuration has no pipeline split or layout."""
    if ctx.split.split is None or ctx.layout.dp is None or ctx.layout.edp is None or not ctx.cfg.seq_len:
        return None
    sh = shard_of(ctx)
    layers_by_stage = _stage_layers(ctx)
    cache = InventoryCache(ctx, sh)
    overhead = _overhead_of(ctx)
    ranks = []
    for r in range(ctx.cfg.pp):
        mem = rank_memory(ctx, r, layers_by_stage, sh, cache)
        mem.terms += overhead(mem.allocated)
        ranks.append(mem)
    peak = max(ranks, key=lambda m: (m.total, -m.pp_rank))
    return MemoryModel(ranks=ranks, overhead_gib=(peak.total - peak.allocated) / GIB, ctx=ctx, shard=sh)


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
            f"MTP: {ctx.mtp_layers} depth(s) of a block like decoder layer(s) {list(m.mtp_block_layers)}"
            + (" (one block's weights, applied at every depth)" if m.mtp_use_repeated_layer else "")
            + " on the stage the split puts them, with their own word-embedding copy and one more logits/loss "
            "tensor per depth and in-flight microbatch."
        )
    if any(m.attention_layer_types[i] == "linear" for i in range(m.num_layers)):
        out.append(
            "Gated DeltaNet layers: approximate inventory (fla chunked kernel saves q, k, v, FP32 gates)."
        )
    out += hybrid_assumptions(ctx)
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
        out.append(
            f"Beyond the tensors: {overhead_why(ctx.gpu.id if ctx.gpu is not None else None, *_outside_key(ctx))}."
        )
    else:
        out.append(
            f"Fixed overhead: {c.overhead_gib:g} GiB as given (overhead_gib), instead of the measured parts."
        )
    out.append(
        "Optimizer step: with a BF16 gradient buffer the FP32 gradient copies Megatron allocates for the step count "
        "when they exceed the activations freed before it. Not modelled: token-routing imbalance, packed-sequence "
        "padding, NCCL user buffers."
    )
    return out
