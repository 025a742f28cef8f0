"""Front-end checks: settings Megatron-LM's validate_args or Megatron Bridge's config handling decide alone.

Each rule says which launcher enforces it; the other may accept, warn, or silently change the setting.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import Context
from ..findings import Finding
from .table import check, finding


@check("launch")
def cross_entropy_fusion(ctx: Context) -> Iterator[Finding]:
    if ctx.cfg.cross_entropy_fusion == "te" and ctx.cfg.launcher == "megatron-lm":
        yield finding(
            "LM_CROSS_ENTROPY_TE",
            "--cross-entropy-loss-fusion with --cross-entropy-fusion-impl te: Megatron-LM refuses the TE "
            "cross-entropy kernel ('disabled due to stability issues'); Megatron Bridge only warns.",
            "Use --cross-entropy-fusion-impl native (keep --cross-entropy-loss-fusion), or drop the fusion flag.",
            ["cross_entropy_fusion"],
        )


@check("launch")
def tp_comm_overlap(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if not c.tp_comm_overlap or ctx.sequence_parallel:
        return
    why = (
        "TP = 1 (Megatron turns sequence parallelism off there)" if c.tp == 1 else "sequence parallelism off"
    )
    if c.launcher == "megatron-lm":
        yield finding(
            "LM_TP_COMM_OVERLAP_NEEDS_SP",
            f"--tp-comm-overlap with {why}: Megatron-LM asserts that TP communication overlap needs sequence "
            "parallelism.",
            "Drop --tp-comm-overlap"
            + (
                " (there is no TP communication at TP = 1)." if c.tp == 1 else ", or add --sequence-parallel."
            ),
            ["tp_comm_overlap", "sequence_parallel", "tp"],
        )
    else:
        yield finding(
            "TP_COMM_OVERLAP_DISABLED",
            f"comm_overlap.tp_comm_overlap with {why}: Megatron Bridge turns the overlap off with a warning.",
            "Drop comm_overlap.tp_comm_overlap"
            + ("." if c.tp == 1 else ", or set model.sequence_parallel=true."),
            ["tp_comm_overlap", "sequence_parallel", "tp"],
        )


@check("launch")
def delay_wgrad(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if c.delay_wgrad_compute and not c.ep_overlap:
        yield finding(
            "DELAY_WGRAD_NEEDS_EP_OVERLAP",
            "delay_wgrad_compute without overlap_moe_expert_parallel_comm: the delayed weight gradients are "
            "overlapped with the EP all-to-all, so both Megatron Core and Megatron Bridge refuse it alone.",
            "Set ep_overlap (comm_overlap.overlap_moe_expert_parallel_comm=true / "
            "--overlap-moe-expert-parallel-comm), or drop delay_wgrad_compute.",
            ["delay_wgrad_compute", "ep_overlap"],
        )
