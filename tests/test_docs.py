"""Generated references stay in step with the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from moe_long_context.cli import main
from moe_long_context.engine.rules import rule_table
from moe_long_context.faces.docs import PAGES
from moe_long_context.faces.registry import TOOLS

REFERENCES = Path(__file__).resolve().parents[1] / "references"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_generated_page_is_current(name):
    committed = (REFERENCES / name).read_text()
    assert committed == PAGES[name]() + "\n", (
        f"references/{name} is stale: run moe-lc docs --write references/"
    )


def test_pages_cover_every_rule_and_tool():
    rules = (REFERENCES / "rules.md").read_text()
    assert all(f"`{code}`" in rules for code in rule_table())
    tools = (REFERENCES / "tools.md").read_text()
    for tool in TOOLS:
        assert f"## `{tool.name}`" in tools
        assert all(f"| `{name}` |" in tools for name in tool.request.model_fields)


def test_docs_check_command(tmp_path, capsys):
    assert main(["docs", "--check", str(REFERENCES)]) == 0
    (tmp_path / "rules.md").write_text("old\n")
    assert main(["docs", "--check", str(tmp_path)]) == 1
    assert "stale" in capsys.readouterr().err


def test_skill_model_block_is_current():
    """SKILL.md's model paragraph lists the families the loader supports, generated from its tables."""
    from moe_long_context.faces.families_doc import with_skill_block
    from moe_long_context.model.hf import supported_model_types

    skill = (REFERENCES.parent / "SKILL.md").read_text()
    assert with_skill_block(skill) == skill, (
        "SKILL.md's model block is stale: run moe-lc docs --write references/"
    )
    families = (REFERENCES / "families.md").read_text()
    assert all(f"`{t}`" in skill and f"| `{t}` |" in families for t in supported_model_types())


def test_types_in_the_tools_page_are_types_a_reader_knows():
    """A constrained list (list[Annotated[int, Field(ge=1)]]) is written list[int], not list[Annotated]."""
    from moe_long_context.faces.docs import PAGES

    page = PAGES["tools.md"]()
    assert "Annotated" not in page and "typing." not in page and "<class" not in page
    assert "| `hierarchical_cp_sizes` | list[int] \\| null |" in page
