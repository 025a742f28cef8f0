"""`moe-lc serve`: address parsing, DNS-rebinding settings, and a CLI that stays free of the MCP SDK."""

from __future__ import annotations

import subprocess
import sys

import pytest

from moe_long_context.cli import main
from moe_long_context.faces.server import parse_bind, transport_security


def test_the_cli_imports_the_mcp_sdk_only_to_serve():
    code = (
        "import sys, moe_long_context.cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'mcp'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("text", "bind"),
    [("127.0.0.1:8765", ("127.0.0.1", 8765)), ("8765", ("127.0.0.1", 8765)), ("[::1]:80", ("::1", 80))],
)
def test_bind_addresses(text, bind):
    assert parse_bind(text) == bind


@pytest.mark.parametrize("text", ["nope", "127.0.0.1:0", "127.0.0.1:70000", "localhost:"])
def test_serve_refuses_a_bad_address(capsys, text):
    assert main(["serve", "--http", text]) == 2
    assert f"--http={text!r} is not allowed: HOST:PORT" in capsys.readouterr().err


def test_dns_rebinding_protection_names_only_this_server():
    loopback = transport_security("127.0.0.1", 8765, [])
    assert loopback.enable_dns_rebinding_protection
    assert loopback.allowed_hosts == ["127.0.0.1:8765", "[::1]:8765", "localhost:8765"]
    assert "http://localhost:8765" in loopback.allowed_origins
    public = transport_security("0.0.0.0", 8765, ["planner.example"])
    assert public.allowed_hosts == ["0.0.0.0:8765", "planner.example:8765"]
