"""Candidate search for plan_layout: layouts that factor the world, their pipeline splits, and the bounds that
order a best-first search (compute-only step time, then a memory forecast that implies recompute)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..engine.config import TrainingConfig
from ..engine.context import Context
from ..engine.pipeline import propose_splits
from ..engine.rules.cp import shard_target
from ..engine.rules.providers import max_tp
from ..engine.step_time import Recompute, step_time
from ..memory.terms import GIB
from ..model.params import model_params, spec_cache
from ..model.specs import GpuSpec, ModelSpec
from .plan_models import PlanLayoutRequest
from .size_cp import _constraint_problems, comm_type_for, powers_of_two


@dataclass(frozen=True)
class Candidate:
    tp: int
    cp: int
    pp: int
    vpp: int | None
    ep: int
    mbs: int
    split: tuple[tuple[str, Any], ...]  # pipeline split settings
    bound_s: float  # optimistic seconds per token per GPU (lower is better)


def default_precision(gpu: GpuSpec) -> str:
    for recipe in ("mxfp8", "fp8-blockwise", "fp8-tensorwise"):
        if recipe in gpu.quant_recipes:
            return recipe
    return "bf16"


def default_dispatcher(gpu: GpuSpec) -> str:
    if gpu.is_nvl72 and "hybridep" in gpu.flex_backends:
        return "flex-hybridep"
    if "deepep" in gpu.flex_backends:
        return "flex-deepep"
    return "alltoall"


MAX_TP = 16  # TP beyond 16 leaves GEMM shards too thin to be worth it, even inside an NVL72 domain
DEFAULT_TOKENS_PER_STEP = 2**23  # default global batch: 8M tokens a step (64 sequences of 128K)


def default_gbs(seq_len: int) -> int:
    return max(1, DEFAULT_TOKENS_PER_STEP // seq_len)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_options(model: ModelSpec, gpu: GpuSpec) -> list[int]:
    out = []
    for tp in powers_of_two(min(MAX_TP, gpu.nvlink_domain)):
        if model.tp_splits_attention(tp) and tp <= (max_tp(model) or tp):
            out.append(tp)
    return out


# GPT split settings HybridModel does not read (rules/mamba.py HYBRID_GPT_SPLIT_IGNORED)
HYBRID_IGNORES = {
    "pipeline_layout",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
}


def _split_options(model: ModelSpec, pp: int, mtp: int, cache: dict) -> list[tuple[int | None, dict]]:
    """(VPP, split settings) pairs that split the layers over PP (VPP 1, 2, 4, ...)."""
    if pp == 1:
        return [(None, {})]
    key = (pp, mtp)
    if key not in cache:
        options = []
        per_rank = model.num_layers // pp
        # a hybrid stack takes no VPP (Bridge's HybridModelProvider refuses it; Megatron-LM needs '|' in the
        # pattern) and splits by its pattern alone: evenly, or with first/last stage counts
        vpps = [None] if model.is_hybrid else [None, *(v for v in (2, 3, 4, 6, 8, 12) if v <= per_rank)]
        for vpp in vpps:
            proposals = propose_splits(model.num_layers, pp, vpp, mtp, limit=3 if model.is_hybrid else 1)
            if model.is_hybrid:
                proposals = [p for p in proposals if not set(p.settings) & HYBRID_IGNORES]
            if proposals:
                options.append((vpp, dict(proposals[0].settings)))
        cache[key] = options
    return cache[key]


def enumerate_candidates(
    model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, mtp: int, gbs: int, excluded: dict[str, int]
) -> list[Candidate]:
    """Layouts that factor the world, split the layers, suit the sequence, take the global batch in whole
    microbatches, and could hold their weights. What is left out is counted in ``excluded`` by reason."""
    world, seq = req.num_gpus, req.seq_len
    split_cache: dict = {}
    experts = [e for e in divisors(model.num_experts) if e <= world]  # any EP dividing the experts
    totals = model_params(model)
    dense_params = totals.total - totals.experts + totals.mtp
    usable = gpu.usable_hbm_gib * GIB
    target = shard_target(gpu)
    out: list[Candidate] = []

    def skip(reason: str, n: int = 1) -> None:
        excluded[reason] = excluded.get(reason, 0) + n

    for tp in _tp_options(model, gpu):
        for cp in powers_of_two(world // tp):
            if world % (tp * cp):
                continue
            shard = seq // (tp * cp)
            if cp > 1 and not target // 8 <= shard <= target * 4:
                skip("cp: tokens per TP x CP shard far from the target")
                continue
            if _constraint_problems(model, seq, tp, cp, tp > 1, False, world):
                skip("cp: sequence or attention constraints")
                continue
            for pp in divisors(world // (tp * cp)):
                if pp > max(1, model.num_layers // 2):
                    continue
                splits = _split_options(model, pp, mtp, split_cache)
                if not splits:
                    skip("pipeline: no split of the layers over this PP")
                    continue
                dp = world // (tp * cp * pp)
                for ep in experts:
                    if world % (ep * pp):
                        continue
                    # BF16 weights alone (a lower bound of any plan's memory) must leave room
                    if 2 * (dense_params / (tp * pp) + totals.experts / (ep * pp)) > 0.8 * usable:
                        skip("memory: BF16 weights alone fill the GPU")
                        continue
                    for mbs in (1, 2) if seq <= 8192 else (1,):
                        if gbs % (mbs * dp):
                            skip(f"batch: gbs {gbs} not a multiple of MBS x DP")
                            continue
                        micro = gbs // (mbs * dp)
                        for vpp, settings in splits:
                            if vpp and micro % pp:
                                skip("batch: interleaving needs microbatches a multiple of PP")
                                continue
                            out.append(
                                Candidate(tp, cp, pp, vpp, ep, mbs, tuple(sorted(settings.items())), 0.0)
                            )
    return out


def _settings(cand: Candidate, model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, base: dict) -> dict:
    """The engine fields of a candidate before recompute and offload are chosen."""
    comm, hierarchy, _ = comm_type_for(model, gpu, cand.tp, cand.cp)
    settings = {
        **base,
        "tp": cand.tp,
        "cp": cand.cp,
        "pp": cand.pp,
        "vpp": cand.vpp,
        "ep": cand.ep,
        "etp": 1,
        "mbs": cand.mbs,
        "gbs": base["gbs"],
        "sequence_parallel": cand.tp > 1,
        "cp_comm_type": comm,
        "hierarchical_cp_sizes": hierarchy,
        **dict(cand.split),
    }
    if settings["dispatcher"].startswith("flex-") and cand.ep == 1:
        settings["dispatcher"] = "alltoall"
    return _vpp_from_layout(settings)


def _vpp_from_layout(settings: dict) -> dict:
    """Leave VPP to the layout string when there is one: Megatron Core derives it from the layout, and
    Megatron-LM refuses an explicit --num-virtual-stages-per-pipeline-rank next to a layout."""
    return {**settings, "vpp": None} if settings.get("pipeline_layout") else settings


@dataclass(frozen=True)
class MemoryForecast:
    """A quick forecast of the first PP rank's memory (the busiest in 1F1B) under each recompute level."""

    static: float  # weights, gradients, optimizer states on the GPU, overhead
    static_offloaded: float  # the same with the whole optimizer state on the CPU
    none: float  # activations without recompute
    selective: float  # with every applicable selective label
    full: float  # with full recompute (layer inputs plus one layer's activations)
    savings: tuple[tuple[str, float], ...] = ()  # per label alone: bytes it frees on the rank needing most


Kind = tuple[str, bool]  # (attention type, MoE?) of a decoder layer: layers of a kind save the same tensors


def _chunk_kinds(model: ModelSpec, split) -> tuple[tuple[tuple[tuple[Kind, int], ...], ...], ...]:
    """Per rank and virtual stage: how many layers of each kind it holds (each MTP depth counts as the kinds of
    the MTP block's layers). Cached per split, which many candidates share."""
    cache = spec_cache(model)
    key = ("chunk_kinds", split)
    if key not in cache:
        index = 0
        per_rank: list[list[tuple]] = [[] for _ in range(split.pp)]
        for v in range(split.vpp):
            for r in range(split.pp):
                stage = split.stages[r][v]
                counts: dict[Kind, int] = {}
                layers = [*range(index, index + stage.decoders), *(model.mtp_block_layers * stage.mtp)]
                for i in layers:
                    k = (model.attention_layer_types[i], model.moe_layers[i])
                    counts[k] = counts.get(k, 0) + 1
                per_rank[r].append(tuple(counts.items()))
                index += stage.decoders
        ranks = tuple(tuple(chunks) for chunks in per_rank)
        cache[key] = ranks
    return cache[key]


def forecast_memory(ctx: Context) -> MemoryForecast:
    """The worst PP rank: per-kind activation inventories times the layers each chunk holds and the in-flight
    microbatches of the schedule, the loss logits, static memory and buffers."""
    from ..engine.step_time import rank_layers
    from ..memory.activations import shard_of
    from ..memory.buffers import buffer_terms
    from ..memory.rank_memory import overhead_gib
    from ..memory.weights import padded_vocab, rank_params, static_terms
    from .pick_recompute import _applicable

    c, m = ctx.cfg, ctx.model
    split = ctx.split.split
    sh = shard_of(ctx)
    order = _applicable(ctx)
    labels = frozenset(order)
    first_of = {}
    for i in range(m.num_layers):
        first_of.setdefault((m.attention_layer_types[i], m.moe_layers[i]), i)
    # per kind: kept bytes with no recompute, every label, layer inputs only, then each label alone; the same
    # for every PP split of the same sizes and knobs, so kept per model for the candidates that share them
    cache = spec_cache(m).setdefault("forecast_kinds", {})
    key = repr([(k, v) for k, v in sorted(c.model_dump().items()) if k not in SPLIT_FIELDS])
    if key not in cache:
        if len(cache) > 4096:
            cache.clear()
        cache[key] = _kind_columns(ctx, sh, order, labels, first_of)
    per_kind, largest_of = cache[key]
    width = 4 + len(order)
    logits = (4 if c.cross_entropy_fusion != "te" else 2) * padded_vocab(ctx) / c.tp * sh.tokens
    kinds = _chunk_kinds(m, split)
    by_rank = rank_layers(split)
    worst = None
    need = -1.0
    savings: tuple = ()
    memo: dict = {}  # chunks holding the same layer kinds hold the same bytes
    for rank in range(c.pp):
        chunks = []  # per virtual stage: bytes of one microbatch, per column of per_kind
        largest = 0.0
        for stage, counts in zip(split.stages[rank], kinds[rank], strict=True):
            heads = (int(stage.loss) + stage.mtp) * logits
            if (counts, heads) not in memo:
                memo[counts, heads] = [
                    sum(n * per_kind[k][j] for k, n in counts) + heads for j in range(width)
                ]
            chunks.append(memo[counts, heads])
            largest = max([largest, *(largest_of[k] for k, _ in counts)])
        in_flight = _in_flight_counts(c.pp, rank, split.vpp, ctx.num_microbatches or c.pp)
        held = [0.0] * width
        for n, ch in zip(in_flight, chunks, strict=True):
            if n:
                for j in range(width):
                    held[j] += n * ch[j]
        if rank not in (0, c.pp - 1) and worst is not None and held[1] <= worst.selective:
            continue  # a middle rank holding no more activations than one already seen
        layers = list(by_rank[rank])
        mtp = sum(st.mtp for st in split.stages[rank])
        terms = static_terms(ctx, rank_params(ctx, layers, mtp, rank == 0, rank == c.pp - 1))
        terms += buffer_terms(ctx, sh, layers, held[0])
        static = sum(t.bytes for t in terms) + overhead_gib(ctx) * GIB
        optimizer = sum(t.bytes for t in terms if "optimizer" in t.name)
        if static + held[0] > need:
            need = static + held[0]
            savings = tuple((label, held[0] - held[3 + j]) for j, label in enumerate(order))
            savings += (("all but moe", held[0] - held[-1]),)
        f = MemoryForecast(static, static - optimizer, held[0], held[1], held[2] + largest)
        worst = f if worst is None else MemoryForecast(*(max(a, b) for a, b in zip(
            (worst.static, worst.static_offloaded, worst.none, worst.selective, worst.full),
            (f.static, f.static_offloaded, f.none, f.selective, f.full), strict=True)))  # fmt: skip
    return MemoryForecast(
        worst.static, worst.static_offloaded, worst.none, worst.selective, worst.full, savings
    )


SPLIT_FIELDS = frozenset(("pp", "vpp", "pipeline_layout", "account_for_embedding_in_pipeline_split",
                          "account_for_loss_in_pipeline_split", "num_layers_in_first_pipeline_stage",
                          "num_layers_in_last_pipeline_stage"))  # fmt: skip


def _kind_columns(ctx: Context, sh, order: list[str], labels: frozenset[str], first_of: dict):
    from ..memory.activations import kept
    from ..memory.hybrid_layers import layer_inventory  # every layer kind, Mamba and DSA included

    per_kind: dict[Kind, list[float]] = {}
    largest_of: dict[Kind, float] = {}
    for k, i in first_of.items():
        inv = layer_inventory(ctx, sh, i)
        per_kind[k] = [kept(inv, frozenset(), frozenset()), kept(inv, labels, frozenset()),
                       sum(x.bytes for x in inv if x.layer_input),
                       *(kept(inv, frozenset((label,)), frozenset()) for label in order),
                       kept(inv, labels - {"moe"}, frozenset())]  # fmt: skip
        largest_of[k] = sum(x.bytes for x in inv)
    return per_kind, largest_of


@lru_cache(maxsize=1024)
def _in_flight_counts(pp: int, rank: int, vpp: int, microbatches: int) -> tuple[int, ...]:
    """Microbatches each chunk holds at the schedule's peak, for chunks of equal size (a forecast)."""
    from ..engine.schedule import peak_in_flight

    _, counts = peak_in_flight(pp, rank, vpp, microbatches, [1.0] * vpp)
    return tuple(counts)


def memory_floor(ctx: Context) -> float:
    """Bytes no plan of this layout can go below: BF16 weights and gradients of the busiest rank, the layer
    inputs full recompute still keeps for every in-flight microbatch, and the fixed overhead."""
    from ..engine.step_time import _params_per_rank
    from ..memory.rank_memory import overhead_gib

    split = ctx.split.split
    c, m = ctx.cfg, ctx.model
    most = max(range(c.pp), key=split.rank_decoders)
    layers = list(range(split.rank_decoders(most)))
    dense, expert = _params_per_rank(ctx, layers)
    tokens = c.mbs * c.seq_len // (c.cp * (c.tp if ctx.sequence_parallel else 1))
    in_flight = min(c.pp, ctx.num_microbatches or 1)
    inputs = 2 * tokens * m.hidden_size * len(layers) * in_flight
    return 4 * (dense + expert) + inputs + overhead_gib(ctx) * GIB


def seconds_per_token(step) -> float:
    return step.step_s / step.tokens_per_step


def budget(gpu: GpuSpec, req: PlanLayoutRequest) -> float:
    """Bytes a plan may use: the usable HBM less the headroom margin."""
    return gpu.usable_hbm_gib * GIB * (1 - req.headroom)


def _bound_config(settings: dict, base: dict) -> TrainingConfig:
    """The configuration a bound is computed on: the request's validated once, with the candidate's values
    (already valid: they come from the enumeration) copied in without validating again, for speed."""
    key = repr(sorted(base.items()))
    template = _TEMPLATES.get(key)
    if template is None:
        if len(_TEMPLATES) > 64:
            _TEMPLATES.clear()
        template = _TEMPLATES.setdefault(key, TrainingConfig(**base))
    return template.model_copy(update={k: v for k, v in settings.items() if k not in base})


_TEMPLATES: dict[str, TrainingConfig] = {}


def layout_floors(
    cands: list[Candidate], model, gpu, req, base, excluded
) -> list[tuple[float, list[Candidate]]]:
    """Candidates grouped by layout (TP, CP, PP, EP, MBS: they differ in VPP and split only), each group with a
    floor of its time per token: no bubble, perfectly even stages, no recompute or offload. Any split of the
    layout is at least that slow, so a group is expanded into its candidates only when the search reaches it."""
    groups: dict[tuple, list[Candidate]] = {}
    for cand in cands:
        groups.setdefault((cand.tp, cand.cp, cand.pp, cand.ep, cand.mbs), []).append(cand)
    out = []
    for members in groups.values():
        for cand in members:
            ctx = Context(
                cfg=_bound_config(_settings(cand, model, gpu, req, base), base), model=model, gpu=gpu
            )
            if ctx.split.split is not None and ctx.num_microbatches is not None:
                st = step_time(ctx, Recompute(), 0.0)
                out.append((st.balanced_s / st.tokens_per_step, members))
                break
        else:
            _skip(excluded, "pipeline: no split of the layers over this PP", len(members))
    return out


def _skip(excluded: dict[str, int], reason: str, n: int = 1) -> None:
    excluded[reason] = excluded.get(reason, 0) + n


def cheap_bounds(cands: list[Candidate], model, gpu, req, base, excluded) -> list[tuple[Candidate, Context]]:
    """Candidates with a split, whole microbatches and room for their weights, each with its time per token
    before recompute and offload (a lower bound of its plan's)."""
    out = []
    usable = budget(gpu, req)
    for cand in cands:
        ctx = Context(cfg=_bound_config(_settings(cand, model, gpu, req, base), base), model=model, gpu=gpu)
        if ctx.split.split is None or ctx.num_microbatches is None:
            _skip(excluded, "pipeline: no split of the layers over this PP")
            continue
        if memory_floor(ctx) > usable:  # cannot fit whatever recompute and offload do
            _skip(excluded, "memory: over the budget even with full recompute and optimizer offload")
            continue
        bound = seconds_per_token(step_time(ctx, Recompute(), 0.0))
        out.append((Candidate(**{**cand.__dict__, "bound_s": bound}), ctx))
    return out


def refined_bound(ctx: Context, req: PlanLayoutRequest) -> float | None:
    """A lower bound of the layout's time per token once the memory forecast is known (None: no fit even with
    full recompute and offload). It stays a lower bound of the plan evaluate() makes, so the search order never
    hides a faster plan: selective recompute is charged the cheapest fractional mix of labels that frees the
    bytes needed (a relaxation of pick_recompute's choice), full recompute the share of layers a block setting must checkpoint to free the need,
    offload the half fraction the planner tries first."""
    usable = budget(ctx.gpu, req)
    f = forecast_memory(ctx)
    recompute, offload, static = Recompute(), 0.0, f.static
    if req.allow_optimizer_offload and f.static + f.full > usable:
        static, offload = f.static_offloaded, 0.5 * (f.static - f.static_offloaded)
    extra = 0.0
    if static + f.none > usable:
        if static + f.selective <= usable:
            extra = _cheapest_mix(ctx, f, static + f.none - usable)
        elif static + f.full > usable:
            return None
        else:
            # block recompute of n layers a chunk frees about n / chunk of what full recompute of all frees
            split = ctx.split.split
            chunk = max(s.decoders for row in split.stages for s in row) or 1
            share = (static + f.none - usable) / max(f.none - f.full, 1.0) * FORECAST_SLACK
            recompute = Recompute("full", frozenset(), min(1.0, max(1 / chunk, share)))
    if recompute == Recompute() and not offload and not extra:
        return 0.0  # nothing to add to the cheap bound
    st = step_time(ctx, recompute, offload)
    return (st.step_s + extra) / st.tokens_per_step


FORECAST_SLACK = 0.95  # a label set counts as freeing enough when it frees 95 % of the forecast need


def _cheapest_mix(ctx: Context, f: MemoryForecast, need: float) -> float:
    """Seconds of recompute per step at least needed to free ``need`` bytes: the cheapest label set whose
    savings, each measured alone and summed (at least what they free together), reach the need with some
    slack for the forecast's error. A lower bound of pick_recompute's choice for the same layout."""
    saved = dict(f.savings)
    joint = saved.pop(
        "all but moe", math.inf
    )  # what the labels other than moe free together (less than the sum)
    labels = [label for label, x in saved.items() if x > 0]
    if not labels:
        return 0.0
    cost = dict(
        step_time(ctx, Recompute.selective([x for x in labels if x != "moe"]), 0.0).recompute_by_label
    )
    if "moe" in labels:
        cost["moe"] = step_time(ctx, Recompute.selective(["moe"]), 0.0).recompute_by_label.get("moe", 0.0)
    best = math.inf
    for n in range(1, len(labels) + 1):
        for combo in itertools.combinations(labels, n):
            frees = sum(saved[x] for x in combo)
            if "moe" not in combo:
                frees = min(frees, joint)
            if frees >= need * FORECAST_SLACK:
                best = min(best, sum(cost.get(x, 0.0) for x in combo))
    return 0.0 if best == math.inf else best


def _applicable_labels(ctx: Context) -> list[str]:
    from .pick_recompute import _applicable

    return _applicable(ctx)
