"""The speed check compares ratios, not seconds, and fails only past twice the baseline; the committed baseline
covers every benchmark job and tool, and the benchmark reports the machine and its reference."""

from __future__ import annotations

import json

from benchmarks import check, plan_layout
from benchmarks.machine import cpu_ratio, machine, reference_cpu_s


def test_a_ratio_fails_only_past_twice_its_baseline():
    baseline = {"warm pick_recompute": 0.3, "cold plan a": 8.0}
    assert check.regressions({"warm pick_recompute": 0.6, "cold plan a": 15.9}, baseline) == []
    problems = check.regressions({"warm pick_recompute": 0.61, "cold plan a": 16.1}, baseline)
    assert problems == [
        "warm pick_recompute: ratio 0.61, more than 2 x the baseline 0.3",
        "cold plan a: ratio 16.1, more than 2 x the baseline 8",
    ]
    assert check.regressions({}, {"cold plan a": 1.0}) == ["cold plan a: not measured"]


def test_the_baseline_covers_every_job_and_tool():
    ratios = json.loads(check.BASELINE.read_text())["ratios"]
    expected = {f"cold plan {job}" for job in plan_layout.JOBS} | {
        f"warm plan {job}" for job in plan_layout.JOBS
    }
    assert expected <= set(ratios)
    assert {"warm pick_recompute", "warm estimate_memory", "warm lint_config"} <= set(ratios)
    assert all(value > 0 for value in ratios.values())


def test_the_reference_and_the_machine_are_measured():
    info = machine()
    assert info["cores"] >= 1 and info["cpu"] and info["python"]
    assert 0 < reference_cpu_s(1) < 5
    seconds, ratio = cpu_ratio(lambda: sum(range(10_000)), 3)
    assert seconds > 0 and ratio > 0


def test_a_fast_call_is_timed_over_a_batch_of_calls():
    """One sub-millisecond call after the reference loop runs with cold caches (2-4x slower, varying): a sample
    repeats it for about SAMPLE_S of CPU and reports the time per call."""
    calls = []
    seconds, ratio = cpu_ratio(lambda: calls.append(1), 2)
    assert len(calls) > 1_000  # the warm-up call plus two batches of many calls
    assert 0 < seconds < 1e-4 and 0 < ratio < 1e-3


def test_ratios_keep_four_significant_digits():
    assert plan_layout._sig(0.0024567) == 0.002457 and plan_layout._sig(10.6349) == 10.63
