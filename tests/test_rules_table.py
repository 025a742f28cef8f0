"""The rule table: every code is sourced, used by a check, and every code a check uses is in the table."""

from __future__ import annotations

import re
from pathlib import Path

from moe_long_context.engine.rules import FAMILIES, rule_table

PACKAGE = Path(__file__).resolve().parents[1] / "tools" / "moe_long_context"


def _codes_in_source() -> set[str]:
    """Quoted codes in the engine; the evals package (a face quoting codes and environment variables) is not."""
    text = "\n".join(
        p.read_text() for p in PACKAGE.rglob("*.py") if "evals" not in p.relative_to(PACKAGE).parts
    )
    return set(re.findall(r'"([A-Z][A-Z0-9]+(?:_[A-Z0-9]+)+)"', text))


def test_every_rule_has_a_source_severity_and_family():
    table = rule_table()
    assert len(table) >= 80
    for rule in table.values():
        assert rule.family in FAMILIES
        assert rule.when in {"config", "init", "build", "runtime"}
        assert rule.title.endswith((".", ")"))
        assert any(tag in rule.source for tag in ("MCore", "LM ", "Bridge", "TE ", "engine")), rule.code


def test_every_error_cites_megatron_te_or_bridge_code():
    for rule in rule_table().values():
        if rule.severity.value == "error":
            assert not rule.source.startswith("engine"), rule.code
            assert re.search(r"\.py", rule.source), rule.code


def test_codes_used_in_checks_exist_and_every_rule_is_checked():
    used = _codes_in_source() - {"INPUT_ERROR"}
    table = set(rule_table())
    unknown = {c for c in used if c not in table and c.isupper() and "_" in c}
    # constants that are not rule codes
    unknown -= {
        "MAX_GPUS",
        "MAX_SEQ_LEN",
        "RECOMPUTE_MODULES",
        "FP8_RECIPES",
        "CUDA_GRAPH_MODULES",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_GRAPHS_USE_NODE_PRIORITY",
        "LM_ONLY_FLAGS",
        "NVTE_CUTEDSL_FUSED_GROUPED_MLP",
    }
    assert not unknown, unknown
    unchecked = table - used
    assert not unchecked, f"rules no check emits: {sorted(unchecked)}"
