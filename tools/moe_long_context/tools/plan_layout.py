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

from ..engine.findings import Finding
from ..engine.step_time import ASSUMPTIONS as PERF_ASSUMPTIONS
from ..errors import InputError
from ..model.catalog import load_gpu, load_model
from .plan_compare import _compare, _references, _same_plan
from .plan_evaluate import Evaluated, _plan, evaluate
from .plan_models import MAX_EVALUATED, PlanLayoutRequest, PlanLayoutResult
from .plan_search import (
    cheap_bounds,
    default_dispatcher,
    default_precision,
    enumerate_candidates,
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
    mtp = model.mtp_num_layers
    base = {
        "model": model.id if model.id != "custom" else req.model,
        "gpu": gpu.id,
        "num_gpus": req.num_gpus,
        "seq_len": req.seq_len,
        "precision": precision,
        "dispatcher": req.dispatcher or default_dispatcher(gpu),
        "launcher": req.launcher,
    }
    if req.overhead_gib is not None:
        base["overhead_gib"] = req.overhead_gib
    if req.launcher == "megatron-lm":
        base.update(use_distributed_optimizer=True, moe_grouped_gemm=True)
    bounded = cheap_bounds(enumerate_candidates(model, gpu, req, mtp), model, gpu, req, base)
    references = _references(model, gpu, req)  # a published layout answers even when no candidate does
    if not bounded and not any(e is not None for _, e in references):
        raise InputError(
            "num_gpus",
            req.num_gpus,
            f"a GPU count that some TP x CP x PP and EP x PP factor for {model.name}",
        )
    # Best-first search: a candidate is first ranked by its cheap bound, then by the bound its memory forecast
    # implies, and only then evaluated in full; bounds only grow, so the search can stop as soon as the best
    # remaining bound cannot beat the N-th plan found.
    heap = [(cand.bound_s, i, False) for i, (cand, _) in enumerate(bounded)]
    heapq.heapify(heap)
    found: list[Evaluated] = []
    evaluated = 0
    while heap and evaluated < MAX_EVALUATED:
        bound, i, refined = heapq.heappop(heap)
        if (
            len(found) >= req.top_n
            and bound >= sorted(seconds_per_token(e.step) for e in found)[req.top_n - 1]
        ):
            break
        cand, ctx = bounded[i]
        if not refined:
            better = refined_bound(ctx, req)
            if better is not None:
                heapq.heappush(heap, (max(better, bound), i, True))
            continue
        evaluated += 1
        e = evaluate(cand, model, gpu, req, base)
        if e is not None:
            found.append(e)
    candidates = bounded
    for _, evaluated_ref in references:
        if evaluated_ref is not None and not any(_same_plan(evaluated_ref, e) for e in found):
            found.append(evaluated_ref)
    found.sort(key=lambda e: seconds_per_token(e.step))
    best = found[0] if found else None
    plans = [_plan(i + 1, e, best) for i, e in enumerate(found[: req.top_n])]
    findings: list[Finding] = []
    return PlanLayoutResult(
        plans=plans,
        references=[_compare(layout, e, found) for layout, e in references],
        candidates=len(candidates),
        evaluated=evaluated,
        feasible=len(found),
        assumptions=[
            "Candidates: TP a power of two up to the NVLink domain (8 at most), CP powers of two the sequence and "
            "attention allow, PP powers of two with a split Megatron accepts, VPP from {1, 2, 3, 4, 6, 8, 12}, EP "
            "powers of two dividing the experts, ETP 1, MBS 1 (and 2 up to 8K tokens), sequence parallelism with "
            "TP > 1, cp_comm_type as size_cp chooses.",
            f"Memory: pick_recompute per candidate, then optimizer CPU offload if allowed; a plan must fit "
            f"{gpu.usable_hbm_gib} GiB with the memory model's overhead.",
            *PERF_ASSUMPTIONS,
        ],
        findings=findings,
    )
