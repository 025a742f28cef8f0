"""SKILL.md: Agent Skills frontmatter (the spec's fields and limits) and a body that points at the tools."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from moe_long_context import __version__
from moe_long_context.faces.registry import TOOLS

ROOT = Path(__file__).resolve().parents[1]
ALLOWED_KEYS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}


def split_skill() -> tuple[dict, str]:
    text = (ROOT / "SKILL.md").read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?)\n---\n(.*)", text, re.DOTALL)
    assert match, "SKILL.md must start with a --- frontmatter block"
    return yaml.safe_load(match.group(1)), match.group(2)


def test_frontmatter_follows_the_agent_skills_spec():
    meta, _ = split_skill()
    assert set(meta) <= ALLOWED_KEYS
    assert meta["name"] == "nemo-mbridge-perf-moe-long-context"
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", meta["name"]) and len(meta["name"]) <= 64
    assert 1 <= len(meta["description"]) <= 1024 and not set("<>") & set(meta["description"])
    assert "Use when" in meta["description"]
    assert meta["license"] == "Apache-2.0"
    assert len(meta["compatibility"]) <= 500
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta["metadata"].items())
    assert {"author", "version", "tags"} <= set(meta["metadata"])
    assert meta["metadata"]["version"] == __version__


def test_body_is_short_and_names_every_tool():
    _, body = split_skill()
    assert len(body.splitlines()) < 500
    for tool in TOOLS:
        assert f"`{tool.name}`" in body, f"SKILL.md does not tell the agent about {tool.name}"
