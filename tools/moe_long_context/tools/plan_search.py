"""Candidate search for plan_layout: layouts that factor the world, their pipeline splits, and the first two
bounds of the best-first search (a layout's floor over any split, then each split's time before recompute);
plan_bounds.py adds memory to a candidate's bound before it is evaluated in full."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from ..engine.config import TrainingConfig
from ..engine.context import Context
from ..engine.pipeline import propose_splits
from ..engine.rules.cp import finetuning, shard_target
from ..engine.rules.providers import max_tp
from ..engine.step_time import Recompute, step_time
from ..memory.terms import GIB
from ..model.params import model_params, spec_cache
from ..model.specs import GpuSpec, ModelSpec
from .plan_bounds import OFFLOAD_LEVELS, TIE, CandidateBound, cheap_floor, layout_cannot_fit, settings_key
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


WEIGHTS_FILL = "memory: BF16 weights alone fill the GPU"


def required_settings(model: ModelSpec) -> dict:
    """Settings every plan and published layout of this model must carry: MCore asserts DSA runs without RoPE
    fusion (transformer_config.py:2837-2838), which Megatron-LM turns on (DSA_ROPE_FUSION)."""
    return {"apply_rope_fusion": False} if model.has_dsa else {}


def default_gbs(seq_len: int) -> int:
    """The largest power of two of sequences within 2^23 tokens: a batch such as 41 (200K tokens) is prime and
    leaves no data-parallel size above 1 and no interleaving, so the default must not be one."""
    return 1 << max(0, (DEFAULT_TOKENS_PER_STEP // seq_len).bit_length() - 1)


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
                        skip(WEIGHTS_FILL)
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
    comms = spec_cache(model).setdefault("plan_comm_types", {})
    key = (gpu.id, cand.tp, cand.cp)
    if key not in comms:
        comms[key] = comm_type_for(model, gpu, cand.tp, cand.cp)
    comm, hierarchy, _ = comms[key]
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
    if cand.cp > 1 and finetuning(
        settings["launcher"], settings.get("peft", "none"), settings.get("packed_sequences")
    ):
        settings["calculate_per_token_loss"] = True  # Bridge asserts it (FINETUNE_CP_PER_TOKEN_LOSS)
    return _vpp_from_layout(settings)


def _vpp_from_layout(settings: dict) -> dict:
    """Leave VPP to the layout string when there is one: Megatron Core derives it from the layout, and
    Megatron-LM refuses an explicit --num-virtual-stages-per-pipeline-rank next to a layout."""
    return {**settings, "vpp": None} if settings.get("pipeline_layout") else settings


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
) -> list[tuple[float, list[Candidate], Context]]:
    """Candidates grouped by layout (TP, CP, PP, EP, MBS: they differ in VPP and split only), each group with a
    floor of its time per token (no bubble, perfectly even stages, no recompute or offload) and one member's
    context. Any split of the layout is at least that slow, so a group is expanded into its candidates only when
    the search reaches it."""
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
                out.append((st.balanced_s / st.tokens_per_step * (1 - TIE), members, (cand, ctx, st)))
                break
        else:
            _skip(excluded, "pipeline: no split of the layers over this PP", len(members))
    return out


def _skip(excluded: dict[str, int], reason: str, n: int = 1) -> None:
    excluded[reason] = excluded.get(reason, 0) + n


def cheap_bounds(
    cands: list[Candidate], model, gpu, req, base, excluded, known: tuple = (None, None, None)
) -> list[tuple[Candidate, Context, Any]]:
    """Candidates with a split and whole microbatches, each with the seconds per token no plan of it goes
    below and its step time before recompute and offload (plan_bounds.cheap_floor); ``known`` is a member's
    (candidate, context, step time) layout_floors already has."""
    out = []
    for cand in cands:
        settings = _settings(cand, model, gpu, req, base)
        if cand == known[0]:
            ctx = known[1]
        else:
            ctx = Context(cfg=_bound_config(settings, base), model=model, gpu=gpu)
        if ctx.split.split is None or ctx.num_microbatches is None:
            _skip(excluded, "pipeline: no split of the layers over this PP")
            continue
        floor, none = cheap_floor(ctx, known[2] if cand == known[0] else None)
        out.append((Candidate(**{**cand.__dict__, "bound_s": floor}), ctx, (none, settings_key(settings))))
    return out


def offload_contexts(ctx: Context, req: PlanLayoutRequest) -> list[Context]:
    """The candidate with each optimizer-offload level evaluate may try, as evaluate sets it."""
    if not req.allow_optimizer_offload:
        return []
    return [
        Context(cfg=ctx.cfg.model_copy(update=offload_settings(f)), model=ctx.model, gpu=ctx.gpu)
        for f in OFFLOAD_LEVELS
    ]


def offload_context(ctx: Context, fraction: float) -> Context:
    """The candidate with this optimizer-offload fraction, as evaluate sets it."""
    return Context(cfg=ctx.cfg.model_copy(update=offload_settings(fraction)), model=ctx.model, gpu=ctx.gpu)


def offload_settings(fraction: float) -> dict:
    return {"optimizer_cpu_offload_fraction": fraction, "use_precision_aware_optimizer": True}


def layout_fits_nowhere(ctx: Context, req: PlanLayoutRequest) -> bool:
    """Whether no split of this candidate's layout can fit the budget (plan_bounds.layout_cannot_fit)."""
    return layout_cannot_fit(ctx, budget(ctx.gpu, req), offload_contexts(ctx, req))


def candidate_bound(ctx: Context, req: PlanLayoutRequest, floor: float, known: tuple) -> CandidateBound:
    """Bounds of a candidate's plan: its fastest possible time and the offload levels where it could fit
    (``known``: what cheap_bounds found, its step time before recompute and its settings key)."""
    from .pick_recompute import _applicable

    none, key = known
    labels = tuple(_applicable(ctx))
    offload = partial(offload_context, ctx) if req.allow_optimizer_offload else None
    return CandidateBound(ctx, labels, budget(ctx.gpu, req), offload, (floor, none), key)
