"""The calibration report and the data files it generates.

* ``stated_error``: per quantity group, the 90th percentile of |ratio - 1| over the counted rows (calibrated or
  unexplained), written to ``engine/stated_error.yaml``: the error estimate_* results state and the band within
  which plan_layout calls plans tied.
* ``overhead``: the allocator-cache fraction and the memory outside PyTorch, from the measured levels alone,
  written to ``memory/overhead.yaml`` (see memory/overhead.py).
* ``sustained_rate``: the share of its nominal dense peaks a Blackwell GPU sustains next to the Blackwell Ultra
  GPU of its platform (the same peaks on paper), from measured pairs alone, written to
  ``engine/sustained_rate.yaml`` (see engine/sustained_rate.py).
* ``summary_markdown`` / ``points_markdown``: the README's calibration section (summary by quantity, model and
  GPU; one line per point measured with the target software) and CALIBRATION.md (every row).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import cache
from importlib import resources

import yaml

from ...memory.overhead import dispatcher_key
from ...model.catalog import gpus
from .corpus import Corpus, Point, device_full, load_corpus, typical_runs
from .evaluate import BANDS, UNITS, Row

PERCENTILE = 0.90
MIN_PAIRS_PER_GPU = 3
MIN_ROWS_PER_FAMILY = 5  # a family's own spread is stated when it rests on at least this many counted rows
# The Blackwell Ultra GPU of each Blackwell platform: NVIDIA gives both the same dense BF16 and FP8 peaks.
ULTRA_SIBLING = {"b200": "b300", "gb200": "gb300"}


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), 0 for no values."""
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _spread(errs: list[float]) -> dict:
    return {
        "p90": round(percentile(errs, PERCENTILE), 3),
        "rows": len(errs),
        "median_abs": round(statistics.median(errs), 3) if errs else 0.0,
    }


def stated_error(rows: Iterable[Row]) -> dict[str, dict]:
    """Per quantity group: the 90th percentile of |ratio - 1| over the counted rows, overall and for each model
    family with at least MIN_ROWS_PER_FAMILY counted rows (a DeepSeek-V3 plan should not carry a Mamba hybrid's
    error, nor the reverse)."""
    rows = [r for r in rows if r.counted]
    out = {}
    for group in BANDS:
        errs: dict[str, list[float]] = defaultdict(list)
        for r in rows:
            if r.group == group:
                errs[r.family or "-"].append(abs(r.ratio - 1))
        every = [e for v in errs.values() for e in v]
        out[group] = {
            "all": _spread(every),
            "by_family": {f: _spread(v) for f, v in sorted(errs.items()) if len(v) >= MIN_ROWS_PER_FAMILY},
        }
    return out


def overhead(corpus: Corpus) -> dict:
    """allocator cache fraction and memory outside PyTorch from the measured (allocated, reserved, device) levels.

    The memory outside PyTorch is measured where a run gives its device level beside a reserved one, unless the
    device level is at the GPU's capacity (then the device was full and the difference only bounds it). Where
    no such measurement exists for a dispatcher it is bounded: no run can hold more outside PyTorch than its
    GPU leaves above its reserved pool, so the figure is the tightest such bound (when below the measured one).
    """
    usable = {g.id: g.usable_hbm_gib for g in gpus()}
    domain = {g.id: g.nvlink_domain for g in gpus()}

    def key(p: Point) -> str:  # the run's dispatcher, and whether its expert group leaves the NVLink domain
        c = p.config
        return dispatcher_key(
            c.get("dispatcher", "alltoall"), c.get("ep", 1) * c.get("etp", 1) > domain[c["gpu"]]
        )

    fractions: dict[str, list[float]] = defaultdict(list)
    outside: list[tuple[float, str]] = []
    censored: list[str] = []
    measured_dispatchers: set[str] = set()
    for p in corpus.points:
        m = p.measured
        if m.peak_allocated_gib and m.peak_reserved_gib:
            fractions[p.config["gpu"]].append(m.peak_reserved_gib / m.peak_allocated_gib - 1)
        if m.peak_device_mib:
            paired = [p] + [q for q in corpus.points if q.pairs_with == p.id]
            reserved = next(
                (q.measured.peak_reserved_gib for q in paired if q.measured.peak_reserved_gib), None
            )
            if reserved:
                partner = next(q.id for q in paired if q.measured.peak_reserved_gib)
                device = m.peak_device_mib / 1024
                if device_full(device, usable[p.config["gpu"]]):
                    censored.append(f"{p.id} with {partner} ({device:.2f} GiB: the device was full)")
                    continue
                outside.append((device - reserved, f"{p.id} with {partner}"))
                measured_dispatchers.add(key(p))
    every = [f for values in fractions.values() for f in values]
    by_gpu = {
        g: round(statistics.median(v), 4) for g, v in sorted(fractions.items()) if len(v) >= MIN_PAIRS_PER_GPU
    }
    bounds = [
        (round(usable[p.config["gpu"]] - p.measured.peak_reserved_gib, 2), p.id)
        for p in corpus.points
        if p.measured.peak_reserved_gib and key(p) not in measured_dispatchers
    ]
    if outside:
        table = {
            "all": round(statistics.median(v for v, _ in outside), 2),
            "pairs": len(outside),
            "evidence": "; ".join(why for _, why in outside),
            "dispatchers": sorted(measured_dispatchers),
        }
        if bounds and min(bounds)[0] < table["all"]:
            gib, pid = min(bounds)
            table["others"] = {"gib": gib, "evidence": pid}
    else:
        gib, pid = min(bounds)
        table = {"all": gib, "pairs": 0, "evidence": pid, "dispatchers": []}
    if censored:
        table["censored"] = censored
    return {
        "allocator_cache_fraction": {
            "all": round(statistics.median(every), 4),
            "by_gpu": by_gpu,
            "pairs": len(every),
            "pairs_by_gpu": {g: len(fractions[g]) for g in by_gpu},
        },
        "outside_pytorch_gib": table,
    }


def sustained_rate(corpus: Corpus) -> dict:
    """Per Blackwell GPU with at least MIN_PAIRS_PER_GPU measured pairs: 1 / the median of (tokens/s on its
    Blackwell Ultra sibling / tokens/s on it) over the pairs of runs of one model in one container whose settings
    differ in nothing but the GPU and the microbatch size. No engine estimate enters: the step-time model gives
    both GPUs of a pair the same time (equal peaks; it does not price the microbatch size), so the measured ratio
    is what the model misses. The microbatch is the Ultra run's larger one in all but one pair (the one with
    identical settings measured 1.22x), so part of the gap may be its GEMM size; the rest is the sustained rate."""

    def settings(p: Point) -> tuple:
        c = {k: v for k, v in p.config.items() if k not in ("gpu", "mbs")}
        return (p.model, p.container, repr(sorted(c.items())))

    by_settings: dict[tuple, dict[str, Point]] = defaultdict(dict)
    for p in typical_runs(corpus):
        by_settings[settings(p)][p.config["gpu"]] = p
    out: dict[str, dict] = {}
    for gpu, ultra in sorted(ULTRA_SIBLING.items()):
        pairs = [(g[ultra].measured.tokens_per_s_per_gpu / g[gpu].measured.tokens_per_s_per_gpu, g[gpu].id)
                 for g in by_settings.values() if gpu in g and ultra in g]  # fmt: skip
        if len(pairs) >= MIN_PAIRS_PER_GPU:
            out[gpu] = {
                "fraction": round(1 / statistics.median(r for r, _ in pairs), 3),
                "against": ultra,
                "pairs": len(pairs),
                "ratios": {pid: round(r, 3) for r, pid in sorted(pairs, key=lambda x: x[1])},
            }
    return out


@cache
def peer() -> dict[str, dict]:
    """Megatron Bridge 0.6.2's estimate_training_memory on the memory points (peer_bridge.yaml, written by
    ``python -m conformance.bridge_memory_peer`` in the conformance venv); empty when the file is absent."""
    path = resources.files(__package__).joinpath("peer_bridge.yaml")
    return (yaml.safe_load(path.read_text()) or {}).get("points", {}) if path.is_file() else {}


def _peer_cell(pid: str, rows: list[Row]) -> str:
    """Bridge's estimate against the level it describes: the allocated peak (it counts tensors only), else the
    lowest level measured."""
    total = peer().get(pid, {}).get("total_gib")
    measured = next(
        (r.measured for q in ("allocated", "reserved", "device") for r in rows if r.quantity == q), None
    )
    if total is None or measured is None:
        return "-"
    return f"{total:,.1f} ({total / measured:.2f})"


# --------------------------------------------------------------------------- markdown


def _status(row: Row) -> str:
    if row.listing is not None:
        return row.listing.reason.replace("_", " ")
    return "in band" if row.in_band else "**out of band**"


def _num(x: float | None, quantity: str) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if quantity in ("tokens_per_s", "tflops") and x >= 100 else f"{x:,.1f}"


def _url(corpus: Corpus, p: Point) -> str:
    """The source file at its commit, at the point's line(s)."""
    s = corpus.sources[p.source]
    line = str(p.line)
    path, lines = (f"{s.path}/{line.split(':')[0]}", line.split(":")[1]) if ":" in line else (s.path, line)
    anchor = "#L" + lines.replace("-", "-L")
    return f"https://github.com/{s.repo}/blob/{s.commit}/{path}{anchor}"


def _cite(corpus: Corpus, p: Point) -> str:
    s = corpus.sources[p.source]
    line = str(p.line)
    where = f"{s.path}/{line}" if "/" in line or "." in line.split(":")[0] else f"{s.path}:{line}"
    return f"{s.repo}@{s.commit[:7]}:{where}"


def _summary_line(label: str, rows: list[Row]) -> str:
    counted = [r for r in rows if r.counted]
    thr = [r.ratio for r in counted if r.group == "throughput"]
    mem = [r.ratio for r in counted if r.group == "memory"]
    band = sum(r.in_band for r in counted)
    unexplained = sum(r.listing is not None for r in counted)
    excluded = sum(r.primary and not r.counted for r in rows)
    med = lambda v: f"{statistics.median(v):.2f}" if v else "-"  # noqa: E731
    return f"| {label} | {len(counted)} | {band} | {unexplained} | {med(thr)} | {med(mem)} | {excluded} |"


def summary_markdown(rows: tuple[Row, ...], corpus: Corpus | None = None) -> str:
    corpus = corpus or load_corpus()
    err = stated_error(rows)
    points = {r.point.id for r in rows}
    models = {r.point.model for r in rows}
    gpus = {r.point.config["gpu"] for r in rows}
    reasons = Counter(r.listing.reason for r in rows if r.listing is not None and r.primary)
    out = [
        f"{len(points)} measured runs ({len(rows)} measured quantities) of {len(models)} models on "
        f"{len(gpus)} GPU types. Ratios are estimate / measured; a row counts when it was measured with the target "
        "software (Megatron Bridge 0.5-0.6 containers, r0.6.0-era cards and studies) and the model describes the "
        f"run; its band is {BANDS['throughput'][0]}-{BANDS['throughput'][1]} for throughput and "
        f"{BANDS['memory'][0]}-{BANDS['memory'][1]} for memory. Listed rows: "
        + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(reasons.items()))
        + ".",
        "",
        "Counted: one throughput row per run (tokens/s, or TFLOP/s where the source gives only that) and every memory "
        "level, measured with the target software and not excluded; unexplained misses count. Not counted: the listed "
        "reasons other than unexplained.",
        "",
        "| quantity | counted | in band | median ratio | stated error (p90 of abs(ratio - 1)) |",
        "|---|---:|---:|---:|---:|",
    ]
    for group in BANDS:
        counted = [r for r in rows if r.group == group and r.counted]
        med = f"{statistics.median(r.ratio for r in counted):.2f}" if counted else "-"
        families = ", ".join(f"{f} {e['p90']:.0%}" for f, e in err[group]["by_family"].items())
        out.append(
            f"| {group} | {len(counted)} | {sum(r.in_band for r in counted)} | {med} | "
            f"{err[group]['all']['p90']:.0%} (by family: {families or 'none with 5 rows'}) |"
        )
    for title, key in (("model", lambda r: r.point.model), ("GPU", lambda r: r.point.config["gpu"])):
        out += ["", f"| {title} | counted | in band | unexplained | median throughput ratio | median memory ratio | "
                "not counted |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        groups: dict[str, list[Row]] = defaultdict(list)
        for r in rows:
            groups[key(r)].append(r)
        out += [_summary_line(f"`{k}`", v) for k, v in sorted(groups.items())]
    return "\n".join(out)


def _point_cells(rows: list[Row]) -> tuple[str, str, str]:
    def cell(quantities: tuple[str, ...]) -> str:
        parts = []
        for r in rows:
            if r.quantity in quantities:
                ratio = f" ({r.ratio:.2f})" if r.ratio is not None else ""
                parts.append(f"{_num(r.measured, r.quantity)} -> {_num(r.estimate, r.quantity)}{ratio}")
        return "; ".join(parts) or "-"

    statuses = []
    for r in rows:
        s = _status(r)
        if s not in statuses:
            statuses.append(s)
    return cell(("tokens_per_s",)), cell(("allocated", "reserved", "device")), ", ".join(statuses)


def points_markdown(rows: tuple[Row, ...], target_only: bool, corpus: Corpus | None = None) -> str:
    """One line per point: tokens/s/GPU and memory (GiB) measured -> estimated (ratio), and the status."""
    corpus = corpus or load_corpus()
    by_point: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if target_only and r.listing is not None and r.listing.reason == "older_software":
            continue
        by_point[r.point.id].append(r)
    out = [
        "| point | model | GPU | tokens/s/GPU measured -> estimated (ratio) | peak GiB measured -> estimated (ratio) | "
        "Bridge estimator GiB (ratio) | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for pid, prow in by_point.items():
        p = prow[0].point
        tok, mem, status = _point_cells(prow)
        out.append(f"| [{pid}]({_url(corpus, p)}) | `{p.model}` | "
                   f"{p.config['gpu']} | {tok} | {mem} | {_peer_cell(pid, prow)} | {status} |")  # fmt: skip
    return "\n".join(out)


def rows_markdown(rows: tuple[Row, ...], corpus: Corpus | None = None) -> str:
    """Every measured quantity with its source line, estimate, ratio and the reason when it is listed."""
    corpus = corpus or load_corpus()
    out = [
        "| point | source | quantity | measured | estimate | ratio | Bridge estimator | status | why (listed rows) |",
        "|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        why = r.listing.why if r.listing is not None else r.detail
        ratio = f"{r.ratio:.3f}" if r.ratio is not None else "-"
        bridge = peer().get(r.point.id, {}).get("total_gib") if r.group == "memory" else None
        bridge_cell = f"{bridge:,.1f} ({bridge / r.measured:.2f})" if bridge is not None else "-"
        out.append(
            f"| {r.point.id} | {_cite(corpus, r.point)} | {r.quantity} ({UNITS[r.quantity]}) | "
            f"{_num(r.measured, r.quantity)} | {_num(r.estimate, r.quantity)} | {ratio} | {bridge_cell} | "
            f"{_status(r)} | {why.replace('|', '/')} |"
        )
    return "\n".join(out)
