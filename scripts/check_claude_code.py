"""Install the skill as the README documents into a throw-away HOME and read Claude Code's start-up event.

Without credentials, ``claude -p hi --output-format stream-json --verbose`` still prints the system/init
event listing skills, slash commands, MCP servers and tools. Two installs are checked:
- user scope: the repository at ~/.claude/skills/nemo-mbridge-perf-moe-long-context (a skills-dir plugin:
  the skill and the server of .mcp.json, from one copy);
- project scope: the repository at <project>/.claude/skills/nemo-mbridge-perf-moe-long-context plus the
  repository's .mcp.json copied to the project root.
In both, the skill and every registry tool must be listed and the server connected. The server is started
by the moe-lc console script installed next to the running Python (the README's pip install step).

Run: python -m scripts.check_claude_code   (exit 0 passed, 1 failed, 77 could not run here)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from moe_long_context.faces.registry import TOOLS
from scripts.harness import REPO, CheckFailed, console_script, main, npm_install, system_node

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.332"
SKILL = "nemo-mbridge-perf-moe-long-context"
SERVER = "moe-lc"  # the server's key in .mcp.json
SKIP_DIRS = {
    ".git",
    ".venv",
    "build",
    "node_modules",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
}


def repository_files() -> list[Path]:
    """What a clone of the repository holds (tracked and new files, not ignored ones), relative to it."""
    proc = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode == 0:
        names = [Path(name) for name in proc.stdout.split("\0") if name]
    else:  # not a git checkout: everything but caches and builds
        names = [
            p.relative_to(REPO)
            for p in REPO.rglob("*")
            if not SKIP_DIRS & set(p.relative_to(REPO).parts) and ".egg-info" not in str(p)
        ]
    return [name for name in names if (REPO / name).is_file()]


def copy_repository(dest: Path) -> None:
    for name in repository_files():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)


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


def run(log: Callable[[str], None]) -> list[str]:
    claude = npm_install(CLAUDE_CODE) / "node_modules" / ".bin" / "claude"
    problems = []
    with tempfile.TemporaryDirectory(prefix="moe-lc-claude-") as tmp:
        root = Path(tmp)
        # user scope: one copy in ~/.claude/skills/<skill> brings the skill and the server
        home, project = root / "home", root / "project"
        skill_dir = home / ".claude" / "skills" / SKILL
        copy_repository(skill_dir)
        project.mkdir()
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
        home.mkdir()
        copy_repository(project / ".claude" / "skills" / SKILL)
        shutil.copy2(REPO / ".mcp.json", project / ".mcp.json")
        event = start_event(claude, home, project)
        log(f"project scope: skills {event.get('skills')[:1]}, servers {event.get('mcp_servers')}")
        problems += registration_problems(event, "project scope")
    return problems


if __name__ == "__main__":
    sys.exit(main(run, "Claude Code registration check"))
