"""Claude Code packaging: plugin manifest and .mcp.json agree with the package they launch."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from moe_long_context import __version__
from moe_long_context.faces.server_content import SKILL_NAME

ROOT = Path(__file__).resolve().parents[1]


def test_plugin_manifest_makes_the_root_the_skill():
    plugin = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text())
    assert plugin["name"] == SKILL_NAME and plugin["version"] == __version__
    assert plugin["skills"] == ["./"] and (ROOT / "SKILL.md").is_file()
    assert plugin["license"] == "Apache-2.0"


def test_mcp_json_launches_the_installed_console_script():
    servers = json.loads((ROOT / ".mcp.json").read_text())["mcpServers"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert servers == {"moe-lc": {"type": "stdio", "command": "moe-lc", "args": ["serve"]}}
    assert scripts["moe-lc"] == "moe_long_context.cli:main"
