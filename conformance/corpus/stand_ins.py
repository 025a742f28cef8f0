"""CPU stand-ins the corpus needs on top of ``conformance/megatron_env.py``; none of them changes a check.

- Megatron Core's MoE permutation fusion (``moe_permute_fusion``) asks whether Transformer Engine's fused
  permute kernels imported (transformer_config.py:2651-2667: any of the five is None raises "fused
  permutation is not available. Please install TE >= 2.1.0."). TE 2.14 ships all five, so stand-ins that raise
  if ever called take their place in ``megatron.core.transformer.moe.moe_utils``.
"""

from __future__ import annotations

import importlib

_PERMUTE = ("fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
            "fused_sort_chunks_by_index_with_probs", "fused_unpermute")  # fmt: skip


def _kernel(name: str):
    def run(*_args, **_kwargs):
        raise RuntimeError(f"Transformer Engine's {name} kernel is not available on the CPU")

    return run


def apply() -> None:
    moe_utils = importlib.import_module("megatron.core.transformer.moe.moe_utils")
    for name in _PERMUTE:
        if getattr(moe_utils, name, None) is None:
            setattr(moe_utils, name, _kernel(name))
