"""Install the skill as the README documents into a throw-away HOME and read Claude Code's start-up event.

Without credentials, ``claude -p hi --output-format stream-json --verbose`` still prints the system/init
event listing skills, slash commands, MCP servers and tools. The README's two install ways are run as
written (scripts/readme_install.py), each in a fresh HOME:
- user scope: ~/.claude/skills/nemo-mbridge-perf-moe-long-context links to the repository (a skills-dir
  plugin: the skill and the server of .mcp.json, from one folder);
- project scope: <project>/.claude/skills/nemo-mbridge-perf-moe-long-context links to the repository and
  the repository's .mcp.json is copied to the project root.
In both, the skill and every registry tool must be listed and the server connected. The server is started
by the moe-lc console script installed next to the running Python (the README's pip install step).
Claude Code is the pinned CLAUDE_CODE_VERSION, and the check fails if ``claude --version`` says otherwise.

Run: python -m scripts.check_claude_code   (exit 0 passed, 1 failed, 77 could not run here)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from moe_long_context.faces.registry import TOOLS
from scripts import readme_install
from scripts.harness import CheckFailed, console_script, main, npm_install, system_node

# The version the README names; it also names the oldest found to list every tool (2.1.197 does, once the
# session waits for the server to connect: see start_event).
CLAUDE_CODE_VERSION = "2.1.332"
SKILL = readme_install.SKILL
SERVER = "moe-lc"  # the server's key in .mcp.json


def claude_code(version: str = CLAUDE_CODE_VERSION) -> Path:
    """The pinned Claude Code, installed under build/npm once; fails if it reports another version."""
    claude = npm_install(f"@anthropic-ai/claude-code@{version}") / "node_modules" / ".bin" / "claude"
    proc = subprocess.run([str(claude), "--version"], capture_output=True, text=True, timeout=60, check=False)
    if not proc.stdout.strip().startswith(version):
        raise CheckFailed(
            f"claude --version says {proc.stdout.strip() or proc.stderr.strip()!r}, not {version}"
        )
    return claude


def start_event(claude: Path, home: Path, cwd: Path) -> dict:
    """Claude Code's system/init event for a session in ``cwd`` with ``home`` as HOME."""
    path = [str(console_script().parent), str(Path(system_node()).parent), "/usr/bin", "/bin"]
    env = {
        "HOME": str(home),
        "PATH": os.pathsep.join(dict.fromkeys(path)),
        "LANG": "C.UTF-8",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # Headless sessions do not wait for MCP servers by default: one still starting is listed as
        # "pending" with no tools (2.1.197 and 2.1.332 alike, on a loaded machine). Wait, as the README says.
        "MCP_CONNECTION_NONBLOCKING": "false",
    }
    command = [str(claude), "-p", "hi", "--output-format", "stream-json", "--verbose"]
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False)
    for line in proc.stdout.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("type") == "system" and event.get("subtype") == "init":
            return event
    raise CheckFailed(f"claude printed no system/init event (exit {proc.returncode}): {proc.stderr[-500:]}")


def registration_problems(event: dict, scope: str) -> list[str]:
    problems = []
    if SKILL not in event.get("skills", []):
        problems.append(f"{scope}: skill {SKILL} not listed in {event.get('skills')}")
    if SKILL not in event.get("slash_commands", []):
        problems.append(f"{scope}: no /{SKILL} slash command")
    servers = [s for s in event.get("mcp_servers", []) if s["name"].split(":")[-1] == SERVER]
    if [s.get("status") for s in servers] != ["connected"]:
        problems.append(f"{scope}: MCP server {SERVER} not connected: {event.get('mcp_servers')}")
    listed = [t for t in event.get("tools", []) if t.startswith("mcp__") and f"{SERVER}__" in t]
    for tool in TOOLS:
        if not any(name.endswith(f"{SERVER}__{tool.name}") for name in listed):
            problems.append(f"{scope}: tool {tool.name} not listed (MCP tools: {listed})")
    return problems


def run(log: Callable[[str], None], version: str = CLAUDE_CODE_VERSION) -> list[str]:
    claude = claude_code(version)
    log(f"Claude Code {version}")
    problems = []
    with tempfile.TemporaryDirectory(prefix="moe-lc-claude-") as tmp:
        root = Path(tmp)
        # user scope: ~/.claude/skills/<skill> brings the skill and the server
        home, project = root / "home", root / "project"
        project.mkdir()
        problems += readme_install.run_install("user", home, project)
        skill_dir = home / ".claude" / "skills" / SKILL
        proc = subprocess.run(
            [str(claude), "plugin", "validate", "--strict", str(skill_dir)],
            env={**os.environ, "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            problems.append(
                f"claude plugin validate --strict failed: {proc.stdout[-800:]}{proc.stderr[-400:]}"
            )
        event = start_event(claude, home, project)
        log(f"user scope: skills {event.get('skills')[:1]}, servers {event.get('mcp_servers')}")
        problems += registration_problems(event, "user scope")
        # project scope: the skill under <project>/.claude/skills and the repository's .mcp.json at the root
        home, project = root / "home2", root / "project2"
        problems += readme_install.run_install("project", home, project)
        event = start_event(claude, home, project)
        log(f"project scope: skills {event.get('skills')[:1]}, servers {event.get('mcp_servers')}")
        problems += registration_problems(event, "project scope")
    return problems


if __name__ == "__main__":
    sys.exit(main(run, "Claude Code registration check"))
