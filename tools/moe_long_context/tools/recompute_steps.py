"""What to change when no recompute setting fits: optimizer CPU offload, more CP, TP or PP, a smaller MBS, each
measured with pick_recompute's trials (the GiB it buys, whether the peak then fits) and in the order to try."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from ..engine.context import Context
from ..engine.pipeline import propose_splits
from ..memory.terms import GIB

Picker = Trial = Any  # pick_recompute's Picker and Trial, which call this module (it cannot import them back)

OFFLOAD_STEP = 0.05  # fractions are proposed in steps of 5 %
SPLIT_CLEARED = {
    "pipeline_layout": None,
    "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False,
    "num_layers_in_first_pipeline_stage": None,
    "num_layers_in_last_pipeline_stage": None,
}


class NextStep(BaseModel):
    action: str = Field(description="What to change, in the order to try it.")
    settings: dict[str, Any] = Field(description="Request fields to set.")
    gib_saved: float = Field(description="GiB this change removes from the peak (on top of the recompute).")
    peak_gib: float = Field(description="Peak with this change.")
    fits: bool = Field(description="Whether the peak then fits the GPU.")
    note: str = Field(description="What the change costs or needs.")


def _with_world(
    ctx: Context, changes: dict[str, Any], factor_dense: int, factor_expert: int
) -> dict[str, Any]:
    """Keep the world when DP and EDP can absorb a larger model-parallel size, else grow the job."""
    lay = ctx.layout
    if (lay.dp or 0) % factor_dense == 0 and (lay.edp or 0) % factor_expert == 0:
        return changes
    grow = max(factor_dense, factor_expert)
    return {**changes, "num_gpus": ctx.cfg.num_gpus * grow}


def _offload_step(picker: Picker, best: Trial) -> NextStep | None:
    c = best.cfg
    if c.optimizer_cpu_offload_fraction >= 1.0:
        return None
    full = picker.trial(
        {**best.changes, "optimizer_cpu_offload_fraction": 1.0, "use_precision_aware_optimizer": True}
    )
    if not full.accepted:
        return None
    half = picker.trial(
        {**best.changes, "optimizer_cpu_offload_fraction": 0.5, "use_precision_aware_optimizer": True}
    )
    fraction = 1.0
    if half.accepted and full.peak <= picker.usable:
        per_unit = 2 * (half.peak - full.peak)  # GPU optimizer bytes scale with (1 - fraction)
        need = (full.peak + per_unit - picker.usable) / per_unit if per_unit > 0 else 0.0
        fraction = min(1.0, max(OFFLOAD_STEP, math.ceil(need / OFFLOAD_STEP) * OFFLOAD_STEP))
    chosen = (
        full
        if fraction == 1.0
        else picker.trial(
            {
                **best.changes,
                "optimizer_cpu_offload_fraction": fraction,
                "use_precision_aware_optimizer": True,
            }
        )
    )
    return _step(
        picker,
        best,
        "optimizer CPU offload",
        {"optimizer_cpu_offload_fraction": fraction, "use_precision_aware_optimizer": True},
        chosen,
        "moves FP32 master weights and Adam moments to the CPU (Megatron-LM needs the precision-aware "
        "optimizer); costs host memory and PCIe time in the optimizer step",
    )


def _step(
    picker: Picker, best: Trial, action: str, settings: dict[str, Any], trial: Trial, note: str
) -> NextStep:
    return NextStep(
        action=action,
        settings=settings,
        gib_saved=round((best.peak - trial.peak) / GIB, 3),
        peak_gib=round(trial.peak / GIB, 3),
        fits=picker.fits(trial),
        note=note,
    )


def _parallel_step(picker: Picker, best: Trial, key: str, note: str) -> NextStep | None:
    ctx = best.ctx
    value = getattr(ctx.cfg, key) * 2
    expert_factor = 2 if key == "pp" else 1
    settings = _with_world(ctx, {key: value}, 2, expert_factor)
    if key == "tp" and ctx.cfg.sequence_parallel is False:
        settings["sequence_parallel"] = True
    if key == "pp":
        split = _pp_split(ctx, value)
        if split is None:
            return None
        settings.update(split)
    trial = picker.trial({**best.changes, **settings})
    if not trial.accepted:
        return None
    if "num_gpus" in settings:
        note += f"; needs {settings['num_gpus']} GPUs (DP/EDP cannot absorb it)"
    changed = {k: v for k, v in settings.items() if getattr(ctx.cfg, k) != v}
    return _step(picker, best, f"{key.upper()} {getattr(ctx.cfg, key)} -> {value}", changed, trial, note)


def _pp_split(ctx: Context, pp: int) -> dict[str, Any] | None:
    """Split settings for a larger PP: the current VPP if the layers allow it, else fewer virtual stages."""
    vpp = ctx.vpp or 1
    for v in sorted({vpp, *(d for d in range(1, vpp) if vpp % d == 0)}, reverse=True):
        proposals = propose_splits(ctx.model.num_layers, pp, v if v > 1 else None, ctx.mtp_layers, limit=1)
        if proposals:
            return {**SPLIT_CLEARED, "vpp": v if v > 1 else None, **proposals[0].settings}
    return None


def next_steps(picker: Picker, best: Trial) -> list[NextStep]:
    steps = [
        _offload_step(picker, best),
        _parallel_step(
            picker, best, "cp", "halves the tokens (and activations) per rank; more CP communication"
        ),
        _parallel_step(
            picker, best, "tp", "halves weights and activations per rank; TP should stay in the NVLink domain"
        ),
        _parallel_step(picker, best, "pp", "halves the layers per rank; more pipeline stages and bubble"),
    ]
    if best.cfg.mbs > 1:
        trial = picker.trial({**best.changes, "mbs": best.cfg.mbs // 2})
        if trial.accepted:
            steps.append(
                _step(
                    picker,
                    best,
                    f"MBS {best.cfg.mbs} -> {best.cfg.mbs // 2}",
                    {"mbs": best.cfg.mbs // 2},
                    trial,
                    "halves the activations of each microbatch; more microbatches per step",
                )
            )
    return [s for s in steps if s is not None]
