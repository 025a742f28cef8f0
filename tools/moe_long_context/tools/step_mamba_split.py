"""The one step-time term the measurements contradict in a known direction: Mamba layers whose heads TP or CP split.

Megatron Core splits a Mamba-2 layer's heads over TP (ssm/mamba_mixer.py:257-269) and, by all-to-all, over CP
(ssm/mamba_context_parallel.py:140-211), and the step-time model divides the SSD scan's time by that split, as it
would a FLOP-bound kernel. Measured runs that differ in the split did not speed up so: Nemotron 3 Super and
Ultra train 1.40-1.43x faster on GB300 at TP 1 than on GB200 at TP 2 with sequence parallelism (Bridge
performance summary, 26.08; the Ultra GB200 recipe differs from GB300's only in TP 2 + SP, Megatron-Bridge
PR #5287), where Nemotron 3 Nano, with the same layout on both, is 1.11-1.19x apart; the model puts the pairs
1.12-1.15x apart. Pricing the scan as not shortened by the split gives 1.02-1.08 on those GB200 rows. Which
kernel cost does not shrink is not established, and no measured pair splits the heads further than 2 ways: the
estimate keeps the divided scan, and this finding's bound loses one factor of 2 of the split, what was measured
(the scan twice as long), not the whole split (at 128K with CP 16 the per-rank scan runs over the full sequence,
a shape no measurement covers).
"""

from __future__ import annotations

from ..engine.context import Context
from ..engine.findings import Finding
from ..engine.rules import finding
from ..engine.step_time import StepTime
from .step_findings import tokens_per_s


def mamba_split_findings(ctx: Context, st: StepTime) -> list[Finding]:
    """STEP_MAMBA_SPLIT_UNPROVEN when TP x CP splits Mamba heads: the step with one factor of 2 of the split
    lost (the scan twice as long)."""
    split = ctx.cfg.tp * ctx.cfg.cp
    scan = st.terms.get("mamba_scan", 0.0)
    if split <= 1 or not scan or not st.step_s:
        return []
    microbatches = ctx.num_microbatches or 1
    extra = scan * st.pipeline_factor / microbatches  # the scan of split / 2 ways instead of split
    slow = st.step_s + extra
    message = (
        f"The estimate divides the Mamba layers' SSD scan by TP x CP = {split} ({scan:.2f} s of the "
        f"{st.step_s:.2f} s step); measured TP 1 / TP 2 pairs of Nemotron 3 Super and Ultra did not speed up so. "
        f"With one factor of 2 of the split lost (the scan twice as long) the step is {slow:.2f} s "
        f"({st.step_s / slow:.2f}x the tokens/s); splits beyond 2 ways are not measured."
    )
    fix = (
        f"Read the throughput as {st.tokens_per_step / slow:,.0f}-{tokens_per_s(st):,.0f} tokens/s; where memory allows, "
        "a layout with TP x CP = 1 for the Mamba layers (more EP or DP) is not subject to it (plan_layout)."
    )
    return [finding("STEP_MAMBA_SPLIT_UNPROVEN", message, fix, ["tp", "cp"])]
