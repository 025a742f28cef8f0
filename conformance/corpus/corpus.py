"""The stored corpus: where its files are, how entries are read and written, and which ones are judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
FILES = {
    "megatron-lm": "megatron_lm_tests.json",
    "modelzoo": "modelzoo.json",
    "bridge": "bridge_recipes.json",
}
# GPUs the engine's catalog and megatron_env can answer device queries for.
JUDGED_GPUS = ("h100", "h200", "b200", "b300", "gb200", "gb300")
# Bridge recipes whose model is a provider (no Hugging Face config): the engine's catalog id, or None.
PROVIDER_MODELS = {  # first match wins: Lightning's recipe functions live in the nemotron_3_nano modules
    "nemotron_3_5_lightning": "nemotron-3.5-lightning",
    "nemotron_3_nano": "nemotron-3-nano",
    "olmoe_7b": "olmoe-1b-7b",
}


def load(name: str) -> dict[str, Any]:
    path = DATA / FILES[name]
    return json.loads(path.read_text()) if path.is_file() else {"about": {}, "entries": []}


def save(name: str, about: dict[str, Any], entries: list[dict[str, Any]]) -> Path:
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / FILES[name]
    path.write_text(json.dumps({"about": about, "entries": entries}, indent=1, sort_keys=True) + "\n")
    return path


def why_not_judged(entry: dict[str, Any]) -> str | None:
    """None when the entry is judged; else the reason (stored with it)."""
    if entry.get("skip"):
        return entry["skip"]
    if entry.get("not_built"):
        return "not built: " + entry["not_built"]
    if entry["kind"] == "bridge" and not entry.get("moe"):
        return "dense model (no num_moe_experts)"
    if entry["gpu"] not in JUDGED_GPUS:
        return f"{entry['gpu']} is not in the engine's GPU catalog (no device facts for Megatron's queries)"
    return None


def lint_model(entry: dict[str, Any]) -> Any:
    """What lint_config is told the model is: the recipe's config.json, or the catalog id of its provider."""
    from .bridge_env import hf_folder

    if entry.get("hf_model"):
        return json.loads((hf_folder(entry["hf_model"]) / "config.json").read_text())
    for key, model in PROVIDER_MODELS.items():
        if key in entry["recipe"]:
            return model
    return None
