"""How many microbatches each model chunk of a pipeline rank holds activations for, at the memory peak.

Follows Megatron Core 0.19 ``pipeline_parallel/schedules.py``: without pipelining one microbatch is in
flight; 1F1B (``forward_backward_pipelining_without_interleaving``) runs ``PP - rank - 1`` warmup
forwards, so rank ``r`` holds ``min(PP - r, M)`` microbatches; interleaved 1F1B
(``get_pp_rank_microbatches`` and ``get_schedule_table``) runs ``2 (PP - rank - 1) + (VPP - 1) G``
warmup forwards (G = microbatch_group_size_per_vp_stage, PP by default; one more with EP all-to-all
overlap), then alternates one forward and one backward, the backward visiting chunks in reverse order.
The peak is taken over that steady state; it equals Korthikanti et al.'s ``1 + (PP - 1) / (PP x VPP)``
factor on the first rank when every chunk is the same size.
"""

from __future__ import annotations

from collections.abc import Sequence


def warmup_forwards(pp: int, rank: int, vpp: int, microbatches: int, extra: int = 0) -> int:
    """Forward passes (over all chunks) a rank runs before its first backward; ``extra`` is EP-overlap's +1."""
    total = microbatches * vpp
    if pp == 1:
        return 0
    if vpp == 1:
        return min(pp - rank - 1, microbatches)
    return min((pp - rank - 1) * 2 + (vpp - 1) * pp + extra, total)


def _schedule_table(microbatches: int, vpp: int, group: int) -> list[int]:
    """Model-chunk id of each forward, in Megatron's interleaved order (groups of ``group`` microbatches)."""
    chunks = []
    for start in range(0, microbatches, group):
        size = microbatches - start if start + group >= microbatches else group
        for chunk in range(vpp):
            chunks.extend([chunk] * size)
    return chunks


def peak_in_flight(
    pp: int, rank: int, vpp: int, microbatches: int, chunk_bytes: Sequence[float], ep_overlap: bool = False
) -> tuple[float, list[int]]:
    """The largest activation total a rank holds, and the microbatches held per chunk at that moment.

    ``chunk_bytes[v]`` is one microbatch's activation memory for model chunk ``v`` of this rank.
    """
    m = max(microbatches, 1)
    if pp == 1 or vpp == 1:
        held = 1 if pp == 1 else min(pp - rank, m)
        counts = [held] * vpp
        return sum(c * b for c, b in zip(counts, chunk_bytes, strict=True)), counts
    # The steady state repeats every group of PP microbatches, so three groups reproduce the peak exactly.
    m_sim = m if m <= 3 * pp else 3 * pp
    table = _schedule_table(m_sim, vpp, pp)
    total = len(table)
    warmup = warmup_forwards(pp, rank, vpp, m_sim, int(ep_overlap))
    counts = [0] * vpp
    for k in range(warmup):
        counts[table[k]] += 1
    best = sum(c * b for c, b in zip(counts, chunk_bytes, strict=True))
    best_counts = list(counts)
    for i in range(total - warmup):
        counts[table[warmup + i]] += 1  # forward warmup + i ...
        held = sum(c * b for c, b in zip(counts, chunk_bytes, strict=True))
        if held > best:
            best, best_counts = held, list(counts)
        counts[vpp - 1 - table[i]] -= 1  # ... then backward i, chunks in reverse order
    return best, best_counts
