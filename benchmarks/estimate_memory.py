"""Time estimate_memory per call on the published layouts: ``.venv/bin/python -m benchmarks.estimate_memory``.

The whole tool runs each time (request validation, model and GPU lookup, every rule family, the memory
model for every PP rank, the result models), as an agent's call would. Each median is also a ratio to the
reference work of benchmarks/machine.py (CPU), paired call by call.
"""

from __future__ import annotations

import argparse

from benchmarks.machine import cpu_ratio, describe, machine, reference_cpu_s

from moe_long_context.engine.representative import representative_layouts
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory

CASES = {layout.title: layout.config for layout in representative_layouts()}


def main(repeat: int = 50) -> None:
    print(describe(machine(), reference_cpu_s()))
    for name, config in CASES.items():
        s, ratio = cpu_ratio(lambda c=config: estimate_memory(EstimateMemoryRequest(**c)), repeat)
        print(f"{name}: median {s * 1e3:.2f} ms CPU per call, ratio {ratio:.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50, help="timed calls per layout")
    main(parser.parse_args().repeat)
