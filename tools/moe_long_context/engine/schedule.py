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
from functools import lru_cache
from operator import mul


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

    ``chunk_bytes[v]`` is one microbatch's activation memory for model chunk ``v`` of this rank. The first
    state of the schedule that holds the most wins a tie, as a walk through the schedule would find it.
    """
    if len(chunk_bytes) != vpp:
        raise ValueError(f"chunk_bytes has {len(chunk_bytes)} entries for {vpp} virtual stages")
    best, best_counts = -1.0, None
    for counts in in_flight_states(pp, rank, vpp, microbatches, ep_overlap):
        held = sum(map(mul, counts, chunk_bytes))
        if held > best:
            best, best_counts = held, counts
    return best, list(best_counts)


@lru_cache(maxsize=4096)
def in_flight_states(
    pp: int, rank: int, vpp: int, microbatches: int, ep_overlap: bool = False
) -> tuple[tuple[int, ...], ...]:
    """Every distinct count of microbatches held per chunk the schedule passes through, in the order it first
    reaches them (after the warmup forwards, then after each steady-state forward). Whatever the chunk sizes,
    the memory peak is at one of these states, so a rank's peak is the largest of a few dot products."""
    m = max(microbatches, 1)
    if pp == 1 or vpp == 1:
        held = 1 if pp == 1 else min(pp - rank, m)
        return ((held,) * vpp,)
    # The steady state repeats every group of PP microbatches, so three groups reproduce the peak exactly.
    m_sim = m if m <= 3 * pp else 3 * pp
    table = _schedule_table(m_sim, vpp, pp)
    total = len(table)
    warmup = warmup_forwards(pp, rank, vpp, m_sim, int(ep_overlap))
    counts = [0] * vpp
    for k in range(warmup):
        counts[table[k]] += 1
    states = {tuple(counts): None}
    for i in range(total - warmup):
        counts[table[warmup + i]] += 1  # forward warmup + i ...
        states.setdefault(tuple(counts))
        counts[vpp - 1 - table[i]] -= 1  # ... then backward i, chunks in reverse order
    return tuple(states)
