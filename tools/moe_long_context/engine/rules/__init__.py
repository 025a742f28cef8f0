"""Rule checks, one module per concern, over a shared rule table (``rules.yaml``, read by ``table``).

The table fixes each rule's code, family, severity, title and source; a check only decides *whether*
a rule fires and words the message and fix with the numbers involved. ``run`` applies every check of
the requested families to a Context.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from ..context import Context
from ..findings import Finding, Severity, sort_findings
from .table import _CHECKS, FAMILIES, Rule, check, finding, rule_table

__all__ = ["FAMILIES", "Rule", "check", "finding", "rule_table", "run", "run_tool"]


def run(ctx: Context, families: Iterable[str] = FAMILIES) -> list[Finding]:
    """Every finding of the given families, errors first."""
    _load_checks()
    found: list[Finding] = []
    for family in families:
        for fn in _CHECKS[family]:
            found.extend(fn(ctx))
    return sort_findings(found)


def run_tool(ctx: Context, families: Iterable[str]) -> list[Finding]:
    """What a tool reports: every finding of its own families, and the errors of all the others.

    One engine, one verdict: a configuration one tool calls invalid is invalid for every tool that receives
    it, whatever families the tool words its advice from.
    """
    own = set(families)
    found = run(ctx)
    return [f for f in found if f.severity is Severity.error or rule_table()[f.code].family in own]


@cache
def _load_checks() -> None:
    from . import (  # noqa: F401
        batch,
        bridge_state_checks,
        cp,
        dsa,
        fsdp,
        graphs,
        hybrid_blocks,
        launcher,
        layout,
        lm_args_features,
        mamba,
        mcore_config_checks,
        mcore_config_more,
        moe,
        optimizer,
        peft,
        pipeline,
        precision,
        providers,
        recompute,
    )
