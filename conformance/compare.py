"""Compare the engine's verdict with Megatron's on one case, and match differences to the allow-list.

Pure: no Megatron import, so the normal test suite covers it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from moe_long_context.engine.rules import rule_table

from .families import classify

ALLOWLIST = Path(__file__).with_name("allowlist.yaml")
CONFIG_TIME = ("config", "init")  # when Megatron raises at configuration or initialisation time


@dataclass(frozen=True)
class Allowed:
    """A documented, deliberate difference between the engine and Megatron."""

    id: str
    direction: str  # engine-only: the engine reports an error Megatron's checks (as run) do not raise
    # megatron-only: Megatron raises where the engine reports no error
    launchers: tuple[str, ...]
    codes: tuple[str, ...]  # engine-only: the engine rule codes this entry covers
    match: str | None  # megatron-only: regex over "stage | message | source line"
    reason: str
    source: str
    test: str  # a test in tests/ that pins the engine's behaviour

    def covers_code(self, code: str, launcher: str) -> bool:
        return self.direction == "engine-only" and launcher in self.launchers and code in self.codes

    def covers_failure(self, text: str, launcher: str) -> bool:
        return (
            self.direction == "megatron-only"
            and launcher in self.launchers
            and self.match is not None
            and re.search(self.match, text) is not None
        )


def load_allowlist(path: Path = ALLOWLIST) -> list[Allowed]:
    entries = yaml.safe_load(path.read_text()) or []
    table = rule_table()
    out = []
    seen = set()
    for e in entries:
        entry = Allowed(
            id=e["id"],
            direction=e["direction"],
            launchers=tuple(e.get("launchers", ("bridge", "megatron-lm"))),
            codes=tuple(e.get("codes", ())),
            match=e.get("match"),
            reason=e["reason"].strip(),
            source=e["source"],
            test=e["test"],
        )
        if entry.id in seen:
            raise ValueError(f"allow-list: duplicate id {entry.id}")
        seen.add(entry.id)
        if entry.direction not in ("engine-only", "megatron-only"):
            raise ValueError(f"allow-list {entry.id}: direction must be engine-only or megatron-only")
        if entry.direction == "engine-only" and not entry.codes:
            raise ValueError(f"allow-list {entry.id}: engine-only entries name the rule codes they cover")
        if entry.direction == "megatron-only" and not entry.match:
            raise ValueError(f"allow-list {entry.id}: megatron-only entries need a match regex")
        unknown = [c for c in entry.codes if c not in table]
        if unknown:
            raise ValueError(f"allow-list {entry.id}: unknown rule codes {unknown}")
        out.append(entry)
    return out


@dataclass
class Outcome:
    """One case compared."""

    case_id: str
    family: str  # the generator's label
    target: str
    launcher: str
    engine_errors: list[str]  # rule codes
    megatron_failures: list[dict[str, Any]]  # stage, when, family, message, where
    not_run: list[str]
    status: str = ""  # agree-accept | agree-reject | documented | disagree | not-run
    family_match: bool | None = None  # for agree-reject: the engine names a family Megatron raised
    allowed: list[str] = field(default_factory=list)  # allow-list ids that explain the difference
    unverified: list[str] = field(default_factory=list)  # engine errors Megatron's first exception masked
    problems: list[str] = field(default_factory=list)  # what is undocumented

    @property
    def config_time(self) -> bool:
        """Megatron's verdict here rests on configuration/initialisation-time checks only."""
        return all(f["when"] in CONFIG_TIME for f in self.megatron_failures)


def code_family(code: str) -> str:
    return rule_table()[code].family


def compare(
    case_id: str,
    family: str,
    target: str,
    launcher: str,
    engine_errors: list[str],
    failures: list[dict[str, Any]],
    not_run: list[str],
    allowlist: list[Allowed],
) -> Outcome:
    out = Outcome(case_id, family, target, launcher, sorted(set(engine_errors)), failures, not_run)
    for f in failures:
        f.setdefault("family", classify(f["message"], f.get("line", "")))
    if launcher == "megatron-lm" and any(n.startswith("megatron-lm front end") for n in not_run):
        out.status = "not-run"
        return out
    engine_families = {code_family(c) for c in out.engine_errors}
    megatron_families = {f["family"] for f in failures}
    # Engine errors that no Megatron failure of the same family accounts for. When Megatron rejects too,
    # its checks stop at the first exception of each stage, so a second broken rule cannot be confirmed
    # or refuted: such engine errors are listed as unverified, not counted as agreement or disagreement.
    for code in out.engine_errors:
        if code_family(code) in megatron_families:
            continue
        cover = [a.id for a in allowlist if a.covers_code(code, launcher)]
        if cover:
            out.allowed += cover
        elif failures:
            out.unverified.append(code)
        else:
            out.problems.append(
                f"engine error {code} ({code_family(code)}) but Megatron raises no such error"
            )
    # Megatron failures that no engine error of the same family accounts for.
    for f in failures:
        if f["family"] == "unclassified":
            out.problems.append(f"unclassified Megatron failure in {f['stage']}: {f['message'][:120]}")
            continue
        if f["family"] in engine_families:
            continue
        text = f"{f['stage']} | {f['message']} | {f.get('line', '')}"
        cover = [a.id for a in allowlist if a.covers_failure(text, launcher)]
        if cover:
            out.allowed += cover
        else:
            out.problems.append(
                f"Megatron raises in {f['stage']} ({f['family']}: {f['message'][:120]}) but the engine reports "
                "no error of that family"
            )
    out.allowed = sorted(set(out.allowed))
    if out.engine_errors and failures:
        out.family_match = bool(engine_families & megatron_families)
    if out.problems:
        out.status = "disagree"
    elif out.allowed:
        out.status = "documented"
    else:
        out.status = "agree-reject" if failures else "agree-accept"
    return out
