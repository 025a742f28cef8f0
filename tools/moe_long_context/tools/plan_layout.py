"""plan_layout: from (model, GPU, GPU count, sequence length, global batch) to ranked, complete plans.

1. Enumerate TP, CP, PP, VPP, EP and MBS that factor the world under MoE parallel folding, with a pipeline
   split Megatron accepts for each (PP, VPP), and CP that the sequence and the attention type allow.
2. Rank the candidates by lower bounds of their plans (a layout's floor, a split's time before recompute, then
   the recompute and offload its memory bound forces: plan_bounds.py) and evaluate them best-first: every
   rule family of the engine, memory with pick_recompute (selective before full) and optimizer CPU offload
   when nothing else fits, then the step-time model with the recompute it costs.
3. Stop when the best bound left cannot beat the N-th plan found nor the published layout (branch and
   bound): the plans are then the best of the whole space within the model (``optimal``).
Every plan returned passes the engine's rules with no error and fits its GPU's memory.
"""

from __future__ import annotations

import heapq
from functools import partial
from typing import Any

from ..dialects.overrides import architecture_flags, drop_flags, unwritten_features
from ..engine.config import TrainingConfig, lora_config
from ..engine.rules.upstream import checked, coverage
from ..engine.stated_error import stated_error
from ..engine.step_time import ASSUMPTIONS as PERF_ASSUMPTIONS
from ..errors import InputError
from ..memory.terms import GIB
from ..model.catalog import load_gpu, load_model
from ..model.lora import LORA_DEFAULT_TARGETS
from ..model.params import model_params
from ..model.specs import GpuSpec
from .plan_compare import _compare, _references, _same_plan, as_plan, published_for
from .plan_evaluate import Evaluated, _plan, evaluate, surely_fits
from .plan_models import MAX_EVALUATED, PlanLayoutRequest, PlanLayoutResult
from .plan_search import (
    MAX_TP,
    WEIGHTS_FILL,
    budget,
    candidate_bound,
    cheap_bounds,
    default_dispatcher,
    default_gbs,
    default_precision,
    enumerate_candidates,
    layout_fits_nowhere,
    layout_floors,
    required_settings,
    seconds_per_token,
)

__all__ = ["PlanLayoutRequest", "PlanLayoutResult", "plan_layout"]


def search_inputs(req: PlanLayoutRequest):
    """(model, GPU, the engine fields every candidate shares, GBS, where the GBS comes from): the request
    resolved, its global batch chosen (the request's, the published layout's, else 2^23 tokens)."""
    model = load_model(req.model)
    gpu = load_gpu(req.gpu)
    if req.launcher not in ("bridge", "megatron-lm"):
        raise InputError("launcher", req.launcher, "bridge or megatron-lm")
    precision = req.precision or default_precision(gpu)
    if precision != "bf16" and precision not in gpu.quant_recipes:
        raise InputError("precision", precision, f"one of {[*gpu.quant_recipes, 'bf16']} on {gpu.id}")
    dispatcher = req.dispatcher or default_dispatcher(gpu)
    if dispatcher.startswith("flex-") and dispatcher.removeprefix("flex-") not in gpu.flex_backends:
        allowed = ["alltoall", "allgather", *(f"flex-{b}" for b in gpu.flex_backends)]
        raise InputError(
            "dispatcher", dispatcher, f"one of {allowed} on {gpu.id} (Bridge's flex backend check)"
        )
    published = published_for(model, gpu, req)
    gbs = req.gbs or (published[0].config["gbs"] if published else default_gbs(req.seq_len))
    source = (
        "the request's" if req.gbs else "the published layout's" if published else "the default 2^23 tokens"
    )
    base = {
        "model": model.id if model.id != "custom" else req.model,
        "gpu": gpu.id,
        "num_gpus": req.num_gpus,
        "seq_len": req.seq_len,
        "gbs": gbs,
        "precision": precision,
        "dispatcher": dispatcher,
        "launcher": req.launcher,
    }
    if req.overhead_gib is not None:
        base["overhead_gib"] = req.overhead_gib
    base.update(required_settings(model))
    base.update(_lora(req))
    if req.launcher == "megatron-lm":
        base.update(use_distributed_optimizer=True, moe_grouped_gemm=True)
    return model, gpu, base, gbs, source


def plan_layout(req: PlanLayoutRequest) -> PlanLayoutResult:
    result = _plan_layout(req)
    return result.model_copy(update={"not_checked": [*req.lora_not_checked(), *result.not_checked]})


def _plan_layout(req: PlanLayoutRequest) -> PlanLayoutResult:
    model, gpu, base, gbs, source = search_inputs(req)
    mtp = model.mtp_num_layers
    excluded: dict[str, int] = {}
    enumerated = enumerate_candidates(model, gpu, req, mtp, gbs, excluded)
    total = len(enumerated) + sum(excluded.values())  # every layout tried, before any exclusion
    floors = layout_floors(enumerated, model, gpu, req, base, excluded)
    references = _references(model, gpu, req, gbs)
    limit = budget(gpu, req)
    # The search must reach every candidate that could beat the published layout, whatever top_n is, so that
    # the published layout's rank does not depend on how many plans are asked for.
    ref_times = [seconds_per_token(e.step) for _, e in references if e is not None and e.peak <= limit]
    # Best-first search over four stages, each a lower bound of the next and of the plan evaluate() makes: a
    # layout's floor (no bubble, even stages), each of its splits' time before recompute and offload, the bound
    # its memory adds, then that bound once the offload levels evaluate cannot reach are known (plan_bounds.py);
    # only then a candidate is evaluated in full. The search ends when the best bound left can neither beat the
    # N-th plan found nor the published layout: the plans are then the best the model has.
    heap: list = [(floor, i, 0, (members, known)) for i, (floor, members, known) in enumerate(floors)]
    heapq.heapify(heap)
    tie = len(heap)
    found: list[Evaluated] = []
    fastest: dict[tuple, float] = {}  # per layout (TP, CP, PP, EP, MBS): its fastest plan found
    evaluated = 0
    pickers: dict = {}  # pick_recompute per (candidate, offload level): surely_fits and evaluate share it
    while heap and evaluated < MAX_EVALUATED:
        bound, _, stage, payload = heapq.heappop(heap)
        threshold = max([_nth_group_time(found, req.top_n), *ref_times])  # it only falls as plans are found
        if bound >= threshold:
            heapq.heappush(heap, (bound, -1, stage, payload))
            break
        if stage == 0:
            members, known = payload
            if layout_fits_nowhere(known[1], req):
                _count(
                    excluded,
                    "memory: over the budget even with full recompute and optimizer offload",
                    len(members),
                )
                continue
            for cand, ctx, floor in cheap_bounds(members, model, gpu, req, base, excluded, known):
                tie += 1
                heapq.heappush(heap, (max(cand.bound_s, bound), tie, 1, (cand, ctx, floor)))
            continue
        cand, ctx, cb = payload
        layout = (cand.tp, cand.cp, cand.pp, cand.ep, cand.mbs)
        if fastest.get(layout, float("inf")) <= bound:
            _count(excluded, "search: another VPP of the same layout is faster (not evaluated)")
            continue  # it cannot change its layout's place: plans differing only in VPP are one plan
        if stage in (1, 2):
            if stage == 1:
                cb = candidate_bound(ctx, req, cand.bound_s, cb)  # cb holds what cheap_bounds knows
                better = cb.bound(threshold)
            else:
                better = cb.refine(partial(_surely_fits, cand, model, gpu, req, base, cb, pickers), threshold)
            if better == float("inf"):
                _count(excluded, "memory: over the budget even with full recompute and optimizer offload")
                continue
            if stage == 1 or better > bound:
                tie += 1
                heapq.heappush(heap, (max(better, bound), tie, stage + 1, (cand, ctx, cb)))
                continue
        evaluated += 1
        e = evaluate(cand, model, gpu, req, base, cb.impossible_levels(), pickers)
        pickers = {k: v for k, v in pickers.items() if k[0] is not cand}  # its trials are done with
        if isinstance(e, str):
            _count(excluded, e)
        else:
            found.append(e)
            fastest[layout] = min(fastest.get(layout, float("inf")), seconds_per_token(e.step))
    left = sum(len(p[0]) if stage == 0 else 1 for _, _, stage, p in heap)
    optimal = evaluated < MAX_EVALUATED or not heap
    if left:
        why = "bound cannot beat the plans found" if optimal else "stopped at the safety cap"
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
    reason = None if plans else _no_plan_reason(excluded, len(enumerated), gbs, req, gpu, model)
    return PlanLayoutResult(
        valid=bool(plans),
        gbs=gbs,
        headroom=req.headroom,
        no_plan_reason=reason,
        excluded=dict(sorted(excluded.items(), key=lambda kv: -kv[1])),
        plans=plans,
        megatron_model_args=model_args(model, mtp, req.seq_len),
        references=[
            _compare(layout, e, found, _group_rank(e, groups) if asked[layout.id] else None, limit)
            for layout, e in references
        ],
        candidates=total,
        evaluated=evaluated,
        optimal=optimal,
        pruned_by_bound=left if optimal else 0,
        feasible=len(found),
        assumptions=[
            f"Global batch: {gbs} sequences for every plan and the published layout ({source}).",
            *_unwritten(model),
            *_lora_assumption(base),
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
        checked=checked(),
        not_checked=_not_checked(req, model, [g[0] for g in groups[: req.top_n]]),
    )


def _not_checked(req: PlanLayoutRequest, model: Any, plans: list[Evaluated]) -> list:
    """The not-modelled upstream checks the request or any returned plan reaches, each once: a plan's own
    settings (its recompute, offload, data format) reach checks the request alone does not."""
    out: dict[str, Any] = {}
    for cfg in (_inputs(req, model), *(e.cfg for e in plans)):
        for item in coverage(cfg, model)["not_checked"]:
            out.setdefault(item.model_dump_json(), item)
    return list(out.values())


def _surely_fits(cand, model, gpu, req, base, cb, pickers, level: int) -> bool:
    return surely_fits(cand, model, gpu, req, base, cb.fractions[level], pickers)


def _lora_assumption(base: dict[str, Any]) -> list[str]:
    if base.get("peft") != "lora":
        return []
    targets = ", ".join(base.get("lora_target_modules") or LORA_DEFAULT_TARGETS)
    return [
        f"LoRA rank {base['lora_dim']} on {targets} in every plan (Bridge's peft; Megatron-LM has no LoRA): frozen "
        "BF16 base weights without gradients or optimizer states. Published layouts are full-training runs and "
        "are not compared."
    ]


def model_args(model: Any, mtp: int, seq_len: int) -> list[str]:
    """The model's Megatron-LM flags less what each plan writes itself (its MTP depth, RoPE fusion)."""
    return drop_flags(architecture_flags(model, mtp, seq_len), {"--mtp-num-layers", "--mtp-use-repeated-layer",
                                                                  "--no-rope-fusion"})  # fmt: skip


def _unwritten(model: Any) -> list[str]:
    left = unwritten_features(model)
    return [f"megatron_model_args do not write {', '.join(left)}: take those flags from the model's own Megatron-LM "
            "launch."] if left else []  # fmt: skip


def _lora(req: PlanLayoutRequest) -> dict[str, Any]:
    """The request's LoRA as TrainingConfig's fields (none for full training)."""
    return lora_config({"lora_dim": req.lora_dim, "lora_target_modules": req.lora_target_modules})


def _inputs(req: PlanLayoutRequest, model: Any) -> TrainingConfig:
    """The request's own settings as a configuration (what not_checked is about: the plans are the engine's)."""
    given = {k: getattr(req, k) for k in ("precision", "dispatcher", "gbs") if getattr(req, k) is not None}
    return TrainingConfig(model=model.id if model.id != "custom" else req.model, num_gpus=req.num_gpus,
                          seq_len=req.seq_len, launcher=req.launcher, **given, **_lora(req))  # fmt: skip


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


def _no_plan_reason(
    excluded: dict[str, int], enumerated: int, gbs: int, req: PlanLayoutRequest, gpu: GpuSpec, model
) -> str:
    if not excluded and not enumerated:
        return (
            f"no TP x CP x PP and EP x PP factor {req.num_gpus} GPUs for this model at {req.seq_len} tokens "
            f"with GBS {gbs}"
        )
    ranked = sorted(excluded.items(), key=lambda kv: (not kv[0].startswith("rule "), -kv[1]))
    counts = "; ".join(f"{k}: {v}" for k, v in ranked)
    reason = f"no candidate passes every rule and fits the budget ({counts})"
    defaulted_fp8 = req.precision is None and default_precision(gpu) != "bf16"
    memory = [k for k in excluded if k.startswith("memory")]
    weights_only = bool(memory) and all(k == WEIGHTS_FILL for k in memory)
    if defaulted_fp8 and memory and not weights_only:  # BF16 drops the FP8 weight cache, not the BF16 weights
        reason += (
            "; the precision was left to the GPU's FP8 recipe, whose quantized weight copies sit beside the BF16 "
            "weights (the FP8 weight cache): set precision bf16 to plan without them"
        )
    if weights_only:
        floor = -(-2 * model_params(model).total // int(0.8 * gpu.usable_hbm_gib * GIB))
        reason += (
            f"; no split of the {model_params(model).total / 1e9:.0f}B BF16 weights leaves room on {req.num_gpus} "
            f"{gpu.id}: the weights alone need at least {floor} GPUs, before gradients, optimizer states and "
            "activations (more GPUs, or a GPU with more memory)"
        )
    return reason
