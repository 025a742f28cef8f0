"""Every complete MoE recipe of the Megatron Bridge 0.6.2 wheel, built on a CPU and dumped as overrides.

A complete recipe is a public ``*_<N>gpu_<gpu>_*_config`` function of ``megatron.bridge.recipes`` or
``megatron.bridge.perf_recipes`` (the names Bridge's ``run_recipe.py --recipe`` takes); it is called as Bridge
calls it, with ``AutoBridge.from_hf_pretrained`` reading the offline ``hf/`` copies. A recipe is MoE when its
model has ``num_moe_experts``. Its override list is every leaf of Bridge's own OmegaConf view of the
ConfigContainer (``omegaconf_utils._dataclass_to_omegaconf_dict``) that differs from a container of the same
section classes at their dataclass defaults, written in Hydra's override grammar (``+key=value`` for a key
the default container does not have, as Hydra's struct mode requires).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
import inspect
import os
import pkgutil
import re
from pathlib import Path
from typing import Any

from moe_long_context.dialects.hydra import hydra_value

from . import bridge_env

_NAME = re.compile(r"_(\d+)gpu_([a-z0-9]+)_")
RUN_DIR = Path("/tmp/megatron-bridge-recipes")  # a fixed working folder, so the dumped paths are stable
# The checkpoint a PEFT recipe adapts: a folder the judge creates, standing for the path a user gives
# (Bridge's CheckpointConfig.finalize asserts that it exists).
PRETRAINED_PLACEHOLDER = str(RUN_DIR / "pretrained_checkpoint")


@contextlib.contextmanager
def _in_folder(path: Path):
    path.mkdir(parents=True, exist_ok=True)
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


WHEEL = "megatron-bridge==0.6.2 wheel"


# Diffusion-model recipe packages (image and video generators, no language-model experts): not run.
DIFFUSION = (
    "megatron.bridge.recipes.flux",
    "megatron.bridge.recipes.wan",
    "megatron.bridge.perf_recipes.wan",
)


def local_paths_out(text: str) -> str:
    """A message without this machine's folders (the wheel's and the offline configs'), so the data is stable."""
    bridge = Path(importlib.import_module("megatron.bridge.recipes").__file__).resolve().parents[3]
    return text.replace(str(bridge) + "/", "").replace(str(bridge_env.HF_DIR), "conformance/corpus/hf")


def recipe_functions() -> dict[str, Any]:
    """qualified name -> function, for every complete recipe (``_<N>gpu_<gpu>_`` in its name) outside the
    diffusion packages (FLUX builds its 12B model's buffers and takes minutes on a CPU)."""
    out: dict[str, Any] = {}
    for package in ("megatron.bridge.recipes", "megatron.bridge.perf_recipes"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            if info.name.startswith(DIFFUSION):
                continue
            module = importlib.import_module(info.name)
            for name, fn in vars(module).items():
                if (inspect.isfunction(fn) and fn.__module__ == module.__name__ and name.endswith("_config")
                        and not name.startswith("_") and _NAME.search(name)):  # fmt: skip
                    out[f"{module.__name__}.{name}"] = fn
    return dict(sorted(out.items()))


def omega(obj: Any) -> Any:
    from megatron.bridge.training.utils.omegaconf_utils import _dataclass_to_omegaconf_dict

    return _dataclass_to_omegaconf_dict(obj, "root")


def _plain(value: Any) -> Any:
    """An Enum as its member name (what a user writes: model.cuda_graph_modules=[attn,moe_router])."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: _plain(value)}


def class_path(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _built(args: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments with stored dataclass specs turned into default instances."""
    return {k: _instance(v["spec"]) if isinstance(v, dict) and "spec" in v else v for k, v in args.items()}


def _required_args(cls: type, section: Any) -> dict[str, Any]:
    """The constructor arguments a section class cannot do without (GPTDatasetConfig's seq_length and
    random_seed, DirectHFSFTDatasetConfig's source), found by asking the constructor: each name its error
    quotes is taken from the recipe; a dataclass argument is given as a default instance of its class (its
    fields then appear in the override list)."""
    args: dict[str, Any] = {}
    for _ in range(8):
        try:
            cls(**_built(args))
            return args
        except Exception as exc:
            names = [
                n for n in re.findall(r"[`'](\w+)[`']", str(exc)) if hasattr(section, n) and n not in args
            ]
            if not names:
                raise
            value = getattr(section, names[0])
            if dataclasses.is_dataclass(value):
                args[names[0]] = {"spec": _spec(value)}
            elif isinstance(value, (int, float, str, bool, type(None))):
                args[names[0]] = value
            else:
                raise TypeError(
                    f"{cls.__name__}.{names[0]}: a {type(value).__name__} cannot be stored"
                ) from exc
    raise RuntimeError(f"{cls.__name__}: cannot build a default instance")


def _spec(obj: Any) -> dict[str, Any]:
    """A dataclass value's class, the constructor arguments it needs, and its nested dataclass values."""
    nested = {f.name: _spec(getattr(obj, f.name)) for f in dataclasses.fields(obj)
              if dataclasses.is_dataclass(getattr(obj, f.name, None))}  # fmt: skip
    out: dict[str, Any] = {"class": class_path(obj), "args": _required_args(type(obj), obj)}
    if nested:
        out["nested"] = nested
    return out


def section_classes(cfg: Any) -> dict[str, dict[str, Any]]:
    """Every dataclass section of a ConfigContainer: its class, the constructor arguments it needs and its
    nested dataclasses (a recipe's PackedSequenceSpecs where the default dataset has None)."""
    return {f.name: _spec(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
            if f.init and dataclasses.is_dataclass(getattr(cfg, f.name))}  # fmt: skip


def _instance(spec: dict[str, Any]) -> Any:
    module, _, qual = spec["class"].rpartition(".")
    obj = getattr(importlib.import_module(module), qual)(**_built(spec["args"]))
    for name, child in spec.get("nested", {}).items():
        if class_path(getattr(obj, name, None)) != child["class"]:
            setattr(obj, name, _instance(child))
    return obj


def default_container(classes: dict[str, dict[str, Any]]) -> Any:
    """A ConfigContainer whose sections (and their nested dataclasses) are the recipe's classes at their
    dataclass defaults; sections the recipe leaves None keep ConfigContainer's defaults."""
    from megatron.bridge.training.config import ConfigContainer

    return ConfigContainer(**{name: _instance(spec) for name, spec in classes.items()})


def _forced(specs: dict[str, Any], prefix: str = ""):
    """The keys given to constructors (always written: the default container needs them too)."""
    for name, spec in specs.items():
        yield from (f"{prefix}{name}.{arg}" for arg, v in spec["args"].items() if not isinstance(v, dict))
        yield from _forced(spec.get("nested", {}), f"{prefix}{name}.")


def override_list(cfg: Any) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """(the overrides that turn the default container into ``cfg``, the section classes)."""
    classes = section_classes(cfg)
    base = flatten(omega(default_container(classes)))
    have = flatten(omega(cfg))
    forced = set(_forced(classes))
    items = []
    for key, value in have.items():
        if key in base and base[key] == value and key not in forced:
            continue
        present = key in base or any(b.startswith(key + ".") for b in base)
        items.append(("" if present else "+") + f"{key}={hydra_value(value)}")
    removed = [k for k in base if k not in have and not any(h.startswith(k + ".") for h in have)]
    items += [f"{k}=null" for k in removed if base[k] is not None and not isinstance(base[k], dict)]
    return items, classes


def build(name: str, fn: Any) -> dict[str, Any]:
    """Run one recipe; the entry (or why it was not built)."""
    m = _NAME.search(name)
    module_path = name.rsplit(".", 1)[0].replace(".", "/") + ".py"
    entry: dict[str, Any] = {
        "id": "bridge/" + name.removeprefix("megatron.bridge."),
        "kind": "bridge",
        "source": f"{WHEEL}:{module_path}::{name.rsplit('.', 1)[1]}",
        "recipe": name,
        "num_gpus": int(m.group(1)),
        "gpu": m.group(2),
    }
    used = bridge_env.offline_auto_bridge()
    try:
        with _in_folder(RUN_DIR):  # recipes derive checkpoint paths from the working folder
            cfg = fn()
    except bridge_env.MissingConfig as exc:
        entry["not_built"] = str(exc)
        return entry
    except Exception as exc:  # the recipe itself fails on a CPU (it needs a download, a kernel, ...)
        entry["not_built"] = f"the recipe raises {type(exc).__name__}: {local_paths_out(str(exc))[:200]}"
        return entry
    experts = getattr(cfg.model, "num_moe_experts", None)
    entry["moe"] = bool(experts)
    if not experts:
        return entry
    entry["hf_model"] = next(iter(used), None)
    if entry["hf_model"] and getattr(cfg.model, "hf_model_id", None) == used[entry["hf_model"]]:
        cfg.model.hf_model_id = entry["hf_model"]  # the hub id the recipe names, not the offline folder
    if getattr(cfg, "peft", None) is not None and cfg.checkpoint.pretrained_checkpoint is None:
        # PEFT needs the checkpoint it adapts (training/config.py validate); the recipe leaves the path to the
        # user (run_recipe.py --pretrained_checkpoint): a stand-in path, as a user fills it in.
        cfg.checkpoint.pretrained_checkpoint = PRETRAINED_PLACEHOLDER
        entry["filled_in"] = {"checkpoint.pretrained_checkpoint": PRETRAINED_PLACEHOLDER}
    overrides, classes = override_list(cfg)
    entry["classes"] = classes
    entry["overrides"] = overrides
    entry["_cfg"] = cfg  # the built container, for the dump's round-trip check (not stored)
    return entry
