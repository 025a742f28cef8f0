"""The rule table (``rules.yaml`` and its ``rules_<area>.yaml`` siblings) and the registry of checks that the
rule modules fill.

The table fixes each rule's code, family, severity, title and source; ``finding`` builds a Finding from it,
and ``check`` registers a function under a family for ``rules.run``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources

from ...model.yaml_data import load_data_yaml
from ..context import Context
from ..findings import Finding, Severity

FAMILIES = (
    "layout",
    "pipeline",
    "batch",
    "sequence",
    "cp",
    "graphs",
    "recompute",
    "moe",
    "precision",
    "optimizer",
    "launch",
    "memory",
    "throughput",
)


@dataclass(frozen=True)
class Rule:
    code: str
    family: str
    severity: Severity
    when: str
    title: str
    source: str


def _table_texts() -> list[str]:
    """rules.yaml, then every rules_<area>.yaml beside it (one file per area of the upstream inventory)."""
    folder = resources.files(__package__)
    extra = sorted(
        f.name for f in folder.iterdir() if f.name.startswith("rules_") and f.name.endswith(".yaml")
    )
    return [folder.joinpath(name).read_text() for name in ["rules.yaml", *extra]]


@cache
def rule_table() -> dict[str, Rule]:
    entries = [entry for text in _table_texts() for entry in load_data_yaml(text)]
    table = {}
    for entry in entries:
        rule = Rule(
            code=entry["code"],
            family=entry["family"],
            severity=Severity(entry["severity"]),
            when=entry["when"],
            title=entry["title"],
            source=entry["source"],
        )
        if rule.code in table:
            raise ValueError(f"duplicate rule code {rule.code}")
        if rule.family not in FAMILIES:
            raise ValueError(f"rule {rule.code} has unknown family {rule.family}")
        table[rule.code] = rule
    return table


def finding(code: str, message: str, fix: str | None = None, keys: Iterable[str] = ()) -> Finding:
    """A Finding for rule ``code``; severity and source come from the rule table."""
    rule = rule_table()[code]
    return Finding(
        severity=rule.severity,
        code=code,
        message=message,
        fix=fix,
        keys=list(keys),
        source=rule.source,
    )


Check = Callable[[Context], Iterator[Finding]]
_CHECKS: dict[str, list[Check]] = {family: [] for family in FAMILIES}


def check(family: str) -> Callable[[Check], Check]:
    """Register a check function under a family."""

    def register(fn: Check) -> Check:
        _CHECKS[family].append(fn)
        return fn

    return register
