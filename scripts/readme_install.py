"""The README's two Claude Code install ways, run as written in a fresh HOME and a fresh project.

The two ``sh`` blocks of the README section "Use it from Claude Code" are the user-scope and the
project-scope install. ``run_install`` runs one with bash from the checkout (``$PWD`` is the repository)
with HOME set to a new directory; the project block's ``PROJECT=...`` line is pointed at a new directory.
The blocks end with ``pip install -e .``: that step is what ``make`` already did for the venv running this
check (its ``moe-lc`` is the server Claude Code starts), so here ``pip`` is a shell function that records
its arguments and where it ran, which the caller checks, instead of installing the package a second time.

Used by scripts/check_claude_code.py (with Claude Code, ``make check-node``) and tests/test_readme_install.py
(the shell steps alone, in ``make test``).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from scripts.harness import REPO, CheckFailed

README = REPO / "README.md"
SECTION = "## Use it from Claude Code"
SKILL = "nemo-mbridge-perf-moe-long-context"
PROJECT_LINE = re.compile(r"^PROJECT=\S+", re.M)
# Records what the README runs pip with, and where, instead of installing a second time (see above).
PIP_RECORDER = 'pip() { printf "%s\\n%s\\n" "$PWD" "$*" > "$MOE_LC_PIP_LOG"; }\n'


def install_blocks() -> dict[str, str]:
    """{'user': block, 'project': block}: the sh blocks of the README's Claude Code section, in order."""
    text = README.read_text(encoding="utf-8")
    if SECTION not in text:
        raise CheckFailed(f"README.md has no section {SECTION!r}")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    if len(blocks) != 2:
        raise CheckFailed(f"README.md {SECTION!r} has {len(blocks)} sh blocks, not the two install ways")
    if not PROJECT_LINE.search(blocks[1]):
        raise CheckFailed("the README's project install does not start by naming the project (PROJECT=...)")
    return {"user": blocks[0], "project": blocks[1]}


def run_install(scope: str, home: Path, project: Path) -> list[str]:
    """Run the README's ``scope`` install with HOME=home (and the project at ``project``); return problems."""
    block = install_blocks()[scope]
    if scope == "project":
        block = PROJECT_LINE.sub(f"PROJECT={project}", block, count=1)
    home.mkdir(parents=True, exist_ok=True)
    pip_log = home.parent / f"pip-{scope}.log"
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "MOE_LC_PIP_LOG": str(pip_log),
    }
    script = "set -eu\n" + PIP_RECORDER + block
    proc = subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        return [
            f"{scope} install as the README writes it failed (exit {proc.returncode}): {proc.stderr.strip()}"
        ]
    skills = home / ".claude" / "skills" if scope == "user" else project / ".claude" / "skills"
    problems = []
    link = skills / SKILL
    if not (link / "SKILL.md").is_file() or link.resolve() != REPO.resolve():
        problems.append(f"{scope} install: {link} does not lead to this repository's SKILL.md")
    if scope == "project" and (project / ".mcp.json").read_bytes() != (REPO / ".mcp.json").read_bytes():
        problems.append(f"project install: {project / '.mcp.json'} is not the repository's .mcp.json")
    ran = pip_log.read_text().splitlines() if pip_log.is_file() else []
    if ran != [str(REPO), "install -e ."]:
        problems.append(f"{scope} install: expected 'pip install -e .' in {REPO}, got {ran}")
    return problems
