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
