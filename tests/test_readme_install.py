"""The README's two Claude Code install ways, run as written in a fresh HOME and a fresh project.

This runs the shell steps (no Node.js needed); scripts/check_claude_code.py runs the same steps and then
asks Claude Code what it lists (``make check-node``)."""

from __future__ import annotations

from scripts import readme_install
from scripts.harness import REPO


def test_readme_has_both_install_ways():
    blocks = readme_install.install_blocks()
    assert "mkdir -p ~/.claude/skills" in blocks["user"]
    assert 'mkdir -p "$PROJECT/.claude/skills"' in blocks["project"]
    assert all(block.rstrip().endswith("pip install -e .") for block in blocks.values())


def test_user_scope_install_works_in_a_fresh_home(tmp_path):
    home = tmp_path / "home"
    assert readme_install.run_install("user", home, tmp_path / "unused") == []
    assert (home / ".claude/skills/nemo-mbridge-perf-moe-long-context/SKILL.md").is_file()


def test_project_scope_install_works_in_a_fresh_project(tmp_path):
    project = tmp_path / "new" / "project"  # does not exist yet
    assert readme_install.run_install("project", tmp_path / "home", project) == []
    assert (project / ".claude/skills/nemo-mbridge-perf-moe-long-context").resolve() == REPO.resolve()
    assert (project / ".mcp.json").is_file()


def test_a_failing_step_is_reported(tmp_path):
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "skills").write_text("a file where the folder should be")
    problems = readme_install.run_install("user", home, tmp_path / "unused")
    assert len(problems) == 1 and problems[0].startswith("user install as the README writes it failed")
