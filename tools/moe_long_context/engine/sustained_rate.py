"""The share of its nominal dense tensor-core peaks a GPU sustains in training, measured: ``sustained_rate.yaml``.

NVIDIA gives Blackwell (B200, GB200) and Blackwell Ultra (B300, GB300) the same dense BF16 and FP8 peaks, yet the
same model and settings train 1.1-1.2x faster on the Ultra GPU of each platform in Bridge's performance tables
(B300 and GB300 agree with each other and with the model). ``moe-lc eval calibrate --write`` derives the share from
those measured pairs alone (evals/calibration/report.py ``sustained_rate``); a GPU without enough pairs sustains its
peaks (1.0). The step-time model scales its GEMM rates by it (attention and the Mamba scan keep theirs: the pairs
are 4-8K runs, where GEMMs are most of the step); MFU keeps the nominal peak.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from importlib import resources

from ..model.yaml_data import load_data_yaml


@cache
def sustained_table() -> dict[str, dict]:
    return load_data_yaml(resources.files(__package__).joinpath("sustained_rate.yaml").read_text()) or {}


def sustained_fraction(gpu_id: str) -> float:
    """The measured share of the nominal peaks ``gpu_id`` sustains (1.0 where the corpus has no pairs for it)."""
    entry = sustained_table().get(gpu_id)
    return float(entry["fraction"]) if entry else 1.0


def why(gpu_id: str) -> str | None:
    """One sentence for the step-time assumptions, or None for a GPU at its peaks."""
    entry = sustained_table().get(gpu_id)
    if not entry:
        return None
    return (
        f"{gpu_id} runs its tensor cores at {entry['fraction']:.1%} of the nominal dense peaks: 1 / the median "
        f"{entry['against']} / {gpu_id} tokens/s ratio of {entry['pairs']} measured pairs with the same settings but "
        "the GPU and the microbatch size (engine/sustained_rate.yaml, from the calibration corpus)"
    )


# ------------------------------------------------------------------ NVFP4

_FP4_OVERRIDE: list[float] = []  # set only by fp4_over_fp8_as (the calibration's solve)


@cache
def fp4_table() -> dict:
    path = resources.files(__package__).joinpath("fp4_rate.yaml")
    return (load_data_yaml(path.read_text()) or {}) if path.is_file() else {}


def fp4_over_fp8() -> float | None:
    """NVFP4 GEMMs with their quantization, as a multiple of the same GPU's FP8 GEMM rate: solved from measured
    NVFP4 / MXFP8 pairs (``fp4_rate.yaml``, evals/calibration/fp4_rate.py); None without pairs (the GEMM
    efficiency of the nominal FP4 peak then)."""
    if _FP4_OVERRIDE:
        return _FP4_OVERRIDE[-1]
    value = fp4_table().get("over_fp8")
    return float(value) if value is not None else None


@contextmanager
def fp4_over_fp8_as(value: float) -> Iterator[None]:
    """Price NVFP4 GEMMs at ``value`` x the FP8 rate inside the block (the calibration solves for it)."""
    _FP4_OVERRIDE.append(value)
    try:
        yield
    finally:
        _FP4_OVERRIDE.pop()
