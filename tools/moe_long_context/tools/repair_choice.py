"""Choosing among repairs with the memory model, and the memory verdict of a corrected configuration.

Several rules have more than one fix (EP overlap with moe recompute: change the recompute, or turn the
overlap off). The fix to hand back is the first one, in order of preference, that resolves the error, leads to no
error that cannot be fixed in turn, and fits the GPU with headroom (judged on where it ends, after the fixes
it calls for); the others are reported with the GiB they would need. When none
fits, the one with the lowest peak is kept and the result says so; the memory verdict then carries
pick_recompute's next steps.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..engine.config import TrainingConfig
from ..engine.context import Context
from ..engine.findings import errors
from ..engine.rules import run
from ..memory.rank_memory import memory_model
from ..memory.terms import GIB
from .repairs import repair_options


class RejectedFix(BaseModel):
    fix: str = Field(description="What the alternative would have done.")
    settings: dict[str, Any] = Field(description="Engine fields it would have set.")
    reason: str = Field(description="Why it was not chosen (with the GiB it needs).")
    peak_gib: float | None = Field(description="Its estimated peak per rank, GiB (None when not estimated).")


class AppliedFix(BaseModel):
    code: str = Field(description="The error the change resolves.")
    settings: dict[str, Any] = Field(description="Engine fields changed to resolve it.")
    fix: str | None = Field(default=None, description="Which of the rule's fixes was chosen.")
    peak_gib: float | None = Field(
        default=None, description="Estimated peak per rank after this fix, GiB (None when not estimated)."
    )
    rejected: list[RejectedFix] = Field(
        default_factory=list, description="The rule's other fixes and why they were not chosen."
    )


class NextStep(BaseModel):
    action: str
    settings: dict[str, Any]
    gib_saved: float
    peak_gib: float
    fits: bool


class MemoryVerdict(BaseModel):
    peak_gib: float | None = Field(description="Estimated peak per rank of the corrected configuration, GiB.")
    usable_gib: float | None = Field(
        description="What PyTorch can allocate on the GPU, GiB (None without one)."
    )
    fits: bool | None = Field(description="peak <= usable (None without a GPU or an estimate).")
    headroom_gib: float | None = Field(description="usable - peak, GiB (negative when it does not fit).")
    note: str = Field(description="The verdict in one sentence.")
    next_steps: list[NextStep] = Field(
        default_factory=list,
        description="When it does not fit: pick_recompute's recompute choice and next steps, in order, with "
        "the GiB each buys.",
    )


def _peak_gib(ctx: Context) -> float | None:
    try:
        mm = memory_model(ctx)
    except Exception:
        return None
    return round(mm.peak_rank.total / GIB, 2) if mm is not None else None


def _trial(ctx: Context, patch: dict[str, Any]) -> tuple[TrainingConfig, set[str], float | None]:
    """A fix applied and the errors it leads to settled (each with its fix that leaves the lowest peak):
    the configuration it ends in, the errors left and its peak."""
    cfg = normalise(TrainingConfig(**{**ctx.cfg.model_dump(), **patch}))
    tctx = Context(cfg=cfg, model=ctx.model, gpu=ctx.gpu)
    seen: set[str] = set()
    for _ in range(8):
        errs = [f.code for f in errors(run(tctx))]
        follow = next((c for c in errs if c not in seen and repair_options(c, tctx)), None)
        if follow is None:
            break
        seen.add(follow)
        cfg = _lowest_peak_fix(tctx, follow, set(errs))
        tctx = Context(cfg=cfg, model=ctx.model, gpu=ctx.gpu)
    return cfg, {f.code for f in errors(run(tctx))}, _peak_gib(tctx)


def _lowest_peak_fix(ctx: Context, code: str, before: set[str]) -> TrainingConfig:
    """One step: the fix of ``code`` that resolves it without a new error and leaves the lowest peak."""
    best: tuple[float, int, TrainingConfig] | None = None
    for i, (_label, patch) in enumerate(repair_options(code, ctx)):
        cfg = normalise(TrainingConfig(**{**ctx.cfg.model_dump(), **patch}))
        tctx = Context(cfg=cfg, model=ctx.model, gpu=ctx.gpu)
        errs = {f.code for f in errors(run(tctx))}
        if code in errs or errs - before:
            continue
        peak = _peak_gib(tctx)
        key = (peak if peak is not None else float("inf"), i, cfg)
        if best is None or key[:2] < best[:2]:
            best = key
    if best is None:  # no clean step: the preferred fix, whose errors the caller sees
        _label, patch = repair_options(code, ctx)[0]
        return normalise(TrainingConfig(**{**ctx.cfg.model_dump(), **patch}))
    return best[2]


def normalise(cfg: TrainingConfig) -> TrainingConfig:
    """Selective recompute with no module left is no recompute (Megatron would read an absent list as
    [core_attn], and a bare --recompute-modules does not parse)."""
    if cfg.recompute_granularity == "selective" and cfg.recompute_modules == []:
        return TrainingConfig(
            **{**cfg.model_dump(), "recompute_granularity": None, "recompute_modules": None}
        )
    return cfg


def choose_fix(code: str, ctx: Context) -> AppliedFix | None:
    """The fix for one error: the first alternative that resolves it, adds no error and fits with headroom."""
    options = repair_options(code, ctx)
    if not options:
        return None
    before = {f.code for f in errors(run(ctx))}
    usable = ctx.gpu.usable_hbm_gib if ctx.gpu is not None else None
    tried = []
    for label, patch in options:
        _settled, errs, peak = _trial(ctx, patch)
        new = sorted(errs - before)
        cfg = normalise(TrainingConfig(**{**ctx.cfg.model_dump(), **patch}))
        settings = {k: getattr(cfg, k) for k in patch} | {
            k: getattr(cfg, k) for k in ("recompute_granularity", "recompute_modules")
            if getattr(cfg, k) != getattr(ctx.cfg, k)
        }  # fmt: skip
        if code in errs:
            reason = "does not resolve the error"
        elif new:
            reason = "leads to errors no fix resolves: " + ", ".join(new)
        elif usable is not None and peak is not None and peak > usable:
            reason = (
                f"needs {peak:.1f} GiB per rank, over the {usable:g} GiB usable (by {peak - usable:.1f} GiB)"
            )
        else:
            reason = ""
        tried.append((label, settings, reason, peak))
    chosen = next((t for t in tried if not t[2]), None)
    if chosen is None and usable is not None and code.startswith("RECOMPUTE_"):
        # a recompute rule's fix that leaves the rank over the GPU: the same fix with the labels pick_recompute
        # chooses for it
        for label, settings, reason, _peak in list(tried):
            if reason.startswith(("does not", "leads")):
                continue
            extra = _recompute_that_fits(ctx, settings)
            if extra is None:
                continue
            combined = {**settings, **extra}
            _settled, errs, peak = _trial(ctx, combined)
            if code not in errs and not (errs - before) and peak is not None and peak <= usable:
                chosen = (f"{label}, with pick_recompute's recompute choice", combined, "", peak)
                tried.append(chosen)
                break
    if chosen is None:  # nothing fits: the accepted fix with the lowest peak, if any
        accepted = [t for t in tried if not t[2].startswith(("does not", "leads"))]
        if not accepted:
            return None
        chosen = min(accepted, key=lambda t: t[3] if t[3] is not None else float("inf"))
    rejected = []
    for t in tried:
        if t is chosen:
            continue
        reason = t[2] or (
            f"also fits ({t[3]:.1f} GiB per rank) but comes later in the rule's order of preference"
            if t[3] is not None
            else "comes later in the rule's order of preference"
        )
        rejected.append(RejectedFix(fix=t[0], settings=t[1], reason=reason, peak_gib=t[3]))
    return AppliedFix(
        code=code,
        settings=chosen[1],
        fix=chosen[0] if len(tried) > 1 else None,
        peak_gib=chosen[3],
        rejected=rejected,
    )


def _recompute_that_fits(ctx: Context, patch: dict[str, Any]) -> dict[str, Any] | None:
    """pick_recompute's recompute choice for the configuration with ``patch`` applied, when it fits."""
    from .pick_recompute import Picker

    cfg = normalise(TrainingConfig(**{**ctx.cfg.model_dump(), **patch}))
    tctx = Context(cfg=cfg, model=ctx.model, gpu=ctx.gpu)
    if not cfg.seq_len or ctx.gpu is None:
        return None
    try:
        picker = Picker(tctx)
        best = picker.pick()
    except Exception:
        return None
    if not picker.fits(best):
        return None
    keys = ("recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers")
    return {k: getattr(best.cfg, k) for k in keys if getattr(best.cfg, k) != getattr(cfg, k)} or None


def repair_config(ctx: Context) -> tuple[TrainingConfig, list[AppliedFix]]:
    """Apply fixes for the engine's errors one at a time (later errors may go with an earlier fix)."""
    fixes: list[AppliedFix] = []
    done: set[str] = set()
    cfg = ctx.cfg
    for _ in range(16):
        errs = errors(run(ctx))
        fix = None
        for f in errs:
            if f.code in done:
                continue
            done.add(f.code)
            fix = choose_fix(f.code, ctx)
            if fix is not None:
                break
        if fix is None:
            break
        fixes.append(fix)
        cfg = normalise(TrainingConfig(**{**cfg.model_dump(), **fix.settings}))
        ctx = Context(cfg=cfg, model=ctx.model, gpu=ctx.gpu)
    return cfg, fixes


def memory_verdict(ctx: Context) -> MemoryVerdict | None:
    """The memory model's verdict on a configuration, with next steps when it does not fit."""
    if not ctx.cfg.seq_len:
        return None
    peak = _peak_gib(ctx)
    usable = ctx.gpu.usable_hbm_gib if ctx.gpu is not None else None
    if peak is None:
        return MemoryVerdict(peak_gib=None, usable_gib=usable, fits=None, headroom_gib=None,
                             note="Memory was not estimated: the layout or the pipeline split has errors.")  # fmt: skip
    if usable is None:
        return MemoryVerdict(peak_gib=peak, usable_gib=None, fits=None, headroom_gib=None,
                             note=f"Peak {peak:.1f} GiB per rank; no GPU given, so the fit was not checked.")  # fmt: skip
    fits = peak <= usable
    verdict = MemoryVerdict(
        peak_gib=peak,
        usable_gib=usable,
        fits=fits,
        headroom_gib=round(usable - peak, 2),
        note=(
            f"Fits: peak {peak:.1f} GiB per rank of the {usable:g} GiB usable on {ctx.gpu.name} "
            f"({usable - peak:.1f} GiB headroom)."
            if fits
            else f"Does not fit: peak {peak:.1f} GiB per rank, over the {usable:g} GiB usable on {ctx.gpu.name} by "
            f"{peak - usable:.1f} GiB. Apply the next steps in order."
        ),
    )
    if not fits:
        verdict.next_steps = _next_steps(ctx, peak)
    return verdict


def _next_steps(ctx: Context, peak: float) -> list[NextStep]:
    from .pick_recompute import Picker, next_steps

    picker = Picker(ctx)
    best = picker.pick()
    steps = []
    best_peak = round(best.peak / GIB, 2) if best.peak != float("inf") else None
    if best_peak is not None and best.changes and best_peak < peak:
        steps.append(NextStep(action="use pick_recompute's recompute choice", settings=dict(best.changes),
                              gib_saved=round(peak - best_peak, 2), peak_gib=best_peak,
                              fits=picker.fits(best)))  # fmt: skip
    if not picker.fits(best):
        steps += [
            NextStep(
                action=s.action, settings=s.settings, gib_saved=s.gib_saved, peak_gib=s.peak_gib, fits=s.fits
            )
            for s in next_steps(picker, best)
        ]
    return steps
