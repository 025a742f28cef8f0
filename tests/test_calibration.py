"""The calibration: every public measurement in the corpus against the engine, its bands, and the data it generates.

The corpus is tools/moe_long_context/evals/calibration/*.yaml; `moe-lc eval calibrate --write` regenerates the
README section, CALIBRATION.md, the stated error (engine/stated_error.yaml) and the measured memory overhead
(memory/overhead.yaml). These tests fail when a ratio leaves its band without a listed reason, when a generated
file is stale, or when the coverage the issue asks for is lost.
"""

from __future__ import annotations

import statistics

import pytest
import yaml

from moe_long_context.engine.stated_error import stated_error
from moe_long_context.errors import InputError
from moe_long_context.evals.calibration import corpus as corpus_module
from moe_long_context.evals.calibration import generate
from moe_long_context.evals.calibration.corpus import EXCLUDED, Point, load_corpus
from moe_long_context.evals.calibration.evaluate import BANDS, evaluate
from moe_long_context.evals.calibration.report import overhead, percentile
from moe_long_context.memory.overhead import allocator_cache_fraction, outside_pytorch_gib

ROWS = evaluate()
CORPUS = load_corpus()


def test_coverage_at_least_40_estimated_points_8_models_4_gpus():
    estimated = {r.point.id for r in ROWS if r.ratio is not None}
    models = {r.point.model for r in ROWS if r.ratio is not None}
    gpus = {r.point.config["gpu"] for r in ROWS if r.ratio is not None}
    assert len(estimated) >= 40 and len(models) >= 8 and len(gpus) >= 4, (len(estimated), models, gpus)
    # every Megatron Bridge performance-summary MoE row is a point, current and archived
    assert sum(p.source == "bridge-perf-current" for p in CORPUS.points) == 18
    assert sum(p.source == "bridge-perf-archive" for p in CORPUS.points) == 170


@pytest.mark.parametrize("group", list(BANDS))
def test_every_counted_ratio_is_in_its_band_or_listed_with_a_reason(group):
    low, high = BANDS[group]
    outside = [r for r in ROWS if r.group == group and r.ratio is not None and not low <= r.ratio <= high]
    unlisted = [(r.point.id, r.quantity, round(r.ratio, 3)) for r in outside if r.listing is None]
    assert not unlisted, unlisted


def test_an_unexplained_listing_is_a_real_miss():
    """A point's group listed as unexplained has a row out of its band: a fix that brings them all in removes the
    listing (a listing covers a point's whole group, e.g. its allocated and reserved memory)."""
    groups: dict[tuple[str, str], list[bool]] = {}
    for r in ROWS:
        if r.listing and r.listing.reason == "unexplained" and r.ratio is not None:
            groups.setdefault((r.point.id, r.group), []).append(r.in_band)
    stale = [key for key, in_band in groups.items() if all(in_band)]
    assert groups and not stale, stale


def test_the_generated_files_match_the_corpus():
    assert not generate.stale(), "run `moe-lc eval calibrate --write`"


def test_glm52_200k_device_peak_within_10_percent():
    """81,005 MiB peak observed GPU memory (r0.6.0 glm5-2/card.yaml:372) against the engine's device level."""
    row = next(r for r in ROWS if r.point.id == "card-glm-5.2-sft-200k-h100-608" and r.quantity == "device")
    assert row.measured == pytest.approx(81005 / 1024)
    assert 0.90 <= row.ratio <= 1.10
    # 79.1 GiB is the card's usable capacity: the run filled it, so the row is listed and leaves the statistics
    assert (
        row.listing.reason == "at_capacity"
        and not row.counted
        and "79.1 of 79.1 GiB usable" in row.listing.why
    )


def test_a_device_level_at_capacity_is_listed_only_when_the_estimate_is_below_it():
    from dataclasses import replace

    from moe_long_context.evals.calibration.evaluate import _at_capacity

    row = next(r for r in ROWS if r.point.id == "card-glm-5.2-pretrain-h100-352" and r.quantity == "device")
    assert row.listing.reason == "at_capacity" and row.estimate == pytest.approx(66.5, abs=0.05)
    above = replace(row, estimate=85.0, listing=None)  # an estimate over a full card is a miss: left as it is
    usable = 79.11  # H100's usable HBM (catalog)
    assert _at_capacity(above, usable).listing is None
    short = replace(row, measured=70.0, listing=None)  # a device level below capacity is a measurement
    assert _at_capacity(short, usable).listing is None


def test_the_stated_error_is_the_p90_of_the_counted_rows():
    for group in BANDS:
        counted = [abs(r.ratio - 1) for r in ROWS if r.counted and r.group == group]
        assert stated_error(group) == pytest.approx(round(percentile(counted, 0.9), 3))
        for family in {r.family for r in ROWS if r.counted and r.group == group}:
            own = [abs(r.ratio - 1) for r in ROWS if r.counted and r.group == group and r.family == family]
            expected = percentile(own, 0.9) if len(own) >= 5 else percentile(counted, 0.9)
            assert stated_error(group, family) == pytest.approx(round(expected, 3)), family


def test_percentile_by_hand():
    assert percentile([0.1, 0.2, 0.3, 0.4], 0.9) == pytest.approx(0.37)  # 0.3 + 0.7 x (0.4 - 0.3)
    assert percentile([], 0.9) == 0.0


def test_the_overhead_comes_from_the_measured_levels_alone():
    """Median of reserved / allocated - 1 per GPU (H100: GLM-5.2, Nemotron-3 Super x2, Nemotron-3.5 Lightning x2,
    Gemma-4; a ratio, whatever the unit). The one device-level pair (GLM-5.2: 80,999 MiB device beside 69.684 GB
    reserved as Bridge prints it) is a full H100, so it only bounds the memory outside PyTorch; the tightest bound
    is Lightning's 16-H100 run, 75.34 GB reserved of the 79.11 GiB an H100 can allocate."""
    h100 = [69.684 / 65.230, 70.336 / 58.079, 69.344 / 59.0, 75.34 / 72.066, 73.893 / 68.547, 72.356 / 65.223]
    assert allocator_cache_fraction("h100") == pytest.approx(statistics.median(h100) - 1, abs=1e-4)
    gib = 1e9 / 2**30
    table = overhead(CORPUS)["outside_pytorch_gib"]
    assert table["pairs"] == 0 and table["censored"][0].startswith("card-glm-5.2-pretrain-h100-352")
    assert 80999 / 1024 > 79.11 - 0.05  # the device was full
    assert outside_pytorch_gib() == pytest.approx(79.11 - 75.34 * gib, abs=0.01) == 8.94
    for dispatcher in ("flex-deepep", "flex-hybridep", "alltoall"):
        assert outside_pytorch_gib(dispatcher) == outside_pytorch_gib(dispatcher, across_nodes=False) == 8.94
    assert overhead(CORPUS)["allocator_cache_fraction"]["pairs_by_gpu"]["h100"] == 6


def test_bridge_memory_figures_are_read_as_the_gb_bridge_prints():
    """Bridge's report_memory divides bytes by 1e9 (training/utils/train_utils.py:1287-1294): the cards' 58.079
    (Nemotron-3 Super, allocated) is 54.09 GiB."""
    card = next(p for p in CORPUS.points if p.id == "card-nemotron-3-super-pretrain-h100-64")
    assert card.measured.peak_allocated_gib == pytest.approx(58.079e9 / 2**30, abs=1e-3)
    assert card.measured.peak_allocated_gib == pytest.approx(54.091, abs=1e-3)
    assert CORPUS.sources["bridge-cards"].memory_unit == "GB"


def test_older_software_is_listed_from_the_container():
    rows = [r for r in ROWS if r.point.container == "26.04.01" and r.ratio is not None]
    assert rows and all(r.listing is not None and r.listing.reason in EXCLUDED for r in rows)
    assert not any(r.counted for r in rows)
    current = [r for r in ROWS if r.point.container == "26.08" and r.ratio is not None]
    assert any(r.counted for r in current)


def test_a_model_the_engine_does_not_load_is_listed_not_an_error():
    rows = [r for r in ROWS if r.point.model == "deepseek-v4-flash"]
    assert rows and all(r.listing.reason == "model_not_loadable" and r.estimate is None for r in rows)


def test_a_bad_point_is_refused_with_its_id_and_field(monkeypatch):
    raw = {"id": "bad-point", "source": "bridge-cards", "line": 1, "model": "deepseek-v3",
           "config": {"gpu": "h100", "num_gpus": 8, "tp": 0}, "measured": {"step_s": 1.0}}  # fmt: skip
    with pytest.raises(ValueError, match=r"config\.tp"):
        Point(**raw)
    with pytest.raises(ValueError, match="must not repeat model"):
        Point(**{**raw, "config": {"gpu": "h100", "num_gpus": 8, "model": "x"}})

    def fake_read(name):
        if name == "sources.yaml":
            return yaml.safe_load(
                corpus_module.resources.files(corpus_module.__package__).joinpath(name).read_text()
            )
        return [{**raw, "config": {"gpu": "h100", "num_gpus": 8, "tpp": 2}}]

    monkeypatch.setattr(corpus_module, "_read", fake_read)
    load_corpus.cache_clear()
    try:
        with pytest.raises(InputError, match="bad-point"):
            load_corpus()
    finally:
        load_corpus.cache_clear()


def test_every_point_cites_a_known_source_and_line():
    for p in CORPUS.points:
        assert p.source in CORPUS.sources and str(p.line), p.id
        if p.container:
            assert p.container in CORPUS.containers, p.id


def test_cli_calibrate_check_and_summary(capsys):
    from moe_long_context.cli import main

    assert main(["eval", "calibrate", "--check"]) == 0
    assert main(["eval", "calibrate"]) == 0
    out = capsys.readouterr().out
    assert "stated error" in out and "| throughput |" in out


def _conformance_dir():
    import os
    from pathlib import Path

    root = Path(
        os.environ.get(
            "MOE_LC_CONFORMANCE_DIR", Path(__file__).resolve().parents[1] / "build" / "conformance"
        )
    )
    return root if (root / "venv" / "bin" / "python").exists() and (root / "bridge").is_dir() else None


@pytest.mark.skipif(
    _conformance_dir() is None, reason="no conformance venv (make conformance, or MOE_LC_CONFORMANCE_DIR)"
)
def test_the_bridge_estimator_numbers_are_current():
    """peer_bridge.yaml is what Megatron Bridge 0.6.2's estimate_training_memory gives today, run on the CPU."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    conf = _conformance_dir()
    done = subprocess.run(
        [str(conf / "venv" / "bin" / "python"), "-m", "conformance.bridge_memory_peer", "--check",
         "--conformance", str(conf)],
        cwd=root, env={"PYTHONPATH": f"{root / 'tools'}:{root}", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_bridge_estimator_is_beside_every_memory_point_it_can_take():
    from moe_long_context.evals.calibration.report import peer

    memory_points = {r.point.id for r in ROWS if r.group == "memory" and r.estimate is not None}
    assert memory_points <= set(peer()), memory_points - set(peer())
    glm = peer()["card-glm-5.2-sft-200k-h100-608"]
    assert glm["total_gib"] == pytest.approx(
        glm["weights_and_optimizer_gib"] + glm["activation_gib"], abs=0.002
    )


def test_blackwell_sustains_the_measured_share_of_its_nominal_peaks():
    """B200 and GB200 have B300's and GB300's dense peaks on paper; the corpus's pairs (one model, one container,
    the same settings but the GPU and the microbatch) measure the Ultra GPU 1.16x (GB300) and 1.13x (B300) faster,
    1.22x in the one GB200/GB300 pair with identical settings. The step-time model runs B200/GB200 GEMMs at
    1 / that median, and the MFU keeps the nominal peak."""
    from moe_long_context.engine.step_time import GEMM_EFFICIENCY, _gemm_rate, mfu_denominator
    from moe_long_context.engine.sustained_rate import sustained_fraction
    from moe_long_context.evals.calibration.corpus import load_corpus
    from moe_long_context.evals.calibration.report import sustained_rate
    from moe_long_context.model.catalog import load_gpu

    table = sustained_rate(load_corpus())
    assert set(table) == {"b200", "gb200"} and table["gb200"]["against"] == "gb300"
    assert (
        table["gb200"]["pairs"] == 14
        and table["gb200"]["ratios"]["perf-25.11-qwen3-30b-a3b-gb200-mxfp8-8"] == 1.217
    )
    ratios = sorted(table["gb200"]["ratios"].values())
    assert table["gb200"]["fraction"] == round(1 / ((ratios[6] + ratios[7]) / 2), 3) == 0.862
    assert table["b200"]["fraction"] == 0.881 and sustained_fraction("gb200") == 0.862
    gb200, gb300 = load_gpu("gb200"), load_gpu("gb300")
    assert _gemm_rate(gb200, "mxfp8") == pytest.approx(5000e12 * GEMM_EFFICIENCY["fp8"] * 0.862)
    assert _gemm_rate(gb300, "mxfp8") == pytest.approx(5000e12 * GEMM_EFFICIENCY["fp8"])
    assert sustained_fraction("h100") == 1.0 and mfu_denominator(gb200) == 5000
