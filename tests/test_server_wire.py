"""MCP face over real transports: a stdio subprocess and a streamable-HTTP server on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from mcp import Client, StdioServerParameters
from scripts.harness import http_server

from moe_long_context.faces.registry import TOOLS
from server_cases import BAD_CALLS, VALID_CALLS

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVER = [sys.executable, "-m", "moe_long_context.server"]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


async def exercise(client: Client) -> None:
    """The same checks over any transport: the tool list, valid calls with values, bad calls with reasons."""
    listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == [t.name for t in TOOLS]
    assert all(t.output_schema and t.annotations.read_only_hint for t in listed)
    for name, arguments, expected in VALID_CALLS:
        result = await client.call_tool(name, arguments)
        assert not result.is_error, result.content
        assert {k: result.structured_content[k] for k in expected} == expected
    for name, arguments, words in BAD_CALLS:
        result = await client.call_tool(name, arguments)
        assert result.is_error and all(word in result.content[0].text for word in words), result.content


async def test_stdio_subprocess():
    params = StdioServerParameters(command=SERVER[0], args=SERVER[1:])
    async with Client(params, mode="legacy") as client:
        await exercise(client)


def test_stdio_survives_lines_that_are_not_json_rpc():
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "size_cp", "arguments": [1]},
    }
    lines = ["{not json", json.dumps(INITIALIZE), '{"jsonrpc": "2.0", "id": 9}', json.dumps(call)]
    proc = subprocess.Popen(
        SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        proc.stdin.write("\n".join(lines) + "\n")
        proc.stdin.flush()
        answers = {}
        while set(answers) != {1, 2}:  # keep stdin open until both answers are in: EOF ends the session
            line = proc.stdout.readline()
            assert line, f"the server stopped: {proc.stderr.read() if proc.poll() is not None else ''}"
            message = json.loads(line)
            answers[message["id"]] = message
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert answers[1]["result"]["serverInfo"]["name"] == "nemo-mbridge-perf-moe-long-context"
    assert answers[2]["error"]["code"] == -32602  # arguments that are not an object: invalid params


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with http_server() as url:
        yield url


async def test_http_server(http_url):
    async with Client(http_url, mode="legacy") as client:
        await exercise(client)


def post(url: str, body: bytes, host: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if host:
        headers["Host"] = host
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def declared_too_large(url: str) -> int:
    """Status for a request declaring a body over the server's limit (refused before the body is read)."""
    host, port = url.split("/")[2].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest("POST", "/mcp")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(2 * 1024 * 1024))
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_http_refuses_foreign_hosts_malformed_and_oversized_requests(http_url):
    port = http_url.split(":")[2].split("/")[0]
    assert post(http_url, json.dumps(INITIALIZE).encode(), host=f"attacker.example:{port}")[0] == 421
    status, body = post(http_url, b"{not json")
    assert status == 400 and json.loads(body)["error"]["code"] == -32700
    assert declared_too_large(http_url) == 413
    assert post(http_url, json.dumps(INITIALIZE).encode())[0] == 200  # and it still serves
