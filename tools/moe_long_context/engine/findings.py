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


class NotChecked(BaseModel):
    """A part of the configuration no rule of the engine decides: an upstream check it reaches that the engine
    does not model (its file:line and what it requires), or a flag or key the engine does not read."""

    model_config = ConfigDict(frozen=True)

    keys: list[str] = Field(
        description="The request fields (or the flags and keys as written) that reach it."
    )
    requires: str = Field(
        description="What the upstream check requires, or why the flag or key is not checked."
    )
    source: str | None = Field(
        default=None, description="The upstream check: file:line and version; None for a flag no check reads."
    )
    id: str | None = Field(default=None, description="The check's id in `moe-lc rules --upstream`.")

    def label(self) -> str:
        """One short line: the source and what it requires, or the flag and why."""
        if self.source is None:
            return " ".join(self.keys) + (f" ({self.requires})" if self.requires else "")
        return f"{self.source} ({', '.join(self.keys)}): {self.requires}"


class Checked(BaseModel):
    """What a clean result covers: every rule ran, and these upstream checks are the ones the rules model."""

    model_config = ConfigDict(frozen=True)

    rules: int = Field(description="Rule codes the engine evaluated (every family; `moe-lc rules`).")
    upstream: int = Field(
        description="Upstream config-time checks those rules model (`moe-lc rules --upstream`)."
    )
    applicable: int = Field(
        description="Upstream checks that apply to MoE training; the rest of them are not modelled and, when the "
        "configuration reaches one, listed under not_checked."
    )


class Judged(BaseModel):
    """The coverage fields of every judging result: what it could not check, and what a clean result covers."""

    not_checked: list[NotChecked] = Field(
        description="Upstream checks the configuration reaches that no rule of the engine models (file:line and "
        "what each requires): unverified, not approved. Empty when every check it reaches is modelled."
    )
    checked: Checked = Field(
        description="Rules run and the upstream checks they model: what a result without errors covers."
    )
