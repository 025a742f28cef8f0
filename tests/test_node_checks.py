"""Checks with Node.js tools from npm: Claude Code registration, the MCP Inspector CLI, the conformance suite.

Marked ``node`` and left out of ``make test``; ``make check-node`` (run by .ci/run) runs them. Each one is
skipped, with the reason printed, when this machine has no Node.js or no access to the npm registry.
"""

from __future__ import annotations

import pytest
from scripts import check_claude_code, check_conformance, check_inspector
from scripts.harness import Unavailable

pytestmark = [pytest.mark.node, pytest.mark.slow]


def run_check(check) -> list[str]:
    try:
        return check.run(print)
    except Unavailable as exc:
        pytest.skip(f"{check.__name__}: {exc}")


def test_claude_code_lists_the_skill_and_every_tool_in_both_install_scopes():
    assert run_check(check_claude_code) == []


def test_inspector_cli_lists_the_tools_and_calls_one():
    assert run_check(check_inspector) == []


def test_conformance_suite_passes_with_the_committed_expected_failures():
    assert run_check(check_conformance) == []
