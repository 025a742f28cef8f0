"""Candidate search for plan_layout: layouts that factor the world, their pipeline splits, and the bounds that
order a best-first search (compute-only step time, then a memory forecast that implies recompute)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..engine.config import TrainingConfig
from ..engine.context import Context
from ..engine.pipeline import propose_splits
from ..engine.rules.cp import shard_target
from ..engine.step_time import step_time
from ..memory.terms import GIB
from ..model.params import attention_params, mlp_params, model_params, spec_cache
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


def _tp_options(model: ModelSpec, gpu: GpuSpec) -> list[int]:
    out = []
    for tp in powers_of_two(min(8, gpu.nvlink_domain)):
        g = model.num_query_groups
        if model.num_attention_heads % tp == 0 and (g % tp == 0 or tp % g == 0):
            out.append(tp)
    return out


def _split_options(model: ModelSpec, pp: int, mtp: int, cache: dict) -> list[tuple[int | None, dict]]:
    """(VPP, split settings) pairs that split the layers over PP (VPP 1, 2, 4, ...)."""
    if pp == 1:
        return [(None, {})]
    key = (pp, mtp)
    if key not in cache:
        options = []
        per_rank = model.num_layers // pp
        for vpp in [None, *(v for v in (2, 3, 4, 6, 8, 12) if v <= per_rank)]:
            proposals = propose_splits(model.num_layers, pp, vpp, mtp, limit=1)
            if proposals:
                options.append((vpp, dict(proposals[0].settings)))
        cache[key] = options
    return cache[key]


def enumerate_candidates(model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, mtp: int) -> list[Candidate]:
    """Layouts that factor the world, split the layers, suit the sequence, and could hold their weights."""
    world, seq = req.num_gpus, req.seq_len
    split_cache: dict = {}
    experts = [e for e in powers_of_two(min(model.num_experts, world)) if model.num_experts % e == 0]
    totals = model_params(model)
    dense_params = totals.total - totals.experts + totals.mtp
    usable = gpu.usable_hbm_gib * GIB
    target = shard_target(gpu)
    out: list[Candidate] = []
    for tp in _tp_options(model, gpu):
        for cp in powers_of_two(world // tp):
            shard = seq // (tp * cp)
            if cp > 1 and not target // 8 <= shard <= target * 4:
                continue  # far from the shard target: communication-bound or activation-bound
            if _constraint_problems(model, seq, tp, cp, tp > 1, False, world):
                continue
            for pp in (p for p in powers_of_two(world // (tp * cp)) if p <= max(1, model.num_layers // 2)):
                if world % (tp * cp * pp):
                    continue
                splits = _split_options(model, pp, mtp, split_cache)
                for ep in experts:
                    if world % (ep * pp) or ep * pp > world:
                        continue
                    # BF16 weights alone (a lower bound of any plan's memory) must leave room
                    if 2 * (dense_params / (tp * pp) + totals.experts / (ep * pp)) > 0.8 * usable:
                        continue
                    for mbs in (1, 2) if seq <= 8192 else (1,):
                        for vpp, settings in splits:
                            out.append(
                                Candidate(tp, cp, pp, vpp, ep, mbs, tuple(sorted(settings.items())), 0.0)
                            )
    return out


def _settings(cand: Candidate, model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, base: dict) -> dict:
    """The engine fields of a candidate before recompute and offload are chosen."""
    dp = req.num_gpus // (cand.tp * cand.cp * cand.pp)
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
        "gbs": _gbs(req, dp, cand.mbs, cand.pp, cand.vpp),
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


Kind = tuple[str, bool]  # (attention type, MoE?) of a decoder layer: layers of a kind save the same tensors


def _chunk_kinds(model: ModelSpec, split) -> tuple[tuple[tuple[tuple[Kind, int], ...], ...], ...]:
    """Per rank and virtual stage: how many layers of each kind it holds (MTP layers count as the last
    layer's kind). Cached per split, which many candidates share."""
    cache = spec_cache(model)
    key = ("chunk_kinds", split)
    if key not in cache:
        index = 0
        per_rank: list[list[tuple]] = [[] for _ in range(split.pp)]
        for v in range(split.vpp):
            for r in range(split.pp):
                stage = split.stages[r][v]
                counts: dict[Kind, int] = {}
                layers = [*range(index, index + stage.decoders), *([model.num_layers - 1] * stage.mtp)]
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
    from ..memory.activations import kept, shard_of
    from ..memory.buffers import buffer_terms
    from ..memory.hybrid_layers import layer_inventory
    from ..memory.rank_memory import overhead_gib
    from ..memory.weights import padded_vocab, rank_params, static_terms
    from .pick_recompute import _applicable

    c, m = ctx.cfg, ctx.model
    split = ctx.split.split
    sh = shard_of(ctx)
    labels = frozenset(_applicable(ctx))
    first_of = {}
    for i in range(m.num_layers):
        first_of.setdefault((m.attention_layer_types[i], m.moe_layers[i]), i)
    per_kind: dict[Kind, tuple[float, float, float, float]] = {}
    for k, i in first_of.items():
        inv = layer_inventory(ctx, sh, i)
        per_kind[k] = (kept(inv, frozenset(), frozenset()), kept(inv, labels, frozenset()),
                       sum(x.bytes for x in inv if x.layer_input), sum(x.bytes for x in inv))  # fmt: skip
    logits = (4 if c.cross_entropy_fusion != "te" else 2) * padded_vocab(ctx) / c.tp * sh.tokens
    kinds = _chunk_kinds(m, split)
    by_rank = rank_layers(split)
    worst = None
    for rank in range(c.pp):
        chunks = []  # per virtual stage: (none, selective, inputs) bytes of one microbatch
        largest = 0.0
        for stage, counts in zip(split.stages[rank], kinds[rank], strict=True):
            heads = (int(stage.loss) + stage.mtp) * logits
            chunks.append([sum(n * per_kind[k][j] for k, n in counts) + heads for j in range(3)])
            largest = max([largest, *(per_kind[k][3] for k, _ in counts)])
        in_flight = _in_flight_counts(c.pp, rank, split.vpp, ctx.num_microbatches or c.pp)
        held = [sum(n * ch[j] for n, ch in zip(in_flight, chunks, strict=True)) for j in range(3)]
        if rank not in (0, c.pp - 1) and worst is not None and held[1] <= worst.selective:
            continue  # a middle rank holding no more activations than one already seen
        layers = list(by_rank[rank])
        mtp = sum(st.mtp for st in split.stages[rank])
        terms = static_terms(ctx, rank_params(ctx, layers, mtp, rank == 0, rank == c.pp - 1))
        terms += buffer_terms(ctx, sh, layers, held[0])
        static = sum(t.bytes for t in terms) + overhead_gib(ctx) * GIB
        optimizer = sum(t.bytes for t in terms if "optimizer" in t.name)
        f = MemoryForecast(static, static - optimizer, held[0], held[1], held[2] + largest)
        worst = f if worst is None else MemoryForecast(*(max(a, b) for a, b in zip(
            (worst.static, worst.static_offloaded, worst.none, worst.selective, worst.full),
            (f.static, f.static_offloaded, f.none, f.selective, f.full), strict=True)))  # fmt: skip
    return worst


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


def cheap_bounds(cands: list[Candidate], model, gpu, req, base) -> list[tuple[Candidate, Context]]:
    """Candidates with a split, whole microbatches and room for their weights, each with its time per token
    before recompute and offload (a lower bound of its plan's)."""
    out = []
    usable = gpu.usable_hbm_gib * GIB
    for cand in cands:
        ctx = Context(cfg=TrainingConfig(**_settings(cand, model, gpu, req, base)), model=model, gpu=gpu)
        if ctx.split.split is None or ctx.num_microbatches is None:
            continue
        if memory_floor(ctx) > usable:
            continue  # cannot fit whatever recompute and offload do
        bound = seconds_per_token(step_time(ctx))
        out.append((Candidate(**{**cand.__dict__, "bound_s": bound}), ctx))
    return out


def refined_bound(ctx: Context, req: PlanLayoutRequest) -> float | None:
    """Time per token with the recompute and offload the memory forecast says the layout needs (None: no fit).
    Never below the cheap bound: recompute and offload only add time."""
    usable = ctx.gpu.usable_hbm_gib * GIB
    f = forecast_memory(ctx)
    fraction, offload, static = 0.0, 0.0, f.static
    if req.allow_optimizer_offload and f.static + f.full > usable:
        static, offload = f.static_offloaded, f.static - f.static_offloaded
    if static + f.none > usable:
        if static + f.selective <= usable:
            fraction = recompute_fraction_of(ctx, _applicable_labels(ctx))
        elif static + f.full <= usable:
            fraction = 1.0
        else:
            return None
    return seconds_per_token(step_time(ctx, fraction, offload))


# --------------------------------------------------------------------------- evaluation


def recompute_fraction(ctx: Context) -> float:
    """Share of the decoder layers' forward compute replayed in backward by the recompute setting."""
    c = ctx.cfg
    if c.recompute_granularity is None:
        return 0.0
    if c.recompute_granularity == "full":
        return 1.0
    return recompute_fraction_of(ctx, set(ctx.recompute_modules))


def _applicable_labels(ctx: Context) -> set[str]:
    from .pick_recompute import _applicable

    return set(_applicable(ctx))


def recompute_fraction_of(ctx: Context, labels: set[str]) -> float:
    """Share of the forward GEMM work the given selective labels replay."""
    m = ctx.model
    total = replay = 0.0
    for i in range(m.num_layers):
        attn, _ = attention_params(m, m.attention_layer_types[i])
        shared, _, active, _ = mlp_params(m, m.moe_layers[i], m.attention_layer_types[i])
        layer = attn + shared + active
        total += layer
        if "mla_up_proj" in labels and m.is_mla:
            n = m.num_attention_heads
            replay += (m.q_lora_rank or 0) * n * (m.head_dim + (m.qk_pos_emb_head_dim or 0)) + (
                m.kv_lora_rank or 0
            ) * n * (m.head_dim + (m.v_head_dim or 0))
        if "mlp" in labels and not m.moe_layers[i]:
            replay += shared
        if "shared_experts" in labels and m.moe_layers[i]:
            replay += shared
        if "moe" in labels and m.moe_layers[i]:
            replay += active + shared
        replay += 0.005 * layer * len(labels & {"layernorm", "moe_act", "gdn_norm_out"})
    return min(1.0, replay / total) if total else 0.0


def _gbs(req: PlanLayoutRequest, dp: int, mbs: int, pp: int, vpp: int | None) -> int:
    if req.gbs is not None:
        return req.gbs
    return mbs * dp * 8 * pp
