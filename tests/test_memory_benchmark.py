"""estimate_memory speed: timed only with ``pytest --benchmark-enable tests/test_memory_benchmark.py``."""

from __future__ import annotations

import pytest

from moe_long_context.estimate import EstimateMemoryRequest, estimate_memory
from test_memory_calibration import DSV3_128K, DSV3_RECOMPUTE, QWEN_128K


@pytest.fixture
def timing_on(request):
    if not request.config.getoption("benchmark_enable"):
        pytest.skip("benchmarks run with --benchmark-enable")


@pytest.mark.parametrize(
    "config", [dict(DSV3_128K, **DSV3_RECOMPUTE), QWEN_128K], ids=["dsv3-128k", "qwen3-128k"]
)
def test_estimate_memory_is_well_under_5_ms(timing_on, benchmark, config):
    result = benchmark(lambda: estimate_memory(EstimateMemoryRequest(**config)))
    assert result.fits
    assert benchmark.stats.stats.median < 0.005
