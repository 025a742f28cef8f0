"""Representative layouts: the published long-context MoE configurations, as engine requests.

The data lives in ``engine/layouts.yaml``. Each layout's ``config`` is a set of ``TrainingConfig`` fields, so
any tool can take it as arguments; the loader refuses a key or value the engine would not accept.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..model.yaml_data import load_data_yaml
from .config import TrainingConfig


class ExpectedParallelism(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dp: int = Field(ge=1, description="Data-parallel size the layout gives.")
    edp: int = Field(ge=1, description="Expert data-parallel size the layout gives.")
    errors: list[str] = Field(
        default_factory=list,
        description="Error codes the engine raises for the layout as its source ships it (a recipe that does "
        "not build); empty for the representative layouts.",
    )
    fits: bool = Field(
        default=True,
        description="Whether the memory model fits the layout as shipped (false for a recipe Bridge's own "
        "verification runs with more recompute or offload; its notes say so).",
    )


class RepresentativeLayout(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    title: str
    source: str = Field(description="Where the configuration family is published.")
    config: dict[str, Any] = Field(description="TrainingConfig fields: arguments any tool accepts.")
    variants: list[dict[str, Any]] = Field(
        default_factory=list, description="Settings that are equally representative (overrides of config)."
    )
    expect: ExpectedParallelism
    chosen: list[str] = Field(description="What this project filled in where the source is silent, and why.")

    @model_validator(mode="after")
    def _configs_are_valid(self) -> RepresentativeLayout:
        for config in self.configs():
            TrainingConfig(**config)
        return self

    def configs(self) -> list[dict[str, Any]]:
        """The base config followed by each variant applied to it."""
        return [self.config, *({**self.config, **variant} for variant in self.variants)]


@cache
def _layouts_file() -> dict[str, Any]:
    return load_data_yaml(resources.files(__package__).joinpath("layouts.yaml").read_text())


@cache
def representative_layouts() -> tuple[RepresentativeLayout, ...]:
    """The published long-context layouts (the seeds)."""
    return tuple(RepresentativeLayout(**entry) for entry in _layouts_file()["layouts"])


@cache
def nemotron3_recipes() -> tuple[RepresentativeLayout, ...]:
    """Every Nemotron 3 Super / Ultra / 3.5 Lightning recipe function of Megatron Bridge 0.6.2, as shipped
    (``engine/recipes_nemotron3.yaml``)."""
    data = load_data_yaml(resources.files(__package__).joinpath("recipes_nemotron3.yaml").read_text())
    return tuple(RepresentativeLayout(**entry) for entry in data["recipes"])


@cache
def recipe_layouts() -> tuple[RepresentativeLayout, ...]:
    """The layouts Megatron Bridge 0.6.2's recipes ship for the other catalog families, as shipped."""
    return tuple(RepresentativeLayout(**entry) for entry in _layouts_file().get("recipes", []))
