"""What an unset field resolves to, per launcher and model family (``launcher_defaults.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ..model.yaml_data import load_data_yaml


@dataclass(frozen=True)
class Default:
    value: Any
    source: str
    caveat: str | None  # set when the value comes from a family's recipes, not the framework default


@cache
def _table() -> dict[str, Any]:
    return load_data_yaml(resources.files(__package__).joinpath("launcher_defaults.yaml").read_text())


def unset_value(field: str, launcher: str, family: str) -> Default:
    """The value ``field`` takes when a launch leaves it unset, under ``launcher`` for a ``family`` model."""
    row = _table()[field][launcher]
    fam = (row.get("families") or {}).get(family)
    if fam is not None:
        return Default(fam["value"], fam["source"], fam.get("caveat"))
    return Default(row["default"], row["source"], None)
