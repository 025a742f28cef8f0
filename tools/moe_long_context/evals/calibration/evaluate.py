"""Each measured quantity of the corpus against the engine's estimate for the same configuration.

Quantities: ``tokens_per_s`` (per GPU; a measured step time becomes GBS x seq / step / GPUs), ``tflops``
(model TFLOP/s per GPU: the engine counts Megatron-LM's FLOPs, the source its own), and the three memory
levels: ``allocated`` (the tensors), ``reserved`` (plus the allocator cache) and ``device`` (plus the memory
outside PyTorch), each the most loaded rank's. The ratio is estimate / measured. A row is in its band, or
listed with the reason it is not calibrated; ``unexplained`` rows stay in the error statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

from ...engine.context import build_context
from ...errors import InputError
from ...memory.rank_memory import memory_model
from ...memory.terms import GIB
from ...tools.estimate_throughput import estimate_throughput_config
from .corpus import EXCLUDED, Corpus, Listing, Point, device_full, load_corpus

BANDS = {"throughput": (0.85, 1.15), "memory": (0.90, 1.10)}
GROUP = {"tokens_per_s": "throughput", "tflops": "throughput", "allocated": "memory", "reserved": "memory",
         "device": "memory"}  # fmt: skip
UNITS = {"tokens_per_s": "tok/s/GPU", "tflops": "TFLOP/s/GPU", "allocated": "GiB", "reserved": "GiB",
         "device": "GiB"}  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One measured quantity of one point, estimated."""

    point: Point
    quantity: str
    measured: float
    estimate: float | None
    listing: Listing | None
    detail: str = ""  # e.g. the FLOPs-per-token ratio of a TFLOP/s row
    family: str | None = None  # the model's architecture family (None when the engine does not load it)
    primary: bool = True  # False for a TFLOP/s row beside a tokens/s row of the same run (the same step time)

    @property
    def group(self) -> str:
        return GROUP[self.quantity]

    @property
    def ratio(self) -> float | None:
        return None if self.estimate is None else self.estimate / self.measured

    @property
    def in_band(self) -> bool:
        low, high = BANDS[self.group]
        return self.ratio is not None and low <= self.ratio <= high

    @property
    def counted(self) -> bool:
        """Part of the error statistics: calibrated, or listed as an unexplained miss (one throughput row per run:
        its tokens/s, or its TFLOP/s when that is all the source gives)."""
        return (
            self.primary
            and self.ratio is not None
            and (self.listing is None or self.listing.reason not in EXCLUDED)
        )


def _measured_tokens(point: Point) -> float | None:
    m, c = point.measured, point.config
    if m.tokens_per_s_per_gpu is not None:
        return m.tokens_per_s_per_gpu
    if m.step_s is not None and c.get("gbs") and c.get("seq_len"):
        return c["gbs"] * c["seq_len"] / m.step_s / c["num_gpus"]
    return None


def _listing(corpus: Corpus, point: Point, group: str) -> Listing | None:
    if group in point.listed:
        return point.listed[group]
    source = corpus.source_of(point)
    if not source.target:
        return Listing(
            reason="older_software",
            why=f"Measured with {source.software}; the engine models Megatron Bridge 0.6.2 on Megatron Core 0.19.2.",
        )
    return None


def _throughput_rows(corpus: Corpus, point: Point) -> list[Row]:
    tokens, tflops = _measured_tokens(point), point.measured.tflops_per_gpu
    if tokens is None and tflops is None:
        return []
    listing = _listing(corpus, point, "throughput")
    cfg = point.training_config()
    result = estimate_throughput_config(cfg)
    if not result.valid:
        codes = ", ".join(f.code for f in result.findings if f.severity.value == "error")
        raise InputError.plain(
            f"calibration point {point.id}: the engine refuses its configuration ({codes})"
        )
    rows = []
    est_tokens = result.tokens_per_s / cfg.num_gpus
    if tokens is not None:
        rows.append(Row(point, "tokens_per_s", tokens, est_tokens, listing))
    if tflops is not None:
        detail, tf_listing = "", listing
        if tokens is not None:
            flops_ratio = (result.tflops_per_gpu / est_tokens) / (tflops / tokens)
            detail = f"FLOPs per token, engine / source: {flops_ratio:.2f}"
            low, high = BANDS["throughput"]
            in_band = low <= result.tflops_per_gpu / tflops <= high
            if listing is None and not in_band and low <= est_tokens / tokens <= high:
                tf_listing = Listing(
                    reason="flops_counted_differently",
                    why=f"Tokens/s agree; the engine counts Megatron-LM's FLOPs per token, {flops_ratio:.2f} x the "
                    "source's count.",
                )
        rows.append(
            Row(point, "tflops", tflops, result.tflops_per_gpu, tf_listing, detail, primary=tokens is None)
        )
    return rows


def _memory_rows(corpus: Corpus, point: Point) -> list[Row]:
    m = point.measured
    wanted = {"allocated": m.peak_allocated_gib, "reserved": m.peak_reserved_gib,
              "device": m.peak_device_mib / 1024 if m.peak_device_mib else None}  # fmt: skip
    wanted = {k: v for k, v in wanted.items() if v is not None}
    if not wanted:
        return []
    ctx = build_context(point.training_config())
    model = memory_model(ctx)
    if model is None:
        raise InputError.plain(f"calibration point {point.id}: no memory estimate (layout or split errors)")
    peak = model.peak_rank
    levels = {"allocated": peak.allocated, "reserved": peak.reserved, "device": peak.total}
    listing = _listing(corpus, point, "memory")
    usable = ctx.gpu.usable_hbm_gib
    return [_at_capacity(Row(point, q, v, levels[q] / GIB, listing), usable) for q, v in wanted.items()]


def _at_capacity(row: Row, usable: float) -> Row:
    """A device level at the GPU's capacity says the run filled the card, not what it needed: an estimate below
    it agrees with it, and the row is listed as such (one above it is a miss and stays as it is)."""
    full = row.quantity == "device" and device_full(row.measured, usable)
    if not full or row.estimate is None or row.estimate > row.measured:
        return row
    why = (
        f"The device level is the GPU's capacity ({row.measured:.1f} of {usable:.1f} GiB usable): the run filled "
        f"the card, which bounds what it needs from above; the estimate, {row.estimate:.1f} GiB, is below it."
    )
    return replace(row, listing=Listing(reason="at_capacity", why=why))


def _not_loadable(corpus: Corpus, point: Point, exc: InputError) -> list[Row]:
    m = point.measured
    values = {"tokens_per_s": _measured_tokens(point), "tflops": m.tflops_per_gpu,
              "allocated": m.peak_allocated_gib, "reserved": m.peak_reserved_gib,
              "device": m.peak_device_mib / 1024 if m.peak_device_mib else None}  # fmt: skip
    listing = Listing(
        reason="model_not_loadable", why=f"The engine does not load {point.model!r}: {exc}"[:300]
    )
    primary = {"tflops": values["tokens_per_s"] is None}
    return [
        Row(point, q, v, None, listing, primary=primary.get(q, True))
        for q, v in values.items()
        if v is not None
    ]


def evaluate_point(corpus: Corpus, point: Point) -> list[Row]:
    try:
        family = build_context(point.training_config()).model.family
    except InputError as exc:
        if exc.field == "model":
            return _not_loadable(corpus, point, exc)
        raise InputError.plain(f"calibration point {point.id}: {exc}") from None
    rows = _throughput_rows(corpus, point) + _memory_rows(corpus, point)
    return [replace(r, family=family) for r in rows]


@cache
def evaluate() -> tuple[Row, ...]:
    """Every row of the corpus (cached: the corpus is package data)."""
    corpus = load_corpus()
    return tuple(row for point in corpus.points for row in evaluate_point(corpus, point))
