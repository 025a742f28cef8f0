"""README and SKILL.md describe lint_config's round trip with the names the tool really returns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from moe_long_context.tools.lint_config import LintConfigResult
from moe_long_context.tools.pick_recompute import PickRecomputeResult
from moe_long_context.tools.repair_choice import MemoryVerdict

ROOT = Path(__file__).resolve().parents[1]


def _lint_text(doc: str) -> str:
    """The paragraphs of a document that talk about lint_config."""
    paragraphs = re.split(r"\n\s*\n", (ROOT / doc).read_text())
    return "\n".join(p for p in paragraphs if "lint_config" in p)


@pytest.mark.parametrize("doc", ["README.md", "SKILL.md"])
def test_docs_describe_the_round_trip_and_the_memory_verdict(doc):
    text = _lint_text(doc)
    assert "round trip" in text
    for field in ("remaining_errors", "corrected_memory"):
        assert f"`{field}`" in text and field in LintConfigResult.model_fields
    assert "`next_steps`" in text and "next_steps" in MemoryVerdict.model_fields
    assert "next_steps" in PickRecomputeResult.model_fields  # the same steps pick_recompute gives
    assert "`MEMORY_OVER_BUDGET`" in text
    assert "GiB" in text and "headroom" in text


def test_readme_says_what_the_corrected_script_keeps():
    text = _lint_text("README.md")
    for kept in ("launcher line", "`export` lines", "comments", "continuations"):
        assert kept in text
