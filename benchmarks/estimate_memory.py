"""Time estimate_memory per call on the seeds' layouts: ``.venv/bin/python benchmarks/estimate_memory.py``.

The whole tool runs each time (request validation, model and GPU lookup, every rule family, the memory
model for every PP rank, the result models), as an agent's call would.
"""

from __future__ import annotations

import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from moe_long_context.estimate import EstimateMemoryRequest, estimate_memory
from test_memory_calibration import DSV3_128K, DSV3_RECOMPUTE, QWEN_128K

CASES = {
    "DeepSeek-V3 128K, 256 H100, PP8 x VPP4": dict(DSV3_128K, **DSV3_RECOMPUTE),
    "Qwen3-235B 128K, 128 GB200, PP4 x VPP12": QWEN_128K,
}


def main(repeat: int = 7, number: int = 200) -> None:
    for name, config in CASES.items():
        estimate_memory(EstimateMemoryRequest(**config))  # warm the catalog caches
        runs = timeit.repeat(
            lambda c=config: estimate_memory(EstimateMemoryRequest(**c)), repeat=repeat, number=number
        )
        per_call = [r / number * 1e3 for r in runs]
        print(f"{name}: median {statistics.median(per_call):.2f} ms, best {min(per_call):.2f} ms per call")


if __name__ == "__main__":
    main()
