"""The calibration corpus: public measurements of MoE training on Megatron, as data.

``sources.yaml`` names each source (repository, commit, path) and says which software generation each Megatron
Bridge container is; every other ``*.yaml`` here is a list of points. A point is one measured run: the
configuration it used (``TrainingConfig`` fields, read from the recipe the source names), what was measured, and,
per quantity group, the reason it is listed instead of calibrated when there is one. A point the engine cannot
evaluate for a reason found at run time (a model it does not load yet) is listed then, not here.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ...engine.config import TrainingConfig
from ...errors import InputError

GENERATED = ("peer_bridge.yaml",)  # data files written by `moe-lc eval calibrate --write`, not points

# Why a measured quantity is shown but not calibrated. All but "unexplained" leave the stated error: the model
# does not claim to describe those runs. "unexplained" is a miss the model owns; it counts.
Reason = Literal[
    "older_software",  # measured with a Megatron Bridge / Megatron Core older than the target release line
    "not_tuned",  # the source says the run was not performance-tuned (throughput only)
    "not_modelled",  # a setting the model does not describe (Muon, Megatron-FSDP, LoRA, token dropping, ...)
    "known_regression",  # the source reports a performance regression of that container
    "model_not_loadable",  # the engine does not load the model (yet); found at run time
    "flops_counted_differently",  # TFLOP/s only: tokens/s agree, the two FLOPs formulas do not; found at run time
    "at_capacity",  # a device level at the GPU's capacity above the estimate: it bounds the need only; found at run time
    "unexplained",  # the model is off and the cause is not found; counts in the stated error
]
EXCLUDED: frozenset[str] = frozenset(Reason.__args__) - {"unexplained"}
CAPACITY_MARGIN_GIB = 0.05  # a device level within this of usable HBM is the device full, not a measurement


def device_full(device_gib: float, usable_gib: float) -> bool:
    """Whether a measured device level is the GPU's capacity (the run filled the card) rather than its need."""
    return device_gib >= usable_gib - CAPACITY_MARGIN_GIB


Group = Literal["throughput", "memory"]


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Data):
    repo: str = Field(description="owner/name on GitHub.")
    ref: str = Field(description="Branch or tag the commit was read at.")
    commit: str = Field(min_length=7, max_length=40)
    path: str
    what: str = Field(description="What the source is, in a few words.")
    software: str = Field(description="The software the measurements used, as the source states it.")
    target: bool = Field(
        description="True when that software is the target release line (Bridge 0.5.x-0.6.x, Megatron Core "
        "0.18-0.19): its points calibrate the model."
    )
    memory_unit: Literal["GiB", "GB"] = Field(
        default="GiB",
        description="Unit of the allocated and reserved peaks as the source prints them; GB (1e9 bytes) is "
        "converted to GiB when the corpus is read. peak_device_mib is MiB whatever the source.",
    )

    def cite(self, line: int | str) -> str:
        return f"{self.repo}@{self.commit[:7]}:{self.path}:{line}"


class Listing(_Data):
    reason: Reason
    why: str = Field(min_length=10, description="One sentence a reader can check.")


class Measured(_Data):
    tokens_per_s_per_gpu: float | None = Field(default=None, gt=0)
    tflops_per_gpu: float | None = Field(
        default=None, gt=0, description="Model TFLOP/s per GPU as the source counts them."
    )
    step_s: float | None = Field(default=None, gt=0)
    peak_allocated_gib: float | None = Field(default=None, gt=0, description="torch max_memory_allocated.")
    peak_reserved_gib: float | None = Field(default=None, gt=0, description="torch max_memory_reserved.")
    peak_device_mib: float | None = Field(
        default=None,
        gt=0,
        description="Device memory in use at the peak (allocator pool plus memory outside it).",
    )


class Point(_Data):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    source: str
    line: int | str = Field(description="Line (or range) of the measurement in the source file.")
    what: str | None = Field(default=None, description="The run, as the source names it.")
    container: str | None = Field(
        default=None, description="Megatron Bridge container of a performance table."
    )
    recipe: str | None = Field(
        default=None, description="Where the configuration was read (file:line function)."
    )
    model: str
    config: dict[str, Any] = Field(description="TrainingConfig fields other than model.")
    measured: Measured
    listed: dict[Group, Listing] = Field(default_factory=dict)
    not_modelled: list[str] = Field(
        default_factory=list, description="Settings of the run the engine does not price (for the reader)."
    )
    note: str | None = None
    pairs_with: str | None = Field(
        default=None,
        description="Id of a run of the same configuration whose measured levels complete this one's.",
    )

    @model_validator(mode="after")
    def _config_is_a_training_config(self) -> Point:
        if "model" in self.config:
            raise ValueError("config must not repeat model (it is the point's own field)")
        try:
            TrainingConfig(model="any", **self.config)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ValueError(f"config.{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        return self

    def training_config(self, **overrides: Any) -> TrainingConfig:
        return TrainingConfig(model=self.model, **{**self.config, **overrides})


class Corpus(_Data):
    sources: dict[str, Source]
    containers: dict[str, Source]  # container -> the source entry that describes its software
    points: tuple[Point, ...]

    def source_of(self, point: Point) -> Source:
        if point.container is not None:
            return self.containers[point.container]
        return self.sources[point.source]


def _read(name: str) -> Any:
    return yaml.safe_load(resources.files(__package__).joinpath(name).read_text())


GB_IN_GIB = 1e9 / 2**30


def _in_gib(point: Point) -> Point:
    """The point with its allocated and reserved peaks, printed in GB by its source, in GiB."""
    m = point.measured
    levels = {
        k: getattr(m, k) for k in ("peak_allocated_gib", "peak_reserved_gib") if getattr(m, k) is not None
    }
    if not levels:
        return point
    measured = m.model_copy(update={k: round(v * GB_IN_GIB, 4) for k, v in levels.items()})
    return point.model_copy(update={"measured": measured})


@cache
def load_corpus() -> Corpus:
    """Every point of every ``*.yaml`` here, checked: known source, unique id, a valid configuration."""
    head = _read("sources.yaml")
    sources = {k: Source(**v) for k, v in head["sources"].items()}
    containers = {}
    for name, entry in head["containers"].items():
        base = sources[entry.pop("source")]
        containers[name] = base.model_copy(update=entry)
    points: list[Point] = []
    files = sorted(
        f.name
        for f in resources.files(__package__).iterdir()
        if f.name.endswith(".yaml") and f.name != "sources.yaml" and f.name not in GENERATED
    )
    for name in files:
        for raw in _read(name) or []:
            try:
                point = Point(**raw)
            except ValidationError as exc:
                first = exc.errors()[0]
                raise InputError.plain(
                    f"{name}: point {raw.get('id')!r}: {'.'.join(map(str, first['loc']))}: {first['msg']}"
                ) from None
            if point.source not in sources:
                raise InputError.plain(f"{name}: point {point.id!r}: unknown source {point.source!r}")
            if sources[point.source].memory_unit == "GB":
                point = _in_gib(point)
            if point.container is not None and point.container not in containers:
                raise InputError.plain(f"{name}: point {point.id!r}: unknown container {point.container!r}")
            points.append(point)
    ids = [p.id for p in points]
    if len(set(ids)) != len(ids):
        raise InputError.plain(
            "calibration corpus: repeated point id " + next(i for i in ids if ids.count(i) > 1)
        )
    return Corpus(sources=sources, containers=containers, points=tuple(points))


UNTYPICAL = frozenset({"known_regression", "not_tuned"})  # a run its source calls slow for another reason


def typical_runs(corpus: Corpus) -> list[Point]:
    """The runs a measured pair may use: from a container, with measured tokens/s, and not listed as slow for a
    reason of their own (the sustained rates and NVFP4's rate are derived from pairs of them)."""
    out = []
    for p in corpus.points:
        listed = p.listed.get("throughput")
        if (
            p.container is not None
            and p.measured.tokens_per_s_per_gpu
            and not (listed and listed.reason in UNTYPICAL)
        ):
            out.append(p)
    return out
