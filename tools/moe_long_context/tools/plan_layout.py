"""plan_layout: from (model, GPU, GPU count, sequence length, global batch) to ranked, complete plans.

1. Enumerate TP, CP, PP, VPP, EP and MBS that factor the world under MoE parallel folding, with a pipeline
   split Megatron accepts for each (PP, VPP), and CP that the sequence and the attention type allow.
2. Rank the candidates by an optimistic bound (compute only) and evaluate them best-first: every rule
   family of the engine, memory with pick_recompute (selective before full) and optimizer CPU offload
   when nothing else fits, then the step-time model with the recompute it costs.
3. Stop when the next candidate's bound cannot beat the N-th plan found (branch and bound).
Every plan returned passes the engine's rules with no error and fits its GPU's memory.
"""

from __future__ import annotations

import heapq

from ..engine.stated_error import stated_error
from ..engine.step_time import ASSUMPTIONS as PERF_ASSUMPTIONS
from ..errors import InputError
from ..memory.terms import GIB
from ..model.catalog import load_gpu, load_model
from .plan_compare import _compare, _references, _same_plan, as_plan, published_for
from .plan_evaluate import Evaluated, _plan, evaluate
from .plan_models import MAX_EVALUATED, PlanLayoutRequest, PlanLayoutResult
from .plan_search import (
    MAX_TP,
    budget,
    cheap_bounds,
    default_dispatcher,
    default_gbs,
    default_precision,
    enumerate_candidates,
    layout_floors,
    refined_bound,
    seconds_per_token,
)

__all__ = ["PlanLayoutRequest", "PlanLayoutResult", "plan_layout"]


def plan_layout(req: PlanLayoutRequest) -> PlanLayoutResult:
    model = load_model(req.model)
    gpu = load_gpu(req.gpu)
    if req.launcher not in ("bridge", "megatron-lm"):
        raise InputError("launcher", req.launcher, "bridge or megatron-lm")
    precision = req.precision or default_precision(gpu)
    if precision != "bf16" and precision not in gpu.quant_recipes:
        raise InputError("precision", precision, f"one of {[*gpu.quant_recipes, 'bf16']} on {gpu.id}")
    published = published_for(model, gpu, req)
    gbs = req.gbs or (published[0].config["gbs"] if published else default_gbs(req.seq_len))
    source = (
        "the request's" if req.gbs else "the published layout's" if published else "the default 2^23 tokens"
    )
    mtp = model.mtp_num_layers
    base = {
        "model": model.id if model.id != "custom" else req.model,
        "gpu": gpu.id,
        "num_gpus": req.num_gpus,
        "seq_len": req.seq_len,
        "gbs": gbs,
        "precision": precision,
        "dispatcher": req.dispatcher or default_dispatcher(gpu),
        "launcher": req.launcher,
    }
    if req.overhead_gib is not None:
        base["overhead_gib"] = req.overhead_gib
    if req.launcher == "megatron-lm":
        base.update(use_distributed_optimizer=True, moe_grouped_gemm=True)
    excluded: dict[str, int] = {}
    enumerated = enumerate_candidates(model, gpu, req, mtp, gbs, excluded)
    total = len(enumerated) + sum(excluded.values())  # every layout tried, before any exclusion
    floors = layout_floors(enumerated, model, gpu, req, base, excluded)
    references = _references(model, gpu, req, gbs)
    limit = budget(gpu, req)
    # The search must reach every candidate that could beat the published layout, whatever top_n is, so that
    # the published layout's rank does not depend on how many plans are asked for.
    ref_times = [seconds_per_token(e.step) for _, e in references if e is not None and e.peak <= limit]
    # Best-first search over three stages, each a lower bound of the next: a layout's floor (no bubble, even
    # stages), then each of its splits' time before recompute and offload, then the bound its memory forecast
    # implies; only then a candidate is evaluated in full. The search stops as soon as the best remaining bound
    # can neither beat the N-th plan found nor the published layout.
    heap: list = [(floor, i, 0, members) for i, (floor, members) in enumerate(floors)]
    heapq.heapify(heap)
    tie = len(heap)
    found: list[Evaluated] = []
    fastest: dict[tuple, float] = {}  # per layout (TP, CP, PP, EP, MBS): its fastest plan found
    evaluated = 0
    while heap and evaluated < MAX_EVALUATED:
        bound, _, stage, payload = heapq.heappop(heap)
        if bound >= max([_nth_group_time(found, req.top_n), *ref_times]):
            heapq.heappush(heap, (bound, -1, stage, payload))
            break
        if stage == 0:
            for cand, ctx in cheap_bounds(payload, model, gpu, req, base, excluded):
                tie += 1
                heapq.heappush(heap, (max(cand.bound_s, bound), tie, 1, (cand, ctx)))
            continue
        cand, ctx = payload
        layout = (cand.tp, cand.cp, cand.pp, cand.ep, cand.mbs)
        if fastest.get(layout, float("inf")) <= bound:
            _count(excluded, "search: another VPP of the same layout is faster (not evaluated)")
            continue  # it cannot change its layout's place: plans differing only in VPP are one plan
        if stage == 1:
            better = refined_bound(ctx, req)
            if better is not None:
                tie += 1
                heapq.heappush(heap, (max(better, bound), tie, 2, payload))
            else:
                _count(excluded, "memory: forecast over the budget even with full recompute and offload")
            continue
        evaluated += 1
        e = evaluate(cand, model, gpu, req, base)
        if isinstance(e, str):
            _count(excluded, e)
        else:
            found.append(e)
            fastest[layout] = min(fastest.get(layout, float("inf")), seconds_per_token(e.step))
    left = sum(len(p) if stage == 0 else 1 for _, _, stage, p in heap)
    if left:
        why = "bound cannot beat the plans found" if evaluated < MAX_EVALUATED else "stopped at the cap"
        _count(excluded, f"search: {why} (not evaluated)", left)
    asked = {}  # a published layout is a plan too when it fits and has this request's dispatcher and precision
    for layout, ref in references:
        fits = ref is not None and ref.peak <= limit
        asked[layout.id] = fits and all(getattr(ref.cfg, k) == base[k] for k in ("dispatcher", "precision"))
        promoted = as_plan(ref, model, gpu) if asked[layout.id] else None
        if (
            promoted is not None
            and promoted.peak <= limit
            and not any(_same_plan(promoted, e) for e in found)
        ):
            found.append(promoted)
    found.sort(key=lambda e: seconds_per_token(e.step))
    groups = _vpp_groups(found)
    best = groups[0][0] if groups else None
    tie = stated_error("throughput", model.family)  # the calibration's measured spread for this family
    plans = [
        _plan(
            i + 1,
            g[0],
            best,
            g[1:],
            seconds_per_token(g[0].step) <= seconds_per_token(best.step) * (1 + tie),
        )
        for i, g in enumerate(groups[: req.top_n])
    ]
    reason = None if plans else _no_plan_reason(excluded, len(enumerated), gbs, req)
    return PlanLayoutResult(
        valid=bool(plans),
        gbs=gbs,
        headroom=req.headroom,
        no_plan_reason=reason,
        excluded=dict(sorted(excluded.items(), key=lambda kv: -kv[1])),
        plans=plans,
        references=[
            _compare(layout, e, found, _group_rank(e, groups) if asked[layout.id] else None, limit)
            for layout, e in references
        ],
        candidates=total,
        evaluated=evaluated,
        feasible=len(found),
        assumptions=[
            f"Global batch: {gbs} sequences for every plan and the published layout ({source}).",
            f"Candidates: TP a power of two up to min(NVLink domain, {MAX_TP}), CP powers of two the sequence and "
            "attention allow, PP every divisor of the world / (TP x CP) with a split Megatron accepts, VPP from "
            "{1, 2, 3, 4, 6, 8, 12}, EP powers of two dividing the experts, ETP 1, MBS 1 (and 2 up to 8K "
            "tokens), sequence parallelism with TP > 1, cp_comm_type as size_cp chooses.",
            f"Memory: pick_recompute (cheapest set by recompute time) per candidate, then optimizer CPU offload if "
            f"allowed; a plan must fit {gpu.usable_hbm_gib} GiB less {req.headroom:.0%} headroom "
            f"({limit / GIB:.1f} GiB) with the memory model's overhead.",
            "CUDA graphs: TE per-layer graphs of attn, moe_router and moe_preprocess where every rule accepts "
            "them and the plan still fits; the step-time model gives them no credit (launch overheads are not "
            "modelled).",
            f"Ranking: tokens per second; plans within {tie:.0%} (the step-time model's stated error for {model.family}, "
            "measured by the calibration) of the top "
            "plan are ties; plans differing only in VPP (and the split) are one plan with vpp_variants.",
            *PERF_ASSUMPTIONS,
        ],
        findings=[],
    )


def _count(excluded: dict[str, int], reason: str, n: int = 1) -> None:
    excluded[reason] = excluded.get(reason, 0) + n


def _group_key(e: Evaluated) -> tuple:
    """Plans of one layout that differ in VPP (and so in split, and possibly recompute) are one plan."""
    c = e.cfg
    return (c.tp, c.cp, c.pp, c.ep, c.etp, c.mbs)


def _vpp_groups(found: list[Evaluated]) -> list[list[Evaluated]]:
    """Plans that differ only in VPP and the split, fastest first within and across groups."""
    groups: dict[tuple, list[Evaluated]] = {}
    for e in found:  # found is sorted fastest first
        groups.setdefault(_group_key(e), []).append(e)
    return list(groups.values())


def _nth_group_time(found: list[Evaluated], n: int) -> float:
    """Seconds per token of the n-th fastest distinct plan found (VPP variants count once); inf if fewer."""
    best: dict[tuple, float] = {}
    for e in found:
        key, t = _group_key(e), seconds_per_token(e.step)
        best[key] = min(best.get(key, t), t)
    times = sorted(best.values())
    return times[n - 1] if len(times) >= n else float("inf")


def _group_rank(e: Evaluated | None, groups: list[list[Evaluated]]) -> int | None:
    """1 + the distinct plans strictly faster than ``e`` (its own VPP group excluded)."""
    if e is None:
        return None
    t = seconds_per_token(e.step)
    own = _group_key(e)
    return 1 + sum(1 for g in groups if _group_key(g[0]) != own and seconds_per_token(g[0].step) < t)


def _no_plan_reason(excluded: dict[str, int], enumerated: int, gbs: int, req: PlanLayoutRequest) -> str:
    if not excluded and not enumerated:
        return (
            f"no TP x CP x PP and EP x PP factor {req.num_gpus} GPUs for this model at {req.seq_len} tokens "
            f"with GBS {gbs}"
        )
    ranked = sorted(excluded.items(), key=lambda kv: (not kv[0].startswith("rule "), -kv[1]))
    counts = "; ".join(f"{k}: {v}" for k, v in ranked)
    return f"no candidate passes every rule and fits the budget ({counts})"
