"""Model and GPU catalogs: YAML presets plus Hugging Face config.json conversion.

Model presets hold the published config.json keys of their Hugging Face repository; the same converter
that reads a user's config.json turns them into ModelSpecs, so presets and custom models share one path.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import InputError, check_nesting, too_deep, unknown_id
from .hf import spec_from_hf_config
from .hf_hybrid import refuse_name
from .specs import GpuSpec, ModelSpec
from .yaml_data import load_data_yaml

__all__ = ["gpu_ids", "gpus", "load_gpu", "load_model", "model_ids", "models"]


def _read_yaml(*parts: str) -> Any:
    return load_data_yaml(resources.files(__package__).joinpath(*parts).read_text())


@cache
def _preset_files() -> dict[str, Any]:
    """Preset files by id: a preset's file is named after its id (``deepseek-v3.yaml``)."""
    folder = resources.files(__package__).joinpath("presets")
    return {e.name.removesuffix(".yaml"): e for e in sorted(folder.iterdir(), key=lambda e: e.name)
            if e.name.endswith(".yaml")}  # fmt: skip


def _header(text: str) -> dict[str, Any]:
    """The top-level ``id`` and ``aliases`` of a preset, parsed without the rest of the file."""
    keep, lines = False, []
    for line in text.splitlines():
        if line and not line[0].isspace() and not line.startswith("-"):
            keep = line.startswith(("id:", "aliases:"))
        if keep:
            lines.append(line)
    return load_data_yaml("\n".join(lines)) or {}


@cache
def _load_preset(model_id: str) -> ModelSpec:
    """One preset, converted from its config.json keys on first use (the catalog grows; a lookup reads one
    file)."""
    entry = _preset_files()[model_id]
    data = load_data_yaml(entry.read_text())
    if data["id"] != model_id:
        raise ValueError(
            f"model preset {entry.name} has id {data['id']!r}: a preset file is named after its id"
        )
    return _preset_spec(data)


def _model_presets() -> dict[str, ModelSpec]:
    """Every preset, converted (listing the catalog needs them all; a lookup does not)."""
    return {model_id: _load_preset(model_id) for model_id in _preset_files()}


def _preset_spec(data: Mapping[str, Any]) -> ModelSpec:
    """A preset's ModelSpec. ``config_source`` says where its config.json values were read when that is not the
    hub itself, and ``unconfirmed`` (config key -> why, or ``*`` for every key) marks the values not confirmed."""
    published = data.get("published", {})
    sources = {"published": published["source"]} if published.get("source") else {}
    if data.get("config_source"):
        sources["config_json"] = data["config_source"]
    spec = spec_from_hf_config(
        data["config_json"],
        model_id=data["id"],
        name=data["name"],
        hf_repo=data["hf_repo"],
        extra={
            "aliases": tuple(data.get("aliases", ())),
            "published_total_params": published.get("total_params"),
            "published_active_params": published.get("active_params"),
            "sources": sources,
        },
    )
    unconfirmed = data.get("unconfirmed") or {}
    if not unconfirmed:
        return spec
    marked = dict(spec.sources)
    for field, source in spec.sources.items():
        key = source.rsplit(": ", 1)[-1]
        why = unconfirmed.get(key, unconfirmed.get("*"))
        if why and source.startswith("https://"):
            marked[field] = f"{source} [unconfirmed: {why}]"
    return spec.model_copy(update={"sources": marked})


@cache
def _alias_index() -> dict[str, str]:
    """Lower-case id and aliases -> id, from each preset's header alone."""
    index: dict[str, str] = {}
    for model_id, entry in _preset_files().items():
        header = _header(entry.read_text())
        for name in (model_id, *header.get("aliases", ())):
            index[str(name).lower()] = model_id
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
    return sorted(_preset_files())


def gpu_ids() -> list[str]:
    return list(_gpu_presets())


def load_model(model: str | Mapping[str, Any] | ModelSpec, field: str = "model") -> ModelSpec:
    """A ModelSpec from a catalog id or alias, an inline config.json object, a config.json path, or a YAML
    model spec path (``spec_from_yaml``)."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, Mapping):
        return spec_from_hf_config(model)
    if not isinstance(model, str) or not model.strip():
        raise InputError(
            field,
            model,
            "a catalog model id, a Hugging Face config.json (object or path) or a YAML spec path",
        )
    key = model.strip().lower()
    index = _alias_index()
    if key in index:
        return _load_preset(index[key])
    if key.endswith(".json"):
        return spec_from_hf_config(model)
    refuse_name(key)
    if key.endswith((".yaml", ".yml")):
        return spec_from_yaml(model.strip(), field)
    if _on_disk(model.strip()):  # a folder holding a config.json, or a config.json under another name
        return spec_from_hf_config(model.strip())
    raise unknown_id(field, model, model_ids(), index)


def _on_disk(text: str) -> bool:
    """Whether a model argument names an existing file or folder (a path, not a catalog id)."""
    if len(text) > 4096 or "\n" in text:
        return False
    try:
        return Path(text).exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def spec_from_yaml(path: str, field: str = "model") -> ModelSpec:
    """A ModelSpec from a YAML file: either a catalog preset (with ``config_json``) or ModelSpec fields written
    directly (``family`` defaults to custom, ``attention_layer_types`` to full attention on every layer)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(field, path, f"a readable YAML model spec ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InputError(field, path, "a YAML model spec; this file is not UTF-8 text") from None
    except RecursionError:
        raise too_deep(field, path) from None
    except yaml.YAMLError as exc:
        raise InputError(field, path, f"valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise InputError(field, path, "a YAML mapping of ModelSpec fields")
    check_nesting(data, field, path)
    if "config_json" in data:
        return _preset_spec(data)
    values = {"id": Path(path).stem, "name": Path(path).stem, "family": "custom", **data}
    values.setdefault("sources", {key: f"{path}: {key}" for key in data})
    layers = values.get("num_layers")
    if "attention_layer_types" not in values and isinstance(layers, int) and 0 < layers <= 10_000:
        values["attention_layer_types"] = ("full",) * layers
        values["sources"]["attention_layer_types"] = "every layer full attention (no attention_layer_types)"
    try:
        return ModelSpec(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"])
        if not name:  # a check across fields: name the field its message starts with
            first = err["msg"].removeprefix("Value error, ").split(" ")[0]
            name = first if first in ModelSpec.model_fields else ""
        value = values.get(name) if name else path
        raise InputError(f"{field}.{name}" if name else field, value, err["msg"]) from exc


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
