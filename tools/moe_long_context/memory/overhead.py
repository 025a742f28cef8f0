"""Memory a rank uses beyond the tensors the model counts, split the way the measurements see it.

A run's memory has three levels: PyTorch's allocated tensors (what the tensor inventory counts), PyTorch's
reserved pool (allocated plus the blocks its caching allocator keeps for reuse, fragmentation included), and
device memory (the pool plus what lives outside PyTorch: the CUDA context, NCCL communicator buffers, NVSHMEM
and DeepEP/HybridEP buffers, library workspaces). Two numbers carry the model from one level to the next:

* ``allocator_cache_fraction``: reserved / allocated - 1, the median over the measured (allocated, reserved)
  pairs of the calibration corpus for that GPU (all GPUs when it has fewer than three pairs);
* ``outside_pytorch_gib``: device - reserved, the median over the measured (reserved, device) pairs, for the
  dispatchers those pairs ran; a pair whose device level is the GPU's capacity only bounds it (the device was
  full). Where nothing is measured, at most what the tightest measured run leaves between its reserved pool and
  the device: the GLM-5.2 pair reads 80,999 MiB, a full H100, and an H100 run that reserves all but 8.9 GiB
  cannot hold more outside PyTorch than that.

Both are written by ``moe-lc eval calibrate --write`` into ``overhead.yaml`` from the measurements alone (no
engine estimate enters them), so they move only when the corpus does. ``overhead_gib`` in a request replaces
both with one fixed number.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml

CACHE_TERM = "allocator cache (reserved, not allocated)"
OUTSIDE_TERM = "memory outside PyTorch (CUDA context, NCCL, comm libraries)"
FIXED_TERM = "fixed overhead"
OVERHEAD_TERMS = (CACHE_TERM, OUTSIDE_TERM, FIXED_TERM)


@cache
def measured_overhead() -> dict[str, Any]:
    """The generated overhead table (see the module docstring)."""
    return yaml.safe_load(resources.files(__package__).joinpath("overhead.yaml").read_text())


def allocator_cache_fraction(gpu_id: str | None) -> float:
    table = measured_overhead()["allocator_cache_fraction"]
    return float(table["by_gpu"].get(gpu_id, table["all"]))


def dispatcher_key(dispatcher: str, across_nodes: bool) -> str:
    """How the overhead table names a dispatcher's runs: DeepEP's RDMA buffers (outside PyTorch) exist only when
    the expert group leaves the NVLink domain, so a run inside it is keyed apart ('<dispatcher>@nvlink')."""
    return dispatcher if across_nodes else f"{dispatcher}@nvlink"


def outside_pytorch_gib(dispatcher: str | None = None, across_nodes: bool = True) -> float:
    """Measured for the dispatcher keys of the measured pairs (and when no dispatcher is named); bounded for the
    others."""
    table = measured_overhead()["outside_pytorch_gib"]
    others = table.get("others")
    if (
        dispatcher is None
        or others is None
        or dispatcher_key(dispatcher, across_nodes) in table["dispatchers"]
    ):
        return float(table["all"])
    return float(others["gib"])


def why(gpu_id: str | None, dispatcher: str | None = None, across_nodes: bool = True) -> str:
    """One sentence on where the two numbers come from, for the result's assumptions."""
    table = measured_overhead()
    cache_ = table["allocator_cache_fraction"]
    outside = table["outside_pytorch_gib"]
    used = "this GPU's" if gpu_id in cache_["by_gpu"] else "all GPUs'"
    gib = outside_pytorch_gib(dispatcher, across_nodes)
    if outside["pairs"] and gib == float(outside["all"]):
        where = (
            f"{gib:.2f} GiB outside PyTorch (median device - reserved of {outside['pairs']} measured pair(s), "
            f"{'/'.join(outside.get('dispatchers', ()))}: {outside['evidence']})"
        )
    else:
        evidence = outside["others"]["evidence"] if outside["pairs"] else outside["evidence"]
        where = f"at most {gib:.2f} GiB outside PyTorch (what {evidence} leaves above its reserved pool)"
    return (
        f"allocator cache {allocator_cache_fraction(gpu_id):.1%} of the tensors (median reserved/allocated - 1 "
        f"of {used} {cache_['pairs_by_gpu'].get(gpu_id, cache_['pairs'])} measured pairs in the calibration "
        f"corpus) plus {where}; set overhead_gib to replace both"
    )
