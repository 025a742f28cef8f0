"""Shared helpers: build tool requests tersely and look findings up by code."""

from __future__ import annotations

import pytest

from moe_long_context.engine.findings import Severity


def codes(result, severity: str | None = None) -> list[str]:
    return [f.code for f in result.findings if severity is None or f.severity == Severity(severity)]


def error_codes(result) -> list[str]:
    return codes(result, "error")


def the(result, code: str):
    """The single finding with this code (fails the test when absent or repeated)."""
    found = [f for f in result.findings if f.code == code]
    assert len(found) == 1, f"expected one {code}, got {[f.code for f in result.findings]}"
    return found[0]


@pytest.fixture
def anyio_backend():
    return "asyncio"
