"""Batch checks: GBS against MBS x DP, and the microbatch count the (interleaved) schedule needs."""

from __future__ import annotations

from collections.abc import Iterator

from ..context import Context
from ..findings import Finding
from .table import check, finding


@check("batch")
def global_batch(ctx: Context) -> Iterator[Finding]:
    c, dp = ctx.cfg, ctx.layout.dp
    if dp is None:
        return  # the world does not factor; reported by the layout family
    unit = c.mbs * dp
    if c.gbs is None:
        yield finding(
            "GBS_DEFAULTED",
            f"gbs not given: Megatron uses MBS x DP = {unit}, i.e. one microbatch per step.",
            "Set gbs to a multiple of MBS x DP that gives enough microbatches to fill the pipeline.",
            ["gbs"],
        )
        return
    if c.gbs % unit:
        lower, upper = c.gbs // unit * unit, (c.gbs // unit + 1) * unit
        near = [v for v in (lower, upper) if v > 0]
        yield finding(
            "GBS_DIVISIBILITY",
            f"gbs={c.gbs} is not divisible by MBS x DP = {c.mbs} x {dp} = {unit} (DP excludes CP).",
            f"Use gbs in {near} (a multiple of {unit}), or change MBS.",
            ["gbs", "mbs"],
        )


@check("batch")
def packed_micro_batch(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if c.packed_sequences and c.mbs > 1 and c.launcher == "bridge":
        yield finding(
            "PACKED_MBS_ONE",
            f"Offline-packed sequences with mbs={c.mbs}: Megatron Bridge trains packed sequences one pack per "
            "microbatch.",
            "Use mbs=1 (the packs already hold several sequences each); the global batch keeps its value, "
            "a multiple of DP.",
            ["mbs", "packed_sequences"],
        )


@check("batch")
def microbatches(ctx: Context) -> Iterator[Finding]:
    c, m = ctx.cfg, ctx.num_microbatches
    if m is None or c.pp == 1:
        return
    vpp = ctx.vpp
    unit = c.mbs * (ctx.layout.dp or 1)
    if vpp is not None and vpp > 1 and (m < c.pp or m % c.pp):
        good = max(c.pp, -(-m // c.pp) * c.pp)
        yield finding(
            "VPP_MICROBATCHES",
            f"{m} microbatches with PP={c.pp} and VPP={vpp}: the interleaved schedule needs at least PP and a "
            f"multiple of PP (microbatch_group_size_per_vp_stage defaults to PP).",
            f"Use gbs={good * unit} ({good} microbatches), or drop VPP.",
            ["gbs", "vpp"],
        )
    elif m < c.pp:
        bubble = (c.pp - 1) / (m + c.pp - 1)
        yield finding(
            "FEW_MICROBATCHES",
            f"{m} microbatches for PP={c.pp}: the 1F1B bubble idles {bubble:.0%} of the step.",
            f"Raise gbs to at least {c.pp * unit} (ideally 4-8 x PP microbatches).",
            ["gbs"],
        )
