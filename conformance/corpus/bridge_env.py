"""Import Megatron Bridge 0.6.2's recipes, AutoBridge and training config on a CPU-only Python 3.11.

Bridge's package ``__init__`` imports its diffusion models, and the recipe modules reach its data loaders,
PEFT layers, checkpointing and logging, which import packages a CPU config check never calls into. The
installed ones are real (transformers, hydra-core, omegaconf: pinned in the Makefile's conformance
environment); the others are import-time stand-ins, listed in ``STAND_INS``: a module whose attributes
are placeholder classes, enough for ``import x`` and ``class A(x.B)`` at import time. Building a recipe,
applying overrides and ``ConfigContainer.validate`` never call them (a call returns a placeholder, which no
check compares against), so no check changes. ``megatron.bridge`` itself is registered as a namespace
package (skipping its diffusion-importing ``__init__``) whose ``AutoBridge`` is the real one.

``AutoBridge.from_hf_pretrained`` reads ``config.json`` from the offline copies in ``hf/`` (each with its
source in ``hf/SOURCES.md``) instead of the Hugging Face Hub, which CI cannot reach.
"""

from __future__ import annotations

import abc
import importlib.abc
import importlib.machinery
import json
import sys
import types
from pathlib import Path

# Packages (or subpackages) the import path reaches and no config check calls: what each is for.
STAND_INS = {
    "transformer_engine": "TE kernels: Bridge's PEFT/LoRA layers subclass them at import. Megatron Core was "
    "imported first and keeps its own no-TE paths; Bridge's comm_overlap sees TE installed, as on the target; "
    "OptimizerConfig's precision-aware check finds megatron_env's FusedAdam with TE 2.14's signature",
    "datasets": "Hugging Face datasets, for the SFT data builders",
    "megatron.energon": "multimodal data loader",
    "PIL": "images, for the VLM data builders",
    "timm": "vision encoders",
    "fla": "flash-linear-attention kernels",
    "diffusers": "diffusion models",
    "mistral_common": "Mistral tokenizers",
    "nvidia_resiliency_ext": "fault tolerance and straggler detection",
    "modelopt": "quantization / distillation checkpoint plugins",
    "tensorboard": "logging",
    "torch.utils.tensorboard": "logging (imports tensorboard)",
    "wandb": "logging",
    "mlflow": "logging",
    "comet_ml": "logging",
    "peft": "Hugging Face PEFT",
    "qwen_vl_utils": "Qwen-VL preprocessing",
    "open_clip": "CLIP encoders",
    "flashinfer": "inference kernels",
    "fast_hadamard_transform": "kernels",
    "mamba_ssm": "Mamba kernels",
    "causal_conv1d": "Mamba kernels",
    "nemo_run": "the NeMo-Run launcher",
}

HF_DIR = Path(__file__).resolve().parent / "hf"


class _Placeholder(abc.ABCMeta):
    """A class whose attributes, calls and subscripts are placeholder classes too."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__name__}.{name}")

    def __call__(cls, *args, **kwargs):
        return cls

    def __getitem__(cls, key):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls


def _placeholder(name: str) -> type:
    return _Placeholder(name, (object,), {})


class _StandInModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = tuple(roots)

    def find_spec(self, name, path=None, target=None):
        if any(name == r or name.startswith(r + ".") for r in self.roots):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _installed(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def hf_folder(model_id: str) -> Path:
    return HF_DIR / model_id.replace("/", "--")


class MissingConfig(RuntimeError):
    """No offline config.json for a Hugging Face model id."""


def prepare(bridge_dir: Path) -> None:
    """Make ``megatron.bridge`` importable as Bridge runs it (after megatron_env.load)."""
    from .. import megatron_env

    missing = [name for name in STAND_INS if name.startswith("torch.") or not _installed(name)]
    with megatron_env.te_fused_adam():  # TE 2.14's FusedAdam signature, which OptimizerConfig inspects
        fused_adam = sys.modules["transformer_engine.pytorch.optimizers"].FusedAdam
    sys.meta_path.insert(0, _StandInFinder(missing))
    if "transformer_engine" in missing:
        import transformer_engine.pytorch.optimizers as te_optimizers

        te_optimizers.FusedAdam = fused_adam
    root = bridge_dir.resolve() / "megatron" / "bridge"
    if str(bridge_dir.resolve()) not in sys.path:
        sys.path.insert(1, str(bridge_dir.resolve()))
    megatron_env._register_package("megatron.bridge", root)

    def lazy(name):
        if name == "AutoBridge":
            from megatron.bridge.models.conversion.auto_bridge import AutoBridge

            return AutoBridge
        raise AttributeError(name)

    sys.modules["megatron.bridge"].__getattr__ = lazy


def offline_auto_bridge() -> dict[str, str]:
    """Point AutoBridge.from_hf_pretrained at the offline config.json copies; returns id -> folder used."""
    from megatron.bridge.models.conversion.auto_bridge import AutoBridge

    used: dict[str, str] = {}
    original = AutoBridge.from_hf_pretrained.__func__

    def from_hf_pretrained(cls, path, *args, **kwargs):
        model_id = str(path)
        if Path(model_id).is_dir():  # already an offline folder (AutoBridge calls itself for some models)
            return original(cls, model_id, *args, **kwargs)
        folder = hf_folder(model_id)
        if not (folder / "config.json").is_file():
            raise MissingConfig(f"no offline config.json for {model_id}")
        used[model_id] = str(folder)
        kwargs.pop("revision", None)
        kwargs.setdefault("local_files_only", True)
        bridge = original(cls, str(folder), *args, **kwargs)
        return bridge

    AutoBridge.from_hf_pretrained = classmethod(from_hf_pretrained)
    return used


def source_of(model_id: str) -> str | None:
    path = hf_folder(model_id) / "source.json"
    return json.loads(path.read_text()).get("source") if path.is_file() else None
