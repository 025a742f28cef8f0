"""Model and GPU catalogs: YAML presets plus Hugging Face config.json conversion.

Model presets hold the published config.json keys of their Hugging Face repository; the same converter
that reads a user's config.json turns them into ModelSpecs, so presets and custom models share one path.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ..errors import InputError, unknown_id
from .hf import spec_from_hf_config
from .hf_hybrid import refuse_name
from .specs import GpuSpec, ModelSpec

__all__ = ["gpu_ids", "gpus", "load_gpu", "load_model", "model_ids", "models"]


def _read_yaml(*parts: str) -> Any:
    return yaml.safe_load(resources.files(__package__).joinpath(*parts).read_text())


@cache
def _model_presets() -> dict[str, ModelSpec]:
    presets: dict[str, ModelSpec] = {}
    folder = resources.files(__package__).joinpath("presets")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        data = yaml.safe_load(entry.read_text())
        published = data.get("published", {})
        spec = spec_from_hf_config(
            data["config_json"],
            model_id=data["id"],
            name=data["name"],
            hf_repo=data["hf_repo"],
            extra={
                "aliases": tuple(data.get("aliases", ())),
                "published_total_params": published.get("total_params"),
                "published_active_params": published.get("active_params"),
                "sources": {"published": published["source"]} if published.get("source") else {},
            },
        )
        presets[spec.id] = spec
    return presets


@cache
def _alias_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for spec in _model_presets().values():
        for name in (spec.id, *spec.aliases):
            index[name.lower()] = spec.id
    return index


@cache
def _gpu_presets() -> dict[str, GpuSpec]:
    data = _read_yaml("gpus.yaml")
    common = data.get("common_sources", {})
    result = {}
    for entry in data["gpus"]:
        entry = dict(entry)
        entry["sources"] = {**common, **entry.get("sources", {})}
        entry["compute_capability"] = tuple(entry["compute_capability"])
        spec = GpuSpec(**entry)
        result[spec.id] = spec
    return result


def models() -> list[ModelSpec]:
    """Every catalog model, in id order."""
    return [spec for _, spec in sorted(_model_presets().items())]


def gpus() -> list[GpuSpec]:
    """Every catalog GPU, in catalog order."""
    return list(_gpu_presets().values())


def model_ids() -> list[str]:
    return sorted(_model_presets())


def gpu_ids() -> list[str]:
    return list(_gpu_presets())


def load_model(model: str | Mapping[str, Any] | ModelSpec, field: str = "model") -> ModelSpec:
    """A ModelSpec from a catalog id or alias, an inline config.json object, or a config.json path."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, Mapping):
        return spec_from_hf_config(model)
    if not isinstance(model, str) or not model.strip():
        raise InputError(field, model, "a catalog model id or a Hugging Face config.json object")
    key = model.strip().lower()
    index = _alias_index()
    if key in index:
        return _model_presets()[index[key]]
    if key.endswith(".json"):
        return spec_from_hf_config(model)
    refuse_name(key)
    raise unknown_id(field, model, model_ids(), index)


def load_gpu(gpu: str | GpuSpec, field: str = "gpu") -> GpuSpec:
    """A GpuSpec from a catalog id (case-insensitive; 'H100', 'h100-sxm' and 'nvidia h100' work too)."""
    if isinstance(gpu, GpuSpec):
        return gpu
    if not isinstance(gpu, str) or not gpu.strip():
        raise InputError(field, gpu, "one of " + ", ".join(gpu_ids()))
    key = gpu.strip().lower().removeprefix("nvidia").strip().replace(" ", "-")
    presets = _gpu_presets()
    if key in presets:
        return presets[key]
    for suffix in ("-sxm", "-sxm5", "-nvl72", "-80gb", "-141gb", "-hgx"):
        if key.endswith(suffix) and key.removesuffix(suffix) in presets:
            return presets[key.removesuffix(suffix)]
    raise unknown_id(field, gpu, gpu_ids())
