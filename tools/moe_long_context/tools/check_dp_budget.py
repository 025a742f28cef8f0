"""check_dp_budget: the parallel layout under MoE parallel folding, its pipeline split and batch.

Dense side ``TP x CP x DP x PP == world``, expert side ``ETP x EP x EDP x PP == world``,
``min_gpus = PP x max(TP x CP, EP x ETP)``. When something is off the result carries the nearest
layouts (and split settings) the engine accepts.
"""

from __future__ import annotations

import itertools
import math

from pydantic import BaseModel, Field, ValidationError

from ..engine.config import (
    BatchArgs,
    ClusterArgs,
    ContextParallelArgs,
    LauncherArgs,
    ModelArgs,
    ParallelArgs,
    PipelineSplitArgs,
    SequenceArgs,
    TrainingConfig,
)
from ..engine.context import Context, build_context
from ..engine.findings import Finding, Judged, errors, has_errors
from ..engine.pipeline import propose_splits
from ..engine.rules import run, run_tool
from ..engine.rules.upstream import coverage

BUDGET_FAMILIES = ("layout", "pipeline", "batch", "sequence", "cp")


class CheckDpBudgetRequest(  # bases in reverse order of the fields
    LauncherArgs,
    ContextParallelArgs,
    BatchArgs,
    PipelineSplitArgs,
    ParallelArgs,
    SequenceArgs,
    ClusterArgs,
    ModelArgs,
):
    """A parallel layout to check on a given number of GPUs."""


class PipelineInfo(BaseModel):
    method: str | None = Field(description="plain, account_for, uneven or layout; None if the split fails.")
    decoders_per_rank: list[int] = Field(description="Decoder layers on each PP rank.")
    layout_string: str | None = Field(description="The split as a --pipeline-model-parallel-layout string.")


class Alternative(BaseModel):
    """A nearby configuration the engine accepts, as the settings to change."""

    settings: dict[str, int | str | bool | list[int] | None] = Field(description="Request fields to set.")
    layout: str = Field(description="Resulting layout, e.g. 'TP1 CP32 PP8 VPP4 EP32 ETP1 DP1 EDP1'.")
    dp: int
    edp: int
    num_microbatches: int | None
    why: str = Field(description="What this alternative changes.")


class CheckDpBudgetResult(Judged):
    valid: bool = Field(description="True when no finding is an error.")
    layout: str = Field(description="The layout as resolved (ETP and SP after Bridge's defaults).")
    dp: int | None = Field(
        description="Data-parallel size world / (TP x CP x PP); None if it does not factor."
    )
    edp: int | None = Field(description="Expert data-parallel size world / (ETP x EP x PP).")
    etp: int = Field(description="ETP in effect.")
    vpp: int | None = Field(description="VPP in effect (from the layout string when one is given).")
    sequence_parallel: bool = Field(description="Sequence parallelism in effect.")
    min_gpus: int = Field(description="PP x max(TP x CP, EP x ETP): the smallest world for this layout.")
    gbs: int | None = Field(description="Global batch in effect (MBS x DP when unset).")
    num_microbatches: int | None = Field(description="GBS / (MBS x DP) per step and PP pipeline.")
    pipeline: PipelineInfo
    alternatives: list[Alternative] = Field(
        description="Nearest accepted configurations when this one has errors."
    )
    findings: list[Finding]


def _pipeline_info(ctx: Context) -> PipelineInfo:
    split = ctx.split.split
    if split is None:
        return PipelineInfo(method=None, decoders_per_rank=[], layout_string=None)
    return PipelineInfo(
        method=split.method, decoders_per_rank=split.decoders_per_rank, layout_string=split.layout_string()
    )


def check_dp_budget(req: CheckDpBudgetRequest) -> CheckDpBudgetResult:
    ctx = build_context(TrainingConfig(**req.model_dump(exclude_unset=True)))
    findings = run_tool(ctx, BUDGET_FAMILIES)
    lay = ctx.layout
    return CheckDpBudgetResult(
        valid=not has_errors(findings),
        layout=lay.describe(),
        dp=lay.dp,
        edp=lay.edp,
        etp=lay.etp,
        vpp=ctx.vpp,
        sequence_parallel=ctx.sequence_parallel,
        min_gpus=lay.min_gpus,
        gbs=ctx.gbs,
        num_microbatches=ctx.num_microbatches,
        pipeline=_pipeline_info(ctx),
        alternatives=nearest_alternatives(ctx) if has_errors(findings) else [],
        findings=findings,
        **coverage(ctx.cfg, ctx.model),
    )


# --------------------------------------------------------------------------- alternatives


def _neighbours(value: int, world: int) -> list[int]:
    """The value, x/÷ 2 and 4, and the powers of two within a factor 4 of it."""
    out = {value}
    for factor in (2, 4):
        out.add(value * factor)
        if value % factor == 0:
            out.add(value // factor)
    p = 1
    while p <= value * 4:
        if p * 4 >= value:
            out.add(p)
        p *= 2
    return sorted(v for v in out if 1 <= v <= world)


def _quick_ok(ctx: Context, tp: int, cp: int, pp: int, ep: int, etp: int) -> bool:
    """Arithmetic pre-filter: the world factors on both sides, EP divides experts, heads divide TP."""
    m, world = ctx.model, ctx.cfg.num_gpus
    if world % (tp * cp * pp) or world % (etp * ep * pp):
        return False
    return not m.num_experts % ep and m.tp_splits_attention(tp)


def _with_split(ctx: Context, settings: dict) -> dict | None:
    """Settings plus a pipeline split that works for them (the plain one when it does)."""
    c = ctx.cfg
    pp = settings.get("pp", c.pp)
    vpp = settings.get("vpp", ctx.vpp)
    if pp == c.pp and vpp == ctx.vpp and ctx.split.split is not None:
        return settings  # the current split already works
    if pp == 1:
        return {**settings, "vpp": None, **_clear_split()}
    proposals = propose_splits(ctx.model.num_layers, pp, vpp, ctx.mtp_layers, limit=2)
    if not proposals:
        return None
    best = proposals[0]
    return {**settings, **_clear_split(), **best.settings}


def _clear_split() -> dict:
    return {
        "pipeline_layout": None,
        "account_for_embedding_in_pipeline_split": False,
        "account_for_loss_in_pipeline_split": False,
        "num_layers_in_first_pipeline_stage": None,
        "num_layers_in_last_pipeline_stage": None,
    }


def _batch_fix(ctx: Context, settings: dict, dp: int, vpp: int | None, pp: int) -> dict:
    """Adjust gbs (never mbs) to the nearest value the batch rules accept."""
    c = ctx.cfg
    unit = c.mbs * dp
    m = max(1, round(c.gbs / unit)) if c.gbs is not None else pp  # unset: just fill the pipeline
    if vpp and vpp > 1:
        m = max(pp, math.ceil(m / pp) * pp)
    if m * unit != c.gbs:
        settings = {**settings, "gbs": m * unit}
    return settings


def nearest_alternatives(ctx: Context, limit: int = 4) -> list[Alternative]:
    """The closest configurations (fewest, smallest changes) the layout/pipeline/batch rules accept."""
    c = ctx.cfg
    world = c.num_gpus
    current = {"tp": c.tp, "cp": c.cp, "pp": c.pp, "ep": c.ep}
    candidates = []
    for tp, cp, pp, ep in itertools.product(
        _neighbours(c.tp, world), _neighbours(c.cp, world), _neighbours(c.pp, world), _neighbours(c.ep, world)
    ):
        etp = c.etp if c.etp is not None and c.etp in (1, tp) else (1 if ep > 1 else tp)
        if not _quick_ok(ctx, tp, cp, pp, ep, etp):
            continue
        changed = {k: v for k, v in (("tp", tp), ("cp", cp), ("pp", pp), ("ep", ep)) if current[k] != v}
        distance = sum(abs(math.log2(v / current[k])) for k, v in changed.items())
        candidates.append((len(changed), distance, tp, cp, pp, ep, changed))
    candidates.sort(key=lambda t: t[:6])
    out: list[Alternative] = []
    seen = set()
    base = c.model_dump(exclude_unset=True)
    for _, _, tp, cp, pp, _ep, changed in candidates:
        if len(out) >= limit:
            break
        vpp = ctx.vpp if pp == c.pp else None
        settings = _with_split(ctx, {**changed, "vpp": vpp} if pp != c.pp else dict(changed))
        if settings is None:
            continue
        dp = world // (tp * cp * pp)
        settings = _batch_fix(ctx, settings, dp, settings.get("vpp", vpp), pp)
        try:
            trial = TrainingConfig(**{**base, **settings})
        except ValidationError:
            continue  # e.g. the batch fix needs a gbs beyond what a request may carry: not an alternative
        trial_ctx = Context(cfg=trial, model=ctx.model, gpu=ctx.gpu)
        trial_errors = errors(run(trial_ctx, BUDGET_FAMILIES))
        if trial_errors and all(f.code.startswith("CP_") for f in trial_errors):
            # the smallest change upstream accepts may be the cp_comm_type alone (gpt-oss: p2p -> a2a)
            comm_settings = _comm_type_settings(trial_ctx)
            if comm_settings is not None:
                settings = {**settings, **comm_settings}
                trial = TrainingConfig(**{**base, **settings})
                trial_ctx = Context(cfg=trial, model=ctx.model, gpu=ctx.gpu)
                trial_errors = errors(run(trial_ctx, BUDGET_FAMILIES))
        if trial_errors:
            continue
        key = tuple(sorted((k, str(v)) for k, v in settings.items()))
        if key in seen:
            continue
        seen.add(key)
        lay = trial_ctx.layout
        out.append(
            Alternative(
                settings={k: v for k, v in settings.items() if v != base.get(k, _default(k))},
                layout=lay.describe(),
                dp=lay.dp,
                edp=lay.edp,
                num_microbatches=trial_ctx.num_microbatches,
                why=_describe_change(c, settings),
            )
        )
    return out


def _comm_type_settings(ctx: Context) -> dict | None:
    """The cp_comm_type (and hierarchy) size_cp would choose for this layout, when it differs."""
    from .size_cp import comm_type_for

    c = ctx.cfg
    comm, hierarchy, _ = comm_type_for(ctx.model, ctx.gpu, c.tp, c.cp, c.packed_sequences)
    if comm is None or (comm == c.cp_comm_type and hierarchy == c.hierarchical_cp_sizes):
        return None
    return {"cp_comm_type": comm, "hierarchical_cp_sizes": hierarchy}


def _default(key: str):
    return TrainingConfig.model_fields[key].default


def _describe_change(c: TrainingConfig, settings: dict) -> str:
    parts = []
    for key in ("tp", "cp", "pp", "ep", "vpp", "gbs", "cp_comm_type", "hierarchical_cp_sizes"):
        if key in settings and settings[key] != getattr(c, key):
            parts.append(f"{key} {getattr(c, key)} -> {settings[key]}")
    split_keys = [k for k in settings if k in _clear_split() and settings[k] not in (None, False)]
    if split_keys:
        parts.append("pipeline split: " + ", ".join(f"{k}={settings[k]}" for k in split_keys))
    return "; ".join(parts) if parts else "no change needed"
