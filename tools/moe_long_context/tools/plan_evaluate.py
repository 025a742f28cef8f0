"""Full evaluation of one plan_layout candidate: every rule, memory with pick_recompute and offload, the step time
with the recompute it costs, and the Plan that reports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..dialects.overrides import bridge_override_list, bridge_python_snippet, megatron_args_for
from ..engine.config import TrainingConfig
from ..engine.context import Context
from ..engine.findings import Finding, errors, has_errors, sort_findings
from ..engine.rules import run
from ..engine.step_time import step_time
from ..memory.rank_memory import memory_model
from ..memory.terms import GIB
from ..model.specs import GpuSpec, ModelSpec
from .estimate_memory import breakdown
from .pick_recompute import CLEARED, Picker
from .plan_bounds import OFFLOAD_LEVELS
from .plan_models import Plan, PlanLayoutRequest, PlanMemory, PlanThroughput
from .plan_search import Candidate, _settings, offload_settings
from .step_findings import dominant_term_findings
from .step_mamba_split import mamba_split_findings


@dataclass
class Evaluated:
    cfg: TrainingConfig
    ctx: Context
    peak: float
    step: Any
    findings: list[Finding]
    notes: list[str]


GRAPHS = {
    "cuda_graph_impl": "transformer_engine",
    "cuda_graph_modules": ["attn", "moe_router", "moe_preprocess"],
}


def level_context(
    cand: Candidate, model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, base: dict, fraction: float
) -> Context:
    """The candidate as evaluate configures it at one optimizer-offload level (0: none)."""
    settings = _settings(cand, model, gpu, req, base)
    if fraction:
        settings = {**settings, **offload_settings(fraction)}
    return Context(cfg=TrainingConfig(**settings), model=model, gpu=gpu)


def evaluate(
    cand: Candidate,
    model: ModelSpec,
    gpu: GpuSpec,
    req: PlanLayoutRequest,
    base: dict,
    impossible: frozenset[float] = frozenset(),
    pickers: dict | None = None,
) -> Evaluated | str:
    """The plan a candidate makes (cheapest recompute that fits the budget, offload if needed, CUDA graphs if
    accepted and they still fit), or why it makes none. ``impossible`` names offload fractions (0 for none) at
    which the memory bound proved that nothing fits: pick_recompute is not run there, which changes nothing.
    ``pickers`` keeps each level's pick_recompute, and the trials it made, for the request (see level_picker)."""
    pickers = {} if pickers is None else pickers
    ctx = level_context(cand, model, gpu, req, base, 0.0)
    found = errors(run(ctx))
    if found:
        return f"rule {found[0].code}"
    notes: list[str] = []
    picker = best = None
    if 0.0 not in impossible:
        picker = level_picker(cand, model, gpu, req, base, 0.0, pickers)
        best = picker.pick()
    if (picker is None or not picker.fits(best)) and req.allow_optimizer_offload:
        for fraction in OFFLOAD_LEVELS:
            if fraction in impossible:
                continue
            off_picker = level_picker(cand, model, gpu, req, base, fraction, pickers)
            trial = off_picker.pick()
            if off_picker.fits(trial):
                picker, best = off_picker, trial
                notes.append("recompute alone does not fit: optimizer CPU offload makes room")
                break
    if picker is None or not picker.fits(best):
        return "memory: over the budget even with full recompute and optimizer offload"
    graphs = _with_graphs(picker, best)
    if graphs is not None:
        best = graphs
        notes.append("CUDA graphs (TE: attn, moe_router, moe_preprocess) are accepted and still fit")
    found = run(best.ctx)
    if has_errors(found):
        return f"rule {errors(found)[0].code}"
    return Evaluated(best.cfg, best.ctx, best.peak, step_time(best.ctx), found, notes)


def level_picker(cand: Candidate, model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, base: dict,
                 fraction: float, pickers: dict) -> Picker:  # fmt: skip
    """pick_recompute for the candidate at one offload level, made once per request (``pickers``): the trials
    surely_fits makes are the ones evaluate would make first."""
    key = (cand, fraction)
    if key not in pickers:
        pickers[key] = Picker(
            level_context(cand, model, gpu, req, base, fraction), req.headroom, report=False
        )
    return pickers[key]


def surely_fits(cand: Candidate, model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, base: dict,
                fraction: float, pickers: dict) -> bool:  # fmt: skip
    """Whether pick_recompute surely returns a plan that fits at this offload level: no recompute fits, or full
    uniform recompute does (pick_recompute then ends with it or with a cheaper setting that fits)."""
    picker = level_picker(cand, model, gpu, req, base, fraction, pickers)
    return picker.fits(picker.trial(dict(CLEARED))) or picker.fits(picker.full_trial("uniform", 1))


def _with_graphs(picker: Picker, best):
    """Per-layer TE CUDA graphs of the dropless-MoE scopes, when every rule accepts them and the plan still fits.
    Not with full recompute (it needs full-iteration graphs) nor with layernorm recompute (Megatron silently
    drops the pre-MLP norm recompute under a moe_router graph with these dispatchers)."""
    c = best.cfg
    if c.recompute_granularity == "full" or "layernorm" in (c.recompute_modules or []):
        return None
    trial = picker.trial({**best.changes, **GRAPHS})
    if not picker.fits(trial) or has_errors(run(trial.ctx)):
        return None
    return trial


def _why(e: Evaluated, best: Evaluated | None) -> list[str]:
    st, c = e.step, e.cfg
    terms = sorted(st.terms.items(), key=lambda kv: -kv[1])
    top = ", ".join(f"{k} {v:.2f}s" for k, v in terms[:3] if v > 0)
    out = [f"{st.tflops_per_gpu:.0f} model TFLOP/s per GPU, MFU {st.mfu:.1%}; largest terms: {top}"]
    if c.recompute_granularity:
        mods = (
            c.recompute_modules if c.recompute_granularity == "selective" else [f"full {c.recompute_method}"]
        )
        out.append(f"recompute {', '.join(mods)} to fit ({e.peak / GIB:.1f} GiB peak)")
    else:
        out.append(f"fits without recompute ({e.peak / GIB:.1f} GiB peak)")
    if c.optimizer_cpu_offload_fraction:
        out.append(f"optimizer CPU offload {c.optimizer_cpu_offload_fraction:.0%}")
    out += e.notes
    if best is not None and best is not e:
        share = (e.step.tokens_per_step / e.step.step_s) / (best.step.tokens_per_step / best.step.step_s)
        out.append(f"{share:.0%} of the top plan's tokens per second")
    return out


def _plan(rank: int, e: Evaluated, best: Evaluated | None, variants: list[Evaluated], tied: bool) -> Plan:
    c, ctx = e.cfg, e.ctx
    mm = memory_model(ctx)
    stages = [
        {"pp_rank": s.pp_rank, "role": s.role, "total_gib": s.total_gib,
         "components": {comp.component: comp.gib for comp in s.components}}
        for s in breakdown(ctx, mm)
    ]  # fmt: skip
    settings = {
        k: v
        for k, v in c.model_dump(mode="json").items()
        if getattr(c, k) != TrainingConfig.model_fields[k].default
    }
    settings["model"] = ctx.model.id
    if settings.pop("peft", None):  # the requests take LoRA as lora_dim, written even at its default
        settings["lora_dim"] = c.lora_dim
    st = e.step
    return Plan(
        rank=rank,
        layout=ctx.layout.describe(),
        settings=settings,
        memory=PlanMemory(peak_gib=round(e.peak / GIB, 2), usable_gib=ctx.gpu.usable_hbm_gib, stages=stages),
        throughput=PlanThroughput(
            step_s=round(st.step_s, 3),
            tokens_per_s=round(st.tokens_per_step / st.step_s, 1),
            tflops_per_gpu=round(st.tflops_per_gpu, 1),
            mfu=round(st.mfu, 4),
            terms_s={k: round(v, 4) for k, v in st.terms.items()},
        ),
        why=_why(e, best),
        megatron_args=[] if c.peft == "lora" else megatron_args_for(c, mtp_layers=ctx.mtp_layers),
        bridge_overrides=bridge_override_list(c),
        bridge_snippet=bridge_python_snippet(c),
        findings=[
            f
            for f in sort_findings(
                e.findings + mamba_split_findings(ctx, st) + dominant_term_findings(ctx, st)
            )
            if f.code not in ("PARALLEL_FOLDING",)
        ],
        tied_with_top=tied,
        vpp_variants=[_variant(v) for v in variants],
    )


def _variant(v: Evaluated) -> dict[str, Any]:
    return {
        "vpp": v.ctx.vpp or 1,
        "tokens_per_s": round(v.step.tokens_per_step / v.step.step_s, 1),
        "peak_gib": round(v.peak / GIB, 2),
        "pipeline_layout": v.cfg.pipeline_layout,
    }
