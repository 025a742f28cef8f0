"""The server benchmark runs and reports what it promises (the numbers themselves are not asserted)."""

from __future__ import annotations

import json

import pytest
from benchmarks import bench_server

pytestmark = pytest.mark.slow


def test_benchmark_reports_cold_start_and_per_tool_percentiles(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench_server.main(["--calls", "20", "--starts", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    cold = report["cold_start_ms"]
    assert cold["median"] > 0 and cold["baseline_median"] > 0
    assert cold["ratio"] == pytest.approx(cold["median"] / cold["baseline_median"])
    assert set(report["tool_call_ms"]) == set(bench_server.tool_arguments()) >= {"size_cp", "check_dp_budget"}
    assert all(0 < row["p50"] <= row["p99"] and row["calls"] == 20 for row in report["tool_call_ms"].values())
    out = capsys.readouterr().out
    assert "p99 ms" in out and "minimal mcp server" in out
