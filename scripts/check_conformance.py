"""The MCP protocol conformance suite (pinned, on Node 22) against ``moe-lc serve --http``.

Runs every server scenario with the committed expected-failures file (fixture-dependent scenarios, each
named with its reason): the suite fails on a failure not listed there and on a listed scenario that now
passes. Then reads the results to confirm each generic scenario ran and all its checks succeeded.

Run: python -m scripts.check_conformance   (exit 0 passed, 1 failed, 77 could not run here)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from scripts.harness import REPO, http_server, main, node22, npm_install, package_bin

CONFORMANCE = "@modelcontextprotocol/conformance@0.1.16"
EXPECTED_FAILURES = Path(__file__).with_name("conformance-expected-failures.yml")
RESULTS = REPO / "build" / "mcp-conformance"  # not build/conformance: make conformance keeps its venv there
GENERIC = (
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "prompts-list",
    "completion-complete",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
)


def scenario_problems(results: Path) -> list[str]:
    """Each generic scenario has a result folder and every check in it succeeded."""
    problems = []
    for scenario in GENERIC:
        folders = sorted(results.glob(f"server-{scenario}-*"))
        if not folders:
            problems.append(f"{scenario}: no results (did the scenario run?)")
            continue
        checks = json.loads((folders[-1] / "checks.json").read_text())
        failed = [c.get("name") for c in checks if c.get("status") not in ("SUCCESS", "INFO")]
        if not checks or failed:
            problems.append(f"{scenario}: checks not successful: {failed or 'none ran'}")
    return problems


def run(log: Callable[[str], None]) -> list[str]:
    node = node22()
    suite = package_bin(npm_install(CONFORMANCE), "@modelcontextprotocol/conformance")
    shutil.rmtree(RESULTS, ignore_errors=True)
    with http_server() as url:
        command = [node, str(suite), "server", "--url", url, "--suite", "all"]
        command += ["--expected-failures", str(EXPECTED_FAILURES), "-o", str(RESULTS)]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    summary = proc.stdout[proc.stdout.find("=== SUMMARY ===") :].strip()
    log(summary or proc.stdout[-2000:])
    problems = [] if proc.returncode == 0 else [f"the suite exited {proc.returncode}: {proc.stderr[-800:]}"]
    return problems + scenario_problems(RESULTS)


if __name__ == "__main__":
    sys.exit(main(run, "MCP conformance check"))
