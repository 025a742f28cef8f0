"""Pipeline split checks: VPP needs PP, layers over PP x VPP, layout strings, uneven stages."""

from __future__ import annotations

from collections.abc import Iterator

from ..context import Context
from ..findings import Finding
from ..pipeline import propose_splits
from .table import check, finding


def _fix_from_proposals(ctx: Context) -> str:
    c = ctx.cfg
    proposals = propose_splits(ctx.model.num_layers, c.pp, ctx.vpp, ctx.mtp_layers)
    if not proposals:
        return f"Change PP (or VPP) so that the {ctx.model.num_layers} layers can be split."
    options = []
    for p in proposals:
        if not p.settings:
            continue
        settings = ", ".join(f"{k}={v}" for k, v in p.settings.items())
        options.append(f"{settings} (decoder layers per PP rank {list(p.decoders_per_rank)})")
    if not options:
        return "Use the plain split (drop the conflicting settings)."
    return "Use one of: " + "; or ".join(options)


@check("pipeline")
def vpp_needs_pp(ctx: Context) -> Iterator[Finding]:
    vpp = ctx.vpp
    if vpp is not None and vpp > 1 and ctx.cfg.pp == 1:
        yield finding(
            "VPP_NEEDS_PP",
            f"VPP={vpp} with PP=1: interleaved pipelining needs PP > 1.",
            "Drop vpp, or use PP >= 2.",
            ["vpp", "pp"],
        )


@check("pipeline")
def layout_conflicts(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if c.pipeline_layout is None:
        return
    others = [
        name
        for name, value in (
            ("num_layers_in_first_pipeline_stage", c.num_layers_in_first_pipeline_stage),
            ("num_layers_in_last_pipeline_stage", c.num_layers_in_last_pipeline_stage),
            ("account_for_embedding_in_pipeline_split", c.account_for_embedding_in_pipeline_split or None),
            ("account_for_loss_in_pipeline_split", c.account_for_loss_in_pipeline_split or None),
            # Megatron-LM refuses --num-virtual-stages-per-pipeline-rank next to a layout (arguments.py:893-905);
            # Megatron Core and Bridge only require the two to agree (PP_LAYOUT_VPP_MISMATCH).
            ("vpp", c.vpp if c.launcher == "megatron-lm" else None),
        )
        if value is not None
    ]
    if others:
        yield finding(
            "PP_LAYOUT_CONFLICT",
            f"pipeline_layout is set together with {', '.join(others)}.",
            "Keep either the layout string or the other split settings, not both.",
            ["pipeline_layout", *others],
        )


@check("pipeline")
def layer_split(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if c.pipeline_layout is not None and (
        c.num_layers_in_first_pipeline_stage
        or c.num_layers_in_last_pipeline_stage
        or c.account_for_embedding_in_pipeline_split
        or c.account_for_loss_in_pipeline_split
    ):
        return  # reported as PP_LAYOUT_CONFLICT
    result = ctx.split
    if result.split is None:
        fix = _fix_from_proposals(ctx)
        for problem in result.problems:
            yield finding(problem.code, problem.message + ".", fix, problem.keys)
        return
    per_rank = result.split.decoders_per_rank
    if c.pp > 1 and max(per_rank) - min(per_rank) > max(2, max(per_rank) // 4):
        yield finding(
            "PP_SPLIT_IMBALANCED",
            f"Decoder layers per PP rank: {per_rank}.",
            "Balance the stages (an explicit pipeline_layout can also place the embedding and loss).",
            ["pipeline_layout", "pp"],
        )
