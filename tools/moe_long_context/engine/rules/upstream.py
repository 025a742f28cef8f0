"""The upstream inventory as the engine uses it: which upstream checks a configuration reaches that no rule models.

``upstream.yaml`` lists every config-time assert / raise of the pinned Megatron-LM, Megatron Core, Megatron Bridge
and Transformer Engine (generated from the sources by conformance/inventory.py), each modelled by rule codes, not
applicable, or not modelled. A configuration reaches a check when it sets a key of the check's ``when`` (a request
field away from its default, or a flag or key written in a launch); the keys every launch sets
(``upstream_keys.yaml`` ``common``) never do by themselves. The not-modelled checks it reaches come back as
``not_checked``: silence about them is not approval.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ...model.specs import ModelSpec
from ..config import TrainingConfig
from ..findings import Checked, NotChecked
from .table import rule_table

STATUSES = ("modelled", "not_applicable", "not_modelled")
# How rules.yaml names each upstream tree, and the path prefix it leaves out.
_REPOS = {
    "LM": ("LM", "megatron/training/"),
    "MCore": ("MCore", "megatron/core/"),
    "Bridge": ("Bridge", "megatron/bridge/"),
    "TE": ("TE v2.14", "transformer_engine/pytorch/"),
}

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class UpstreamCheck:
    id: str
    repo: str
    file: str
    line: int
    function: str
    fingerprint: str
    status: str
    rules: tuple[str, ...]
    reason: str | None
    when: tuple[str, ...]
    keys: tuple[str, ...]
    requires: str
    only: tuple[
        tuple[str, str, tuple], ...
    ] = ()  # guard conditions on a key's value: (key, in|not_in, values)

    def excluded_by(self, values: Mapping[str, Any]) -> bool:
        """True when a known value makes the guard false, so the check does not apply (unknown values never do)."""
        for key, op, allowed in self.only:
            name = leaf(key)
            if name not in values or isinstance(values[name], list | dict):
                continue
            value = values[name]
            if tuple(allowed) == (True,):
                hit = value not in (None, False, 0, "", "false", "False", "0", "none", "None")
            else:
                hit = str(value).lower() in {str(a).lower() for a in allowed}
            if hit != (op == "in"):
                return True
        return False

    @property
    def source(self) -> str:
        """'LM arguments.py:857', as rules.yaml cites sources."""
        name, prefix = _REPOS[self.repo]
        return f"{name} {self.file.removeprefix(prefix)}:{self.line}"

    @property
    def applicable(self) -> bool:
        return self.status != "not_applicable"


@cache
def _data(name: str) -> dict:
    """A data file of this package, parsed once (upstream.yaml is the largest: reasons and checks share it)."""
    return yaml.load(resources.files(__package__).joinpath(name).read_text(), Loader=_Loader)


@cache
def upstream_reasons() -> dict[str, str]:
    return dict(_data("upstream.yaml")["reasons"])


def _check(c: dict, file: str, repo: str) -> UpstreamCheck:
    return UpstreamCheck(
        id=c["id"],
        repo=repo,
        file=file,
        line=c["line"],
        function=c["function"],
        fingerprint=c["fingerprint"],
        status=c["status"],
        rules=tuple(c.get("rules", ())),
        reason=c.get("reason"),
        when=tuple(c.get("when", ())),
        keys=tuple(c.get("keys", ())),
        requires=c["requires"],
        only=tuple((k, op, tuple(v)) for k, op, v in c.get("only", ())),
    )


@cache
def upstream_checks() -> tuple[UpstreamCheck, ...]:
    """Every classified upstream check, file by file in line order."""
    return tuple(
        _check(c, f["file"], f["repo"]) for f in _data("upstream.yaml")["files"] for c in f["checks"]
    )


_CHECK_LINE = "  - {id: "
_STATUS = re.compile(r"\bstatus: (\w+)")


@cache
def _open_inventory() -> tuple[dict[str, int], tuple[UpstreamCheck, ...]]:
    """(checks per status, the not-modelled checks in source order), read from upstream.yaml's lines: the
    generator writes one check per line, so a judging tool parses only the few open ones (the whole file takes
    ~80 ms of YAML, most of a cold plan's start). test_upstream_inventory holds it equal to the full parse."""
    counts = dict.fromkeys(STATUSES, 0)
    open_checks = []
    file = repo = ""
    text = resources.files(__package__).joinpath("upstream.yaml").read_text()
    for line in text.splitlines():
        if line.startswith("- file: "):
            file = line.removeprefix("- file: ").strip()
        elif line.startswith("  repo: "):
            repo = line.removeprefix("  repo: ").strip()
        elif line.startswith(_CHECK_LINE):
            status = _STATUS.search(line).group(1)
            counts[status] += 1
            if status == "not_modelled":
                open_checks.append(_check(yaml.load(line.strip()[2:], Loader=_Loader), file, repo))
    return counts, tuple(open_checks)


@cache
def _keys_table() -> dict:
    return _data("upstream_keys.yaml")


def leaf(key: str) -> str:
    """The compared part of a key: 'model.cuda_graph_impl' -> 'cuda_graph_impl'; env:NAME stays whole."""
    return key if key.startswith("env:") else key.rsplit(".", 1)[-1]


def key_names(written: str) -> set[str]:
    """The upstream keys a flag or key as written sets: every part of a dotted key but a ConfigContainer section
    (dataset.offline_packing_specs.pad_cu_seqlens sets offline_packing_specs and pad_cu_seqlens)."""
    if written.startswith("env:"):
        return {written}
    sections = set(_keys_table()["sections"])
    parts = written.split(".")
    return {p for i, p in enumerate(parts) if p and not (i == 0 and p in sections and len(parts) > 1)}


def request_values(cfg: TrainingConfig) -> dict[str, Any]:
    """Upstream key (its compared part) -> its value, for the keys a not-modelled check's guard reads and the
    request fields whose value is the upstream key's own (not the folded ones: the dispatcher, the precision
    recipe, ...)."""
    return {key: getattr(cfg, name) for name, key in _guarded_fields()}


@cache
def _guarded_fields() -> tuple[tuple[str, str], ...]:
    table = _keys_table()
    guarded = {leaf(k) for c in _open_inventory()[1] for k, _, _ in c.only}
    return tuple(
        (name, leaf(key))
        for name, keys in table["fields"].items()
        if name not in table["no_values"]
        for key in keys
        if leaf(key) in guarded
    )


@cache
def _field_keys() -> tuple[tuple[str, Any, tuple[str, ...]], ...]:
    """(request field, its default, the upstream keys it sets), read once from upstream_keys.yaml."""
    fields = TrainingConfig.model_fields
    return tuple((name, fields[name].default, tuple(keys)) for name, keys in _keys_table()["fields"].items())


@cache
def _source_order() -> dict[str, int]:
    return {c.id: i for i, c in enumerate(_open_inventory()[1])}


def request_keys(cfg: TrainingConfig, model: ModelSpec | None = None) -> dict[str, str]:
    """Upstream key -> the request field that sets it (fields away from their default), and the keys the model's
    own architecture sets (MLA, DSA, a hybrid pattern, MTP, ...) as "the model's <key>"."""
    out: dict[str, str] = {}
    for name, default, keys in _field_keys():
        if getattr(cfg, name) != default:
            for key in keys:
                out.setdefault(key, name)
    if model is not None:
        out.update(model_keys(model))
    return out


def model_keys(model: ModelSpec) -> dict[str, str]:
    """The upstream keys a model sets by its architecture, each labelled "the model's <key>"."""
    out: dict[str, str] = {}
    for attr, keys in _keys_table()["model"].items():
        if getattr(model, attr, None) not in (None, False, 0, ""):
            for key in keys:
                out.setdefault(key, f"the model's {key}")
    return out


@cache
def _by_when() -> dict[str, tuple[UpstreamCheck, ...]]:
    """Not-modelled checks by the keys that reach them (common keys left out)."""
    common = set(_keys_table()["common"])
    index: dict[str, list[UpstreamCheck]] = {}
    for c in _open_inventory()[1]:
        for key in {leaf(k) for k in c.when} - common:
            index.setdefault(key, []).append(c)
    return {k: tuple(v) for k, v in index.items()}


# Checks of one front end do not run under the other: validate_args only under Megatron-LM, Bridge's only under Bridge.
_OTHER_FRONT_END = {"bridge": "LM", "megatron-lm": "Bridge"}


def reached(
    set_keys: Mapping[str, str], launcher: str, values: Mapping[str, Any] | None = None
) -> list[NotChecked]:
    """The not-modelled checks that the set keys (upstream key -> how the request wrote it) reach under the
    launcher (bridge or megatron-lm), in source order; a check whose guard a known value makes false is left out
    (``values``: upstream key -> value, where the request says it)."""
    hits: dict[str, tuple[UpstreamCheck, list[str]]] = {}
    index = _by_when()
    skip = _OTHER_FRONT_END[launcher]
    known = {leaf(k): v for k, v in (values or {}).items()}
    for key, written in set_keys.items():
        for check in index.get(leaf(key), ()):
            if check.repo == skip or check.excluded_by(known):
                continue
            entry = hits.setdefault(check.id, (check, []))
            if written not in entry[1]:
                entry[1].append(written)
    order = _source_order()
    return [
        NotChecked(keys=sorted(keys), requires=check.requires, source=check.source, id=check.id)
        for check, keys in sorted(hits.values(), key=lambda h: order[h[0].id])
    ]


def not_checked(cfg: TrainingConfig, model: ModelSpec | None = None) -> list[NotChecked]:
    """What a judging tool lists under not_checked for a request: the not-modelled upstream checks it reaches."""
    return reached(request_keys(cfg, model), cfg.launcher, request_values(cfg))


def not_checked_written(written: Mapping[str, str], launcher: str, values: Mapping[str, Any] | None = None
                        ) -> list[NotChecked]:  # fmt: skip
    """The same for a launch: upstream key (a flag's dest, an override key's parts, env:NAME) -> the flag or
    key as written, and the values the launch gives them."""
    keys: dict[str, str] = {}
    for name, shown in written.items():
        for key in key_names(name):
            keys.setdefault(key, shown)
    return reached(keys, launcher, {leaf(k): v for k, v in (values or {}).items()})


@cache
def checked() -> Checked:
    """The coverage every judging result states: rules run, upstream checks they model, applicable checks."""
    counts = _open_inventory()[0]
    return Checked(
        rules=len(rule_table()),
        upstream=counts["modelled"],
        applicable=counts["modelled"] + counts["not_modelled"],
    )


def coverage(cfg: TrainingConfig, model: ModelSpec | None = None) -> dict[str, object]:
    """not_checked and checked for a judging result on this request (splat into the result)."""
    return {"not_checked": not_checked(cfg, model), "checked": checked()}


def inventory_rows(status: str | None = None) -> list[dict[str, Any]]:
    """Every upstream check as `moe-lc rules --upstream` and moe-lc://rules/upstream give it: where it is, what it
    requires (our words), its status and the rule codes that model it or the reason it does not apply."""
    reasons = upstream_reasons()
    return [
        {"id": c.id, "file": c.source.rsplit(":", 1)[0], "line": c.line, "function": c.function,
         "message": c.requires, "status": c.status, "rule": list(c.rules) or None,
         "reason": reasons[c.reason] if c.reason else None}
        for c in upstream_checks() if status in (None, c.status)
    ]  # fmt: skip


def coverage_by_file() -> list[dict[str, Any]]:
    """Per upstream file: checks, modelled, not modelled, not applicable, and the share of applicable ones modelled."""
    rows: dict[str, dict[str, Any]] = {}
    for c in upstream_checks():
        file = c.source.rsplit(":", 1)[0]
        row = rows.setdefault(file, {"file": file, "checks": 0, **dict.fromkeys(STATUSES, 0)})
        row["checks"] += 1
        row[c.status] += 1
    for row in rows.values():
        applicable = row["modelled"] + row["not_modelled"]
        row["modelled_share"] = round(row["modelled"] / applicable, 3) if applicable else None
    return list(rows.values())
