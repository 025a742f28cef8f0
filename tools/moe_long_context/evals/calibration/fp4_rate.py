"""NVFP4's GEMM rate, solved from measured NVFP4 / MXFP8 pairs: ``engine/fp4_rate.yaml``.

Bridge's performance tables run Nemotron 3 Super in MXFP8 and in NVFP4 with every other setting equal (one
container, one GPU, one layout): NVFP4 trains 1.00-1.04x faster, where NVFP4's nominal peak is 2-3x FP8's. The
engine prices each pair's MXFP8 run as it does any run, and NVFP4 GEMMs at ``x`` times the FP8 GEMM rate of the
same GPU; the recipe's BF16 edge layers (``first_last_layers_bf16``) run at the BF16 rate in both the estimate and
the run. The NVFP4 step is ``A + B / x`` (B: its FP4 GEMM seconds at the FP8 rate, A: the rest), so the ``x`` at
which the estimated NVFP4 / MXFP8 step ratio equals the measured one is solved per pair from two estimates; the
file keeps the median. Unlike the sustained rates this rests on the engine's split of the step into GEMM and the
rest, so it is written after them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from ...engine.sustained_rate import fp4_over_fp8_as
from ...tools.estimate_throughput import estimate_throughput_config
from .corpus import Corpus, Point, typical_runs

PRECISION_KEYS = (
    "precision",
    "first_last_layers_bf16",
    "num_layers_at_start_in_bf16",
    "num_layers_at_end_in_bf16",
)
MIN_PAIRS = 3


def measured_pairs(corpus: Corpus) -> list[tuple[Point, Point]]:
    """(MXFP8 run, NVFP4 run) of one model in one container on one GPU whose settings differ in nothing but the
    precision (and the BF16 edge layers that go with it)."""
    groups: dict[tuple, dict[str, Point]] = defaultdict(dict)
    for p in typical_runs(corpus):
        rest = sorted((k, repr(v)) for k, v in p.config.items() if k not in PRECISION_KEYS)
        groups[(p.model, p.container, repr(rest))][p.config.get("precision", "bf16")] = p
    return sorted(((g["mxfp8"], g["nvfp4"]) for g in groups.values() if "mxfp8" in g and "nvfp4" in g),
                  key=lambda pair: pair[1].id)  # fmt: skip


def measured_ratio(mxfp8: Point, nvfp4: Point) -> float:
    """NVFP4 / MXFP8 tokens/s, measured."""
    return nvfp4.measured.tokens_per_s_per_gpu / mxfp8.measured.tokens_per_s_per_gpu


def _step_s(point: Point) -> float:
    result = estimate_throughput_config(point.training_config())
    if not result.valid or result.step_s is None:
        raise ValueError(f"calibration point {point.id}: the engine refuses it")
    return result.step_s


def solve(mxfp8: Point, nvfp4: Point) -> float | None:
    """The FP4 / FP8 GEMM rate at which the estimated step ratio of the pair equals the measured one; None when
    no rate does (the rest of the NVFP4 step alone is already slower than the measured step)."""
    target = _step_s(mxfp8) / measured_ratio(mxfp8, nvfp4)
    with fp4_over_fp8_as(1.0):
        at_1 = _step_s(nvfp4)
    with fp4_over_fp8_as(2.0):
        at_2 = _step_s(nvfp4)
    fp4_gemm = 2 * (at_1 - at_2)  # B: seconds of the FP4 GEMMs at the FP8 rate
    rest = at_1 - fp4_gemm
    if fp4_gemm <= 0 or target <= rest:
        return None
    return fp4_gemm / (target - rest)


def fp4_rate(corpus: Corpus) -> dict:
    """The file's content: the median solved rate over the measured pairs, the pairs' measured tokens/s ratios
    and each pair's solution (empty with fewer than MIN_PAIRS solvable pairs)."""
    solved = {}
    measured = {}
    for mx, nv in measured_pairs(corpus):
        x = solve(mx, nv)
        if x is not None:
            solved[nv.id] = round(x, 3)
            measured[nv.id] = round(measured_ratio(mx, nv), 3)
    if len(solved) < MIN_PAIRS:
        return {}
    return {
        "over_fp8": round(statistics.median(solved.values()), 3),
        "pairs": len(solved),
        "measured_nvfp4_over_mxfp8": measured,
        "solved": solved,
    }
