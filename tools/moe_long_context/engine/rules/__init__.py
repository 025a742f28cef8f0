"""Rule checks, one module per concern, over a shared rule table (``rules.yaml``, read by ``table``).

The table fixes each rule's code, family, severity, title and source; a check only decides *whether*
a rule fires and words the message and fix with the numbers involved. ``run`` applies every check of
the requested families to a Context.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from ..context import Context
from ..findings import Finding, sort_findings
from .table import _CHECKS, FAMILIES, Rule, check, finding, rule_table

__all__ = ["FAMILIES", "Rule", "check", "finding", "rule_table", "run"]


def run(ctx: Context, families: Iterable[str] = FAMILIES) -> list[Finding]:
    """Every finding of the given families, errors first."""
    _load_checks()
    found: list[Finding] = []
    for family in families:
        for fn in _CHECKS[family]:
            found.extend(fn(ctx))
    return sort_findings(found)


@cache
def _load_checks() -> None:
    from . import batch, cp, dsa, graphs, layout, mamba, moe, optimizer, pipeline, precision, recompute  # noqa: F401  # noqa: F401  (issue 16 layer kinds)
