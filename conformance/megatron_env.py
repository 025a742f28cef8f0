"""Make the unpacked Megatron Core 0.19.2 / Megatron Bridge 0.6.2 wheels importable on a CPU-only Python 3.11.

Nothing here changes a Megatron check. The steps (see ``shared/reference/megatron-rules.md`` section 1):

- the wheels are unpacked, not installed (they declare Python >= 3.12); their folders go on ``sys.path``
  and the ``megatron`` namespace package merges ``megatron.core``, ``megatron.training`` (shipped inside
  the megatron-core wheel) and ``megatron.bridge``;
- ``megatron/core/__init__.py`` imports ``transformer/moe/ops/paged_stash.py``, whose only job is Triton
  kernels (``import triton`` is unguarded); a stand-in module with the same names is put in
  ``sys.modules`` first. Its kernels raise if anything ever calls them (nothing does on this path);
- ``typing.override`` (3.12) is given its 3.11 meaning for ``megatron.training.models``;
- Megatron reads the Transformer Engine version through ``megatron.core.utils._te_version``; with no TE
  installed it would be 0.0.0 and version gates would fire before the real checks. It is set to the
  target version 2.14.0, so ``is_te_min_version`` keeps comparing for real;
- ``TransformerConfig`` refuses ``apply_rope_fusion`` (Megatron-LM's default) when TE's fused RoPE kernels
  cannot be imported (``rope_utils.fused_apply_rotary_pos_emb`` is None). TE 2.14 ships them, so a stand-in
  that raises if it is ever called takes their place;
- ``OptimizerConfig`` with the precision-aware optimizer imports TE's ``FusedAdam`` to check its signature;
  ``te_fused_adam`` puts a stand-in with TE 2.14's signature in ``sys.modules`` for that call only (its
  constructor raises: nothing may build an optimizer with it);
- the GPU queries Megatron-LM and Bridge make (``get_device_arch_version``, ``torch.cuda``'s capability
  and properties) answer for the GPU a case names, through ``set_gpu``.

Bridge's ``megatron/bridge/__init__.py`` and ``megatron/bridge/models/__init__.py`` import every model
bridge (transformers and more). The few Bridge modules the oracle needs import only Megatron Core, so
their packages are registered as plain namespace modules and the modules themselves are loaded from
the wheel unchanged.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import types
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path

TE_VERSION = "2.14.0"


@dataclass
class Megatron:
    """Handles to the Megatron modules the oracle calls."""

    core_dir: Path
    bridge_dir: Path | None
    training_dir: Path | None  # the megatron/training folder in use, or None when unavailable
    training_note: str


def _register_package(name: str, path: Path) -> None:
    """A package module whose submodules load from ``path`` without running its ``__init__``."""
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    module.__package__ = name
    sys.modules[name] = module


def _paged_stash_stand_in() -> types.ModuleType:
    module = types.ModuleType("megatron.core.transformer.moe.ops.paged_stash")
    module.GLOBAL_BLOCK_SIZE = 1024

    def _kernel(*_args, **_kwargs):
        raise RuntimeError("paged_stash Triton kernels are not available on the CPU")

    module.paged_stash_copy_kernel = _kernel
    module.paged_stash_pop_kernel = _kernel
    return module


_GPU = {"name": "NVIDIA H100 80GB HBM3", "capability": (9, 0)}


def set_gpu(name: str, capability: tuple[int, int]) -> None:
    """The GPU that Megatron-LM's and Bridge's device queries report from now on."""
    _GPU["name"] = name
    _GPU["capability"] = tuple(capability)


def _device_properties(*_args, **_kwargs):
    major, minor = _GPU["capability"]
    return types.SimpleNamespace(name=_GPU["name"], major=major, minor=minor, multi_processor_count=132)


@contextlib.contextmanager
def te_fused_adam():
    """Transformer Engine 2.14's FusedAdam signature, importable for the duration of the block."""

    class FusedAdam:
        def __init__(
            self,
            params,
            lr=1e-3,
            betas=(0.9, 0.999),
            eps=1e-8,
            weight_decay=0.0,
            amsgrad=False,
            *,
            bias_correction=True,
            adam_w_mode=True,
            capturable=False,
            master_weights=False,
            master_weight_dtype=None,
            exp_avg_dtype=None,
            exp_avg_sq_dtype=None,
            use_decoupled_grad=False,
            store_param_remainders=False,
            set_grad_none=None,
        ):
            raise RuntimeError("stand-in for Transformer Engine's FusedAdam: not usable on the CPU")

    names = ("transformer_engine", "transformer_engine.pytorch", "transformer_engine.pytorch.optimizers")
    if any(n in sys.modules for n in names):
        yield
        return
    modules = {n: types.ModuleType(n) for n in names}
    modules["transformer_engine.pytorch.optimizers"].FusedAdam = FusedAdam
    sys.modules.update(modules)
    try:
        yield
    finally:
        for n in names:
            sys.modules.pop(n, None)


def load(core_dir: Path, bridge_dir: Path | None = None, lm_training: str | None = None) -> Megatron:
    """Import Megatron Core (and optionally Bridge and Megatron-LM's training layer) from unpacked wheels.

    ``lm_training``: None uses the ``megatron/training`` folder of the megatron-core wheel; ``"none"``
    disables Megatron-LM's checks; any other value is a Megatron-LM source tree whose
    ``megatron/training`` is used instead.
    """
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)  # Megatron's rank-0 info and warnings; failures come as exceptions
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    if not hasattr(typing, "override"):
        typing.override = lambda fn: fn  # what 3.12's typing.override does at run time
    core_dir = core_dir.resolve()
    bridge_dir = bridge_dir.resolve() if bridge_dir is not None else None
    sys.path.insert(0, str(core_dir))
    sys.modules.setdefault("megatron.core.transformer.moe.ops.paged_stash", _paged_stash_stand_in())

    import torch

    torch.cuda.get_device_capability = lambda *a, **k: _GPU["capability"]
    torch.cuda.get_device_properties = _device_properties

    import megatron.core.utils as mcore_utils
    from packaging.version import Version

    mcore_utils._te_version = Version(TE_VERSION)
    importlib.import_module("megatron.core")
    rope_utils = importlib.import_module("megatron.core.models.common.embeddings.rope_utils")
    if rope_utils.fused_apply_rotary_pos_emb is None:

        def _fused_rope(*_args, **_kwargs):
            raise RuntimeError("Transformer Engine's fused RoPE kernel is not available on the CPU")

        rope_utils.fused_apply_rotary_pos_emb = _fused_rope

    training_dir: Path | None
    if lm_training == "none":
        training_dir, note = None, "not run: Megatron-LM source not available (MEGATRON_LM_SRC=none)"
    elif not lm_training and not (core_dir / "megatron" / "training" / "arguments.py").is_file():
        training_dir, note = (
            None,
            "not run: Megatron-LM source not available (not in the wheel; set MEGATRON_LM_SRC)",
        )
    else:
        if lm_training:
            training_dir = Path(lm_training) / "megatron" / "training"
            if not (training_dir / "arguments.py").is_file():
                raise FileNotFoundError(f"MEGATRON_LM_SRC={lm_training}: no megatron/training/arguments.py")
            spec = importlib.util.spec_from_file_location(
                "megatron.training",
                training_dir / "__init__.py",
                submodule_search_locations=[str(training_dir)],
            )
            module = importlib.util.module_from_spec(spec)
            sys.modules["megatron.training"] = module
            spec.loader.exec_module(module)
            note = f"Megatron-LM training layer from {lm_training}"
        else:
            training_dir = core_dir / "megatron" / "training"
            note = "Megatron-LM training layer shipped in the megatron-core 0.19.2 wheel"
        arguments = importlib.import_module("megatron.training.arguments")
        arguments.get_device_arch_version = lambda: _GPU["capability"][0]

    if bridge_dir is not None:
        sys.path.insert(1, str(bridge_dir))
        root = bridge_dir / "megatron" / "bridge"
        for package in ("", ".models", ".utils", ".training"):
            _register_package("megatron.bridge" + package, root / package.strip(".").replace(".", "/"))
        # flex_dispatcher_backend takes get_rank_safe from common_utils, which re-exports Megatron
        # Core's safe_get_rank; common_utils itself pulls in Bridge's data pipeline.
        from megatron.core._rank_utils import safe_get_rank

        common = types.ModuleType("megatron.bridge.utils.common_utils")
        common.get_rank_safe = safe_get_rank
        sys.modules.setdefault(common.__name__, common)
    return Megatron(core_dir=core_dir, bridge_dir=bridge_dir, training_dir=training_dir, training_note=note)
