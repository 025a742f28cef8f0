"""MCP face over real transports: a stdio subprocess and a streamable-HTTP server on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import queue
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
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


def _call(ident: int, arguments: object) -> str:
    params = {"name": "size_cp", "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})


def _nested(depth: int) -> dict:
    value: dict = {"model": "dsv3", "seq_len": 8192}
    for _ in range(depth):
        value = {"x": value}
    return value


# (line, JSON-RPC error code, id of the answer): every line the SDK's reader cannot read gets its error
BAD_LINES = [
    ('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"size_cp","argu', -32700, None),
    ("{not json", -32700, None),
    (_call(3, {"model": "\ud800", "seq_len": 8192}), -32600, 3),  # a lone surrogate: not Unicode text
    (_call(4, _nested(198)), -32600, 4),  # 201 levels with the envelope: past the SDK's JSON reader
    (_call(5, 0).replace("0}}", '{"x": ' * 3000 + "{}" + "}" * 3000 + "}}"), -32600, 5),  # past Python's too
    ('{"jsonrpc": "2.0", "id": 9}', -32600, 9),
    ("[]", -32600, None),
    ("5", -32600, None),
    ('{"jsonrpc": "1.0", "id": 6, "method": "ping"}', -32600, 6),
    ('{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": [1]}', -32600, 7),
]
WORDS = {3: "lone surrogate", 4: "more than 200 levels", 5: "more than 200 levels", 9: '"method"', 6: '"2.0"',
         7: '"params" must be an object'}  # fmt: skip


def check_rejection(line: str, code: int, ident, message: dict) -> None:
    assert message["error"]["code"] == code and message["id"] == ident, (line[:80], message)
    text = message["error"]["message"]
    assert text.startswith("Parse error: " if code == -32700 else "Invalid Request: "), text
    assert WORDS.get(ident, "") in text, text


def read_answers(proc: subprocess.Popen, count: int, timeout_s: float = 30) -> list[dict]:
    """``count`` JSON lines from the server's stdout, failing (not hanging) when one does not come in time."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(x) for x in iter(proc.stdout.readline, "")], daemon=True
    ).start()
    answers = []
    while len(answers) < count:
        try:
            answers.append(json.loads(lines.get(timeout=timeout_s)))
        except queue.Empty:
            pytest.fail(f"{len(answers)} answers to {count} lines after {timeout_s} s: {answers}")
    return answers


def test_stdio_answers_every_line_it_cannot_read():
    valid = _call(10, {"model": "dsv3", "seq_len": 8192})
    wrong_arguments = _call(11, [1])  # a JSON-RPC request whose arguments are not an object: invalid params
    lines = [json.dumps(INITIALIZE), *(line for line, _, _ in BAD_LINES), wrong_arguments, valid]
    proc = subprocess.Popen(
        SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        proc.stdin.write("\n".join(lines) + "\n")
        proc.stdin.flush()
        # one answer a line; stdin stays open until all are in (EOF ends the session)
        answers = read_answers(proc, len(lines))
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    by_id = {a["id"]: a for a in answers if a["id"] is not None}
    assert by_id[1]["result"]["serverInfo"]["name"] == "nemo-mbridge-perf-moe-long-context"
    assert by_id[11]["error"]["code"] == -32602
    assert by_id[10]["result"]["structuredContent"]["cp"] == 2
    rejected = [a for a in answers if "error" in a and a["id"] != 11]
    assert len(rejected) == len(BAD_LINES)
    nulls = [a for a in rejected if a["id"] is None]
    for line, code, ident in BAD_LINES:  # answers come in order; those with a null id in the order sent
        check_rejection(line, code, ident, by_id[ident] if ident is not None else nulls.pop(0))


async def test_a_client_gets_an_error_not_a_hang_for_arguments_too_deep_to_read():
    params = StdioServerParameters(command=SERVER[0], args=SERVER[1:])
    async with Client(params, mode="legacy") as client:
        with anyio.fail_after(30), pytest.raises(MCPError, match="more than 200 levels"):
            await client.call_tool("size_cp", _nested(198))
        result = await client.call_tool("size_cp", {"model": "dsv3", "seq_len": 8192})  # and it still serves
        assert result.structured_content["cp"] == 2


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
    for line, code, ident in BAD_LINES:
        status, body = post(http_url, line.encode())
        assert status == 400, (line[:80], status, body)
        check_rejection(line, code, ident, json.loads(body))
    assert declared_too_large(http_url) == 413
    assert post(http_url, json.dumps(INITIALIZE).encode())[0] == 200  # and it still serves
