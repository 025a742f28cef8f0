"""Time estimate_memory per call on the seeds' layouts: ``.venv/bin/python benchmarks/estimate_memory.py``.

The whole tool runs each time (request validation, model and GPU lookup, every rule family, the memory
model for every PP rank, the result models), as an agent's call would.
"""

from __future__ import annotations

import argparse
import statistics
import timeit

from moe_long_context.engine.representative import representative_layouts
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory

CASES = {layout.title: layout.config for layout in representative_layouts()}


def main(repeat: int = 7, number: int = 200) -> None:
    for name, config in CASES.items():
        estimate_memory(EstimateMemoryRequest(**config))  # warm the catalog caches
        runs = timeit.repeat(
            lambda c=config: estimate_memory(EstimateMemoryRequest(**c)), repeat=repeat, number=number
        )
        per_call = [r / number * 1e3 for r in runs]
        print(f"{name}: median {statistics.median(per_call):.2f} ms, best {min(per_call):.2f} ms per call")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds per layout")
    parser.add_argument("--number", type=int, default=200, help="calls per round")
    ns = parser.parse_args()
    main(ns.repeat, ns.number)
