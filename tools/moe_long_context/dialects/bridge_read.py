"""Which Megatron Bridge keys the engine reads; every other key is accepted as written and listed as not checked.

Bridge 0.6.2 applies overrides with no conversion or type check (training/utils/omegaconf_utils.py), so only
a value the engine itself reads has to be one it (and Megatron) can use.
"""

from __future__ import annotations

from functools import cache

from .tables import dialect_table

# Keys read by the composite readers below (besides the dialect table's own keys).
_COMPOSITE_KEYS = frozenset({
    "model.moe_token_dispatcher_type", "model.moe_flex_dispatcher_backend", "model.moe_enable_deepep",
    "mixed_precision", "mixed_precision.fp8", "mixed_precision.fp8_recipe", "mixed_precision.fp4",
    "mixed_precision.fp4_recipe", "model.fp8", "model.fp8_recipe", "model.fp4", "model.fp4_recipe",
    "optimizer.optimizer_cpu_offload", "optimizer.optimizer_offload_fraction",
    "model.fine_grained_activation_offloading", "model.offload_modules", "model.enable_cuda_graph",
    "model.external_cuda_graph", "model.cross_entropy_loss_fusion", "model.cross_entropy_fusion_impl",
    "model.moe_layer_recompute", "ddp.grad_reduce_in_fp32", "mixed_precision.grad_reduce_in_fp32",
})  # fmt: skip


def engine_reads(key: str) -> bool:
    """Whether the engine reads this Bridge key (every other key is listed as not checked)."""
    return key in _COMPOSITE_KEYS or key in _table_keys()


@cache
def _table_keys() -> frozenset[str]:
    """Every Bridge key the dialect table maps to a field: its key, the keys it also reads, deprecated names."""
    keys: set[str] = set()
    for spec in dialect_table()["fields"].values():
        b = spec.get("bridge", {})
        keys.update(k for k in (b.get("key"), *b.get("also", []), *b.get("deprecated", [])) if k)
    return frozenset(keys)
