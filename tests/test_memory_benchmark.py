"""estimate_memory speed on the published layouts: ``pytest --benchmark-enable tests/test_memory_benchmark.py``
prints the timing table (the issue's target is well under 5 ms per call); skipped otherwise."""

from __future__ import annotations

import pytest

from moe_long_context.engine.representative import representative_layouts
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory

PUBLISHED = {layout.id: layout.config for layout in representative_layouts()}


@pytest.fixture
def timing_on(request):
    if not request.config.getoption("benchmark_enable"):
        pytest.skip("benchmarks run with --benchmark-enable")


@pytest.mark.parametrize("config", PUBLISHED.values(), ids=PUBLISHED.keys())
def test_estimate_memory_benchmark(timing_on, benchmark, config):
    result = benchmark(lambda: estimate_memory(EstimateMemoryRequest(**config)))
    assert result.fits
