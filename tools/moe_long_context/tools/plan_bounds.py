"""Lower bounds of the plan plan_layout's evaluation makes of a candidate, from the engine's own functions.

A candidate's plan is what ``plan_evaluate.evaluate`` finds: at the first optimizer-offload level (none, then
0.5, then 1.0 when allowed) where pick_recompute fits the budget, no recompute, a selective label set or full
recompute (uniform x 1 when it fits, then the fewest block layers that fit). This module bounds that plan from
below without running it, so that the search leaves a candidate out only when it provably cannot enter the top
plans:

* Time: one step-time call per recompute family gives each PP stage's seconds by term; a label set replays the
  sum of its labels' terms (the step-time model prices each label alone; ``moe`` subsumes ``moe_act``) and full
  recompute scales with the share of layers it checkpoints, so an option's step is exact arithmetic on those
  terms: the busiest stage times (microbatches + bubble), plus the DP sync and optimizer step of that stage
  (the least of them on a tie), plus the host's Adam step under offload.
* Memory: every term of the memory model that recompute does not change is taken as the model computes it
  (parameters, gradients, optimizer states at each offload level, buffers, layer-kind transients), and the
  tensors are held to the budget less the memory outside PyTorch, over one plus the allocator-cache share
  (``tensor_budget``: the model adds that share of the tensors). Activations are bounded from below per PP
  rank: with no recompute, the peak over the schedule's in-flight states of the layers' kept bytes plus each chunk's embedding and loss tensors; a label set frees at
  most what its labels remove, counted at the in-flight state of that peak, and re-materialises at least what
  it removed in a chunk's last layer during backward; full recompute keeps at least every layer input (block
  recompute the inputs of its first layers and everything after them) and replays one layer at a time. Terms
  left out are non-negative, so a bound over the budget proves that the option cannot fit.
* Levels: evaluate stops at the first level where pick_recompute fits, so a later level counts only while no
  earlier one surely fits; ``refine`` settles that by asking pick_recompute's own trials whether no recompute or
  full uniform recompute fits there (then pick_recompute returns a plan that fits at that level).

``tests/test_plan_bounds.py`` checks the bounds against full evaluations over many candidates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from operator import mul

from ..engine.context import Context
from ..engine.schedule import in_flight_states
from ..engine.step_time import (
    Recompute,
    StepTime,
    _params_per_rank,
    kind_counts,
    offloaded_state,
    rank_layers,
    step_time,
    sync_seconds,
)
from ..memory.activations import kept, removed, shard_of
from ..memory.buffers import buffer_terms
from ..memory.hybrid_layers import kind_transient, layer_inventory
from ..memory.rank_memory import InventoryCache, _stage_layers, chunk_activations, overhead_gib, tensor_budget
from ..memory.terms import GIB
from ..memory.weights import rank_params, static_terms
from ..model.params import spec_cache

Kind = tuple[str, bool]  # (attention type, MoE?): layers of a kind keep and take the same
TIE = 1e-9  # relative: stage times this close count as one busiest stage; bounds are shrunk by as much
OFFLOAD_LEVELS = (0.5, 1.0)  # the optimizer-offload fractions evaluate tries after recompute alone, in order
SPLIT_FIELDS = frozenset(("pp", "vpp", "pipeline_layout", "account_for_embedding_in_pipeline_split",
                          "account_for_loss_in_pipeline_split", "num_layers_in_first_pipeline_stage",
                          "num_layers_in_last_pipeline_stage"))  # fmt: skip


def settings_key(settings: dict) -> tuple:
    """A configuration's settings less its pipeline split, as a cache key: what the kind table depends on."""
    return tuple(sorted((k, _hashable(v)) for k, v in settings.items() if k not in SPLIT_FIELDS))


def _hashable(value):
    if type(value) is list:
        return tuple(value)
    return repr(value) if type(value) is dict else value


class KindTable:
    """Per layer kind, for one set of parallel sizes and knobs (any PP split): the tensors it keeps, the bytes
    kept with no recompute and its input; per label set (a bit mask over ``labels``) the bytes the set frees and
    re-materialises; per chunk its layer kinds; and the seconds each label replays per layer."""

    def __init__(self, ctx: Context, labels: tuple[str, ...]):
        sh = shard_of(ctx)
        m = ctx.model
        self.offload = frozenset(ctx.cfg.activation_offload or [])
        self.labels = labels
        self.kind = [(m.attention_layer_types[i], m.moe_layers[i]) for i in range(m.num_layers)]
        self.mtp_kinds = tuple(self.kind[i] for i in m.mtp_block_layers)  # each MTP depth: the block's layers
        first: dict[Kind, int] = {}
        for i, k in enumerate(self.kind):
            first.setdefault(k, i)
        self.inventory = {k: layer_inventory(ctx, sh, i) for k, i in first.items()}
        self.kept = {k: kept(inv, frozenset(), self.offload) for k, inv in self.inventory.items()}
        self.inputs = {k: sum(s.bytes for s in inv if s.layer_input) for k, inv in self.inventory.items()}
        cache = InventoryCache(ctx, sh)
        self.extras = {(emb, loss): chunk_activations(ctx, sh, [], 0, emb, loss, cache).kept
                       for emb in (False, True) for loss in (False, True)}  # fmt: skip
        self._sets: dict[int, frozenset[str]] = {}
        self._freed: dict[tuple[Kind, int], float] = {}
        self._replayed: dict[tuple[Kind, int], float] = {}
        self._chunks: dict[tuple, tuple] = {}
        self._prefixes: dict[tuple, tuple] = {}
        self._replays: tuple | None = None
        self.static: dict = {}  # static_bytes's parts, by (PP, offload fraction, rank parameters) or layer kinds

    def labels_of(self, mask: int) -> frozenset[str]:
        found = self._sets.get(mask)
        if found is None:
            found = self._sets[mask] = frozenset(x for b, x in enumerate(self.labels) if mask >> b & 1)
        return found

    def freed(self, kind: Kind, mask: int) -> float:
        """Bytes a layer of this kind no longer keeps with these labels."""
        key = (kind, mask)
        found = self._freed.get(key)
        if found is None:
            labels = self.labels_of(mask)
            found = self._freed[key] = self.kept[kind] - kept(self.inventory[kind], labels, self.offload)
        return found

    def replayed(self, kind: Kind, mask: int) -> float:
        """Bytes a layer of this kind re-materialises in its backward with these labels."""
        key = (kind, mask)
        found = self._replayed.get(key)
        if found is None:
            found = self._replayed[key] = removed(self.inventory[kind], self.labels_of(mask))
        return found

    def prefixes(self, chunk: tuple) -> tuple[list[float], list[float], list[float]]:
        """Over a chunk's layers: prefix sums of their inputs and of their kept bytes, and prefix maxima of the
        kept bytes (what block recompute of the first n layers keeps and replays)."""
        found = self._prefixes.get(chunk[5])
        if found is None:
            pin, pkept, pmax = [0.0], [0.0], [0.0]
            for k in chunk[0]:
                pin.append(pin[-1] + self.inputs[k])
                pkept.append(pkept[-1] + self.kept[k])
                pmax.append(max(pmax[-1], self.kept[k]))
            found = self._prefixes[chunk[5]] = (pin, pkept, pmax)
        return found

    def replays(self, ctx: Context) -> tuple[dict[str, dict[Kind, float]], dict[Kind, float]]:
        """Per label, and for full recompute (every layer), the seconds one layer of each kind replays per
        microbatch, as the step-time model prices them."""
        if self._replays is None:
            per_label: dict[str, dict[Kind, float]] = {}
            for group in ([x for x in self.labels if x != "moe"], [x for x in self.labels if x == "moe"]):
                if group:
                    layers = step_time(ctx, Recompute.selective(group), 0.0).layer_terms
                    for label in group:
                        per_label[label] = {k: t.get(f"recompute:{label}", 0.0) for k, t in layers.items()}
            layers = step_time(ctx, Recompute("full"), 0.0).layer_terms
            self._replays = per_label, {k: t.get("recompute:full", 0.0) for k, t in layers.items()}
        return self._replays

    def chunk(self, key: tuple) -> tuple:
        """(kinds in order, kind counts, kept bytes with no recompute, layer-input bytes, embedding and loss
        bytes, ``key``) of one chunk: ``key`` is (first decoder layer, decoder layers, MTP layers, embedding,
        loss)."""
        found = self._chunks.get(key)
        if found is None:
            start, count, mtp, embedding, loss = key
            seq = tuple(self.kind[start : start + count]) + self.mtp_kinds * mtp
            counts: dict[Kind, int] = {}
            for k in seq:
                counts[k] = counts.get(k, 0) + 1
            extra = self.extras[embedding, loss]
            kept0 = sum(n * self.kept[k] for k, n in counts.items()) + extra
            inputs = sum(n * self.inputs[k] for k, n in counts.items()) + extra
            found = self._chunks[key] = (seq, counts, kept0, inputs, extra, key)
        return found


def kind_table(ctx: Context, labels: tuple[str, ...], key: tuple) -> KindTable:
    """The kind table of a candidate, kept per model for the candidates that share its sizes and knobs (``key``:
    its settings_key)."""
    cache = spec_cache(ctx.model).setdefault("plan_kind_tables", {})
    key = (labels, key)
    table = cache.get(key)
    if table is None:
        if len(cache) > 1024:
            cache.clear()
        table = cache[key] = KindTable(ctx, labels)
    return table


@dataclass
class RankBound:
    """One PP rank: what it holds, and its activations with no recompute (a lower bound, bytes)."""

    layers: list[int]
    mtp: int
    embedding: bool
    loss: bool
    chunks: list[tuple]  # KindTable.chunk of each virtual stage
    states: tuple[tuple[int, ...], ...]  # the schedule's in-flight states
    none: float
    weights: dict[Kind, float]  # in-flight microbatches x layers of each kind at that peak
    last: frozenset[Kind]  # kinds of the chunks' last layers
    params: object  # its parameters (memory.weights.RankParams)
    kinds: tuple  # how many of its decoder layers are of each kind


def _split_shape(ctx: Context) -> list[tuple]:
    """Per PP rank, what the split puts there: each chunk's (first layer, layers, MTP, embedding, loss), the
    rank's decoder layers, MTP layers, embedding, loss, its decoder layers by kind and the kinds of the chunks'
    last layers. The same for every candidate of the model with this split, so kept per model and split (splits
    are cached objects)."""
    split = ctx.split.split
    shapes = spec_cache(ctx.model).setdefault("plan_split_shapes", {})
    found = shapes.get(id(split))
    if found is not None and found[0] is split:
        return found[1]
    m = ctx.model
    kind = [(m.attention_layer_types[i], m.moe_layers[i]) for i in range(m.num_layers)]
    out = []
    for r, chunk_layers in enumerate(_stage_layers(ctx)):
        stages = split.stages[r]
        chunks = [(ls[0] if ls else -1, len(ls), s.mtp, s.embedding, s.loss)
                  for ls, s in zip(chunk_layers, stages, strict=True)]  # fmt: skip
        flat = [i for ls in chunk_layers for i in ls]
        last = frozenset(kind[m.mtp_block_layers[-1]] if s.mtp else kind[ls[-1]]
                         for ls, s in zip(chunk_layers, stages, strict=True) if ls or s.mtp)  # fmt: skip
        out.append((chunks, flat, sum(s.mtp for s in stages), any(s.embedding for s in stages),
                    any(s.loss for s in stages), kind_counts(m, flat), last))  # fmt: skip
    if len(shapes) > 4096:
        shapes.clear()
    shapes[id(split)] = (split, out)
    return out


def rank_bounds(ctx: Context, table: KindTable) -> list[RankBound]:
    c, split = ctx.cfg, ctx.split.split
    out = []
    for r, (keys, flat, mtp, embedding, loss, kinds, last) in enumerate(_split_shape(ctx)):
        chunks = [table.chunk(key) for key in keys]
        states = in_flight_states(c.pp, r, split.vpp, ctx.num_microbatches or c.pp, c.ep_overlap)
        kept0 = [ch[2] for ch in chunks]
        none, best = -1.0, states[0]
        for w in states:
            held = sum(map(mul, w, kept0))
            if held > none:
                none, best = held, w
        weights: dict[Kind, float] = {}
        for n, ch in zip(best, chunks, strict=True):
            for k, count in ch[1].items():
                weights[k] = weights.get(k, 0.0) + n * count
        params = rank_params(ctx, flat, mtp, embedding, loss)
        out.append(RankBound(flat, mtp, embedding, loss, chunks, states, none, weights, last, params, kinds))
    return out


def static_bytes(ctx: Context, level: tuple[float, Context], r: RankBound, table: KindTable, sh) -> float:
    """Tensor bytes of a rank recompute does not change, each term as the memory model computes it: weights,
    gradients and optimizer states at this offload level (``level``: its fraction and configuration), buffers
    and the layer-kind transient (none of which offload changes); kept in the kind table for the ranks that hold
    the same parameters or layer kinds. The memory beyond the tensors is ``tensor_budget``'s."""
    fraction, level_ctx = level
    key = (ctx.cfg.pp, fraction, r.params)
    weights = table.static.get(key)
    if weights is None:
        weights = table.static[key] = sum(t.bytes for t in static_terms(level_ctx, r.params))
    rest = table.static.get(r.kinds)
    if rest is None:
        types = {kind[0] for kind, _ in r.kinds}
        terms = buffer_terms(ctx, sh, r.layers, 0.0)
        rest = sum(t.bytes for t in terms) + kind_transient(ctx, sh, types)[0]
        table.static[r.kinds] = rest
    return weights + rest


def layout_cannot_fit(ctx: Context, budget: float, offload_ctxs: list[Context]) -> bool:
    """Whether no split of this layout (any PP split or VPP) can fit, at any offload level: some PP rank holds at
    least ceil(layers / PP) decoder layers, and the weights, gradients and optimizer states of the lightest such
    set of layers, with the buffers and the overhead every rank has, already exceed the budget (these bytes grow
    with every layer added, and recompute frees none of them). Models with more than two layer kinds are not
    judged here (False)."""
    m = ctx.model
    layers: dict[Kind, list[int]] = {}
    for i in range(m.num_layers):
        layers.setdefault((m.attention_layer_types[i], m.moe_layers[i]), []).append(i)
    if len(layers) > 2:
        return False
    need = -(-m.num_layers // ctx.cfg.pp)
    first, *second = layers.values()
    other = second[0] if second else []
    sets = [first[:n] + other[: need - n] for n in range(len(first) + 1) if 0 <= need - n <= len(other)]
    sh = shard_of(ctx)
    rest = sum(t.bytes for t in buffer_terms(ctx, sh, [], 0.0))
    tensors = tensor_budget(ctx, budget) * (1 + TIE)
    for level_ctx in (*reversed(offload_ctxs), ctx):  # most offloaded first: it usually decides
        for chosen in sets:
            params = rank_params(level_ctx, chosen, 0, False, False)
            if sum(t.bytes for t in static_terms(level_ctx, params)) + rest <= tensors:
                return False
    return True


def _stage_sums(st: StepTime) -> list[float]:
    return [sum(v for k, v in terms.items() if ":" not in k) for terms in st.stage_terms]


def least_sync(ctx: Context) -> float:
    """The least DP sync and optimizer step (no offload) of any PP stage, were it the busiest. Both grow with a
    stage's dense and expert parameters, so only stages no other holds fewer of both can be the least."""
    stages = [(_params_per_rank(ctx, layers), layers) for layers in rank_layers(ctx.split.split)]
    pareto = [layers for (d, e), layers in stages if not any(d2 <= d and e2 <= e and (d2, e2) != (d, e)
                                                            for (d2, e2), _ in stages)]  # fmt: skip
    return min(sum(sync_seconds(ctx, layers, 0.0)) for layers in pareto)


def cheap_floor(ctx: Context, none: StepTime | None = None) -> tuple[float, StepTime]:
    """Seconds per token no plan of this candidate goes below, whatever its recompute and offload (recompute
    only adds to each stage's time, offload only to the optimizer step, and the DP sync and optimizer step are
    at least the least of any stage's), and its step time with neither."""
    none = none or step_time(ctx, Recompute(), 0.0)
    floor = (none.pipeline_factor * max(_stage_sums(none)) + least_sync(ctx)) / none.tokens_per_step
    return floor * (1 - TIE), none


def _masks_by_size(n: int) -> list[int]:
    """Every non-empty label set of n labels, smaller sets first (a set's subsets come before it)."""
    return sorted(range(1, 1 << n), key=lambda m: (m.bit_count(), m))


@dataclass(frozen=True)
class Option:
    """A recompute setting evaluate may end with: selective labels (a mask; 0 is none), or full recompute of
    ``block`` layers per chunk (0: uniform x 1)."""

    mask: int = 0
    full: bool = False
    block: int = 0


NONE = Option()
UNIFORM = Option(full=True)


class CandidateBound:
    """Bounds of one candidate's plan: the fastest it could be, and the offload levels where it could fit.
    ``key`` is the settings_key of the candidate's settings (the kind tables and static bytes are kept by it).

    An option's time bound is the busiest stage's time with its replay, times microbatches + bubble, plus the
    least DP sync and optimizer step of any stage: it never falls as labels or block layers are added, so a
    level is bounded by its fastest minimal label sets that could fit, and the fewest block layers that could."""

    def __init__(self, ctx: Context, labels: tuple[str, ...], budget: float,
                 offload_ctx: Callable[[float], Context] | None, floor: tuple[float, StepTime], key: tuple):  # fmt: skip
        self.ctx, self.labels, self.budget = ctx, labels, budget
        self.tensors = tensor_budget(ctx, budget) * (1 + TIE)  # needs and _over: tensor bytes over this
        self.floor, self.none = floor
        self.sh = shard_of(ctx)
        self.table = kind_table(ctx, labels, key)
        self.ranks = rank_bounds(ctx, self.table)
        self.fractions = (0.0, *OFFLOAD_LEVELS) if offload_ctx is not None else (0.0,)
        self._offload_ctx = offload_ctx
        self._level_ctx: dict[int, Context] = {0: ctx}
        self.every = (1 << len(labels)) - 1
        split = ctx.split.split
        self.chunk = max(s.decoders for row in split.stages for s in row) or 1
        self._needs: dict[int, list[float | None]] = {}
        self._by_load = sorted(range(len(self.ranks)), key=lambda i: -self.ranks[i].none)
        self._useful: int | None = None
        self._level: dict[int, float] = {}
        self._offload: dict[int, float] = {}
        self._seconds: dict[Option, float] = {}
        self._stages: tuple | None = None
        self._held: dict[tuple, float] = {}

    def level(self, i: int) -> tuple[float, Context]:
        """(offload fraction, the candidate configured with it) of level ``i``; made when first needed."""
        if i not in self._level_ctx:
            self._level_ctx[i] = self._offload_ctx(self.fractions[i])
        return self.fractions[i], self._level_ctx[i]

    @property
    def levels(self) -> list[tuple[float, Context]]:
        return [self.level(i) for i in range(len(self.fractions))]

    # ----------------------------------------------------------------- memory

    def _order(self, level: int):
        """(tensor bytes over the tensor budget with no recompute, rank) of every rank, the most loaded first
        (the rank an option most likely fails on), each rank's static bytes computed when first asked for."""
        needs = self._needs.get(level)
        if needs is None:
            needs = self._needs[level] = [None] * len(self.ranks)
        for i in self._by_load:
            need = needs[i]
            r = self.ranks[i]
            if need is None:
                static = static_bytes(self.ctx, self.level(level), r, self.table, self.sh)
                need = needs[i] = static + r.none - self.tensors
            yield need, r

    def memory(self, option: Option, level: int) -> float:
        """The lower bound of the option's peak bytes at this offload level (its tensors' bound with the memory
        beyond them, which grows with the tensors)."""
        over = max(self._over(option, r, need) for need, r in self._order(level))
        return self.budget + over * (self.budget - overhead_gib(self.ctx) * GIB) / self.tensors

    def fits(self, option: Option, level: int) -> bool:
        """Whether the option's memory lower bound fits the budget on every rank at this offload level."""
        return all(self._over(option, r, need) <= 0 for need, r in self._order(level))

    def _over(self, option: Option, r: RankBound, need: float) -> float:
        """Tensor bytes over the tensor budget on rank ``r`` (at least), given ``need``: its tensor bytes over it
        with no recompute."""
        if option.full:
            return need - r.none + self._full_activations(r, option.block)
        m = option.mask
        if not m:
            return need
        key = (id(r), m)
        slack = self._held.get(key)  # what the labels free less what they replay: the same at every level
        if slack is None:
            t = self.table
            freed = sum(n * t.freed(k, m) for k, n in r.weights.items())
            slack = self._held[key] = freed - max((t.replayed(k, m) for k in r.last), default=0.0)
        return need - slack

    def _full_activations(self, r: RankBound, block: int, relaxed: bool = False) -> float:
        """Activations and replay of full recompute on rank ``r``: uniform x 1 (block 0) keeps every layer
        input and replays one layer at a time; block n keeps the first n layers' inputs and all the rest, and
        replays the largest of those n (``relaxed``: the first of them, which makes it shrink as n grows). The
        same at every offload level, so kept per rank."""
        key = (id(r), -1 - block, relaxed)
        found = self._held.get(key)
        if found is None:
            found = self._held[key] = self._full_bytes(r, block, relaxed)
        return found

    def _full_bytes(self, r: RankBound, block: int, relaxed: bool) -> float:
        t = self.table
        if not block:
            inputs = [ch[3] for ch in r.chunks]
            held = max(sum(map(mul, s, inputs)) for s in r.states)
            return held + max((t.kept[k] for ch in r.chunks for k in ch[1]), default=0.0)
        per_chunk, replay = [], 0.0
        for ch in r.chunks:
            n = min(block, len(ch[0]))
            pin, pkept, pmax = t.prefixes(ch)
            per_chunk.append(pin[n] + pkept[-1] - pkept[n] + ch[4])
            replay = max(replay, pmax[min(n, 1)] if relaxed else pmax[n])
        return max(sum(map(mul, s, per_chunk)) for s in r.states) + replay

    def level_possible(self, level: int) -> bool:
        """Whether any option could fit at this level by its memory lower bound."""
        return self.level_bound(level) < math.inf

    def impossible_levels(self) -> frozenset[float]:
        """Offload fractions (0: none) at which no option fits even by its memory lower bound."""
        return frozenset(f for i, f in enumerate(self.fractions) if not self.level_possible(i))

    # ----------------------------------------------------------------- time

    def _replay_stages(self) -> tuple:
        """Per PP stage: seconds per microbatch before recompute, each label's replay and full recompute's (a
        stage replays at least what its decoder layers do; MTP layers add to it)."""
        if self._stages is None:
            ctx = self.ctx
            replay, full = self.table.replays(ctx)
            counts = [kind_counts(ctx.model, layers) for layers in rank_layers(ctx.split.split)]
            per_label = {x: [sum(n * replay[x][k] for k, n in kc) for kc in counts] for x in self.labels}
            whole = [sum(n * full[k] for k, n in kc) for kc in counts]
            self._stages = (_stage_sums(self.none), per_label, whole, least_sync(ctx))
        return self._stages

    def seconds(self, option: Option) -> float:
        """The lower bound of the option's seconds per token before offload."""
        found = self._seconds.get(option)
        if found is None:
            base, per_label, whole, sync = self._replay_stages()
            if option.full:
                share = min(1.0, option.block / self.chunk) if option.block else 1.0
                stage = [a + share * b for a, b in zip(base, whole, strict=True)]
            else:
                labels = self.table.labels_of(option.mask)
                if "moe" in labels:
                    labels = labels - {"moe_act"}  # moe replays what moe_act would
                stage = list(base)
                for x in labels:
                    stage = [a + b for a, b in zip(stage, per_label[x], strict=True)]
            found = (self.none.pipeline_factor * max(stage) + sync) / self.none.tokens_per_step
            self._seconds[option] = found
        return found

    def offload_seconds(self, level: int) -> float:
        """Seconds per token optimizer offload at this level adds (the host's Adam step)."""
        if level not in self._offload:
            fraction, ctx = self.level(level)
            extra = 0.0
            if fraction:
                layers = rank_layers(self.ctx.split.split)[0]
                added = sync_seconds(self.ctx, layers, offloaded_state(ctx))[1]
                extra = (added - sync_seconds(self.ctx, layers, 0.0)[1]) / self.none.tokens_per_step
            self._offload[level] = extra
        return self._offload[level]

    def level_bound(self, level: int, cap: float = math.inf) -> float:
        """A lower bound of the fastest option at this level, offload included: exact (inf when nothing could
        fit) when it is below ``cap``; else some value at least ``cap`` (the search needs no more of it)."""
        if level in self._level:
            return self._level[level]
        if self.floor >= cap:
            return self.floor
        if all(need <= 0 for need, _ in self._order(level)):  # no recompute may fit: nothing is faster
            self._level[level] = self.floor + self.offload_seconds(level)
            return self._level[level]
        t, every = self.table, self.every
        # a label set frees at most what all of them free: if that falls short on a rank, none fits
        selective = all(sum(n * t.freed(k, every) for k, n in r.weights.items()) >= need
                        for need, r in self._order(level))  # fmt: skip
        full = self.fits(UNIFORM, level)
        if not selective and not full:
            self._level[level] = math.inf
            return math.inf
        extra = self.offload_seconds(level)
        best, exact = math.inf, True
        if selective:
            useful, required = self._useful_labels(), 0
            for b in range(len(self.labels)):  # a label the others cannot do without on some rank
                rest = useful & ~(1 << b)
                if any(sum(n * t.freed(k, rest) for k, n in r.weights.items()) < need
                       for need, r in self._order(level)):  # fmt: skip
                    required |= 1 << b
            fitting: list[int] = []
            for mask in _masks_by_size(len(self.labels)):
                if mask & required != required or mask & ~useful:
                    continue  # lacks a label every fitting set has, or holds one that frees nothing
                if any(mask & f == f for f in fitting):
                    continue  # a superset of a set that could fit is never faster
                if self.fits(Option(mask=mask), level):
                    fitting.append(mask)
                    best = min(best, self.seconds(Option(mask=mask)) + extra)
        if full:
            cheapest = self.seconds(Option(full=True, block=1 if self.chunk > 1 else 0)) + extra
            if cheapest >= min(best, cap):
                if cheapest < best:
                    best, exact = cheapest, False  # at least cap: full recompute is not looked at closer
            else:
                best = min(best, self.seconds(Option(full=True, block=self._smallest_block(level))) + extra)
        if exact:
            self._level[level] = best
        return best

    def _useful_labels(self) -> int:
        """The labels that free bytes on some rank: one that frees none only adds replay and transient, so a
        set without it is at least as fast and fits at least as well."""
        if self._useful is None:
            t, useful = self.table, 0
            for b in range(len(self.labels)):
                if any(t.freed(k, 1 << b) > 0 and n > 0 for r in self.ranks for k, n in r.weights.items()):
                    useful |= 1 << b
            self._useful = useful
        return self._useful

    def _smallest_block(self, level: int) -> int:
        """The fewest block layers whose relaxed bound fits (0 when none below uniform does): fewer never fit
        by the exact bound either, and the relaxed bound shrinks as the block grows, so bisection finds it."""
        low, high, found = 1, self.chunk - 1, 0
        while low <= high:
            mid = (low + high) // 2
            if all(need - r.none + self._full_activations(r, mid, relaxed=True) <= 0
                   for need, r in self._order(level)):  # fmt: skip
                found, high = mid, mid - 1
            else:
                low = mid + 1
        return found

    # ----------------------------------------------------------------- bounds

    def bound(self, cap: float = math.inf) -> float:
        """Seconds per token no plan of this candidate goes below (inf: none can fit at any level); exact in
        the sense of ``level_bound`` below ``cap``."""
        best = math.inf
        for i in range(len(self.fractions)):
            if self.floor >= best:  # no level is faster than the floor
                break
            best = min(best, self.level_bound(i, cap))
        return best * (1 - TIE)

    def refine(self, surely_fits: Callable[[int], bool], cap: float = math.inf) -> float:
        """``bound`` where a level that surely fits (``surely_fits(level)``: pick_recompute's own trials say no
        recompute or full uniform recompute fits there) ends the levels evaluate can reach."""
        best, n = math.inf, len(self.fractions)
        for level in range(n):
            best = min(best, self.level_bound(level, cap))
            if (
                min((self.level_bound(i, min(best, cap)) for i in range(level + 1, n)), default=math.inf)
                >= best
            ):
                break
            if self.level_bound(level, cap) < math.inf and surely_fits(level):
                break
        return best * (1 - TIE)
