"""Findings: what a check concluded about a configuration.

A finding is an ``error`` only when Megatron Core, Megatron-LM, Megatron Bridge or Transformer Engine
would actually refuse the configuration (at config, initialisation, model-build or run time) in the
target versions. Advice is a ``warning`` (likely to hurt) or ``info`` (worth knowing).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Severity(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


class Finding(BaseModel):
    """One conclusion about a configuration, with how to act on it and where the rule lives."""

    model_config = ConfigDict(frozen=True)

    severity: Severity = Field(
        description="error: Megatron refuses this; warning: likely harmful; info: FYI."
    )
    code: str = Field(description="Stable rule code, e.g. LAYOUT_WORLD_DIVISIBILITY.")
    message: str = Field(description="What is wrong (or worth knowing), with the numbers involved.")
    fix: str | None = Field(default=None, description="How to fix it, concretely.")
    keys: list[str] = Field(default_factory=list, description="The request fields this finding is about.")
    source: str = Field(description="Where the rule lives: file and version of Megatron / TE / Bridge.")


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity is Severity.error for f in findings)


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.error]


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; stable otherwise; duplicates removed."""
    order = {Severity.error: 0, Severity.warning: 1, Severity.info: 2}
    seen: set[tuple[str, str]] = set()
    unique = []
    for f in findings:
        key = (f.code, f.message)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return sorted(unique, key=lambda f: order[f.severity])
