"""Every message a client sends gets an answer: JSON-RPC errors for what the MCP SDK would drop or misname.

The SDK's stdio transport turns a line it cannot read (not JSON, JSON that is not a JSON-RPC message, a string
holding a lone surrogate, nesting deeper than its JSON reader goes) into an exception that the session logs
and drops, so the client waits for an answer that never comes. Its HTTP transport answers, but calls JSON
that is not a JSON-RPC message invalid params (-32602). JSON-RPC 2.0, section 5.1: text that is not JSON is
a parse error (-32700, id null); JSON that is not a valid request is an invalid request (-32600), answered
with the request's id when one can be read, so that a client waiting on it gets its answer.

``rejection`` classifies one line (or HTTP body); ``serve_stdio`` and ``AnswerEveryBody`` put it in front of
the two transports.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from collections.abc import AsyncIterator
from io import TextIOWrapper
from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.message import SessionMessage
from mcp_types import ErrorData, JSONRPCError, jsonrpc_message_adapter
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from ..errors import nesting_depth

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
# The SDK's JSON reader (pydantic-core) refuses more than 200 levels of lists and objects: a tools/call whose
# arguments nest 198 levels is 201 deep with its envelope (message, params, arguments), and is refused.
READER_DEPTH = 200


def rejection(text: str | bytes) -> JSONRPCError | None:
    """The JSON-RPC error answering ``text``, or None when the SDK reads it as a JSON-RPC message (or it is
    a blank line, which is no message)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            return _error(None, PARSE_ERROR, f"Parse error: not UTF-8 text (byte {exc.start})")
    if not text.strip():
        return None
    try:
        jsonrpc_message_adapter.validate_json(text, by_name=False)
        return None
    except ValidationError:
        pass
    text = text.strip()
    try:
        data = json.loads(text)
    except RecursionError:
        return _error(_top_level_id(text), INVALID_REQUEST, "Invalid Request: " + _too_deep())
    except json.JSONDecodeError as exc:
        return _error(None, PARSE_ERROR, f"Parse error: {exc.msg} (line {exc.lineno}, column {exc.colno})")
    ident = _request_id(data)
    return _error(ident, INVALID_REQUEST, "Invalid Request: " + _what_is_wrong(data))


def _error(ident: Any, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=ident, error=ErrorData(code=code, message=message))


def _too_deep() -> str:
    return (
        f"the message nests lists and objects more than {READER_DEPTH} levels deep, more "
        "than this server's JSON reader goes (tool arguments are a few levels)"
    )


def _request_id(data: Any) -> str | int | None:
    """The id of a message, when it is one JSON-RPC allows (a string or an integer, not a boolean)."""
    ident = data.get("id") if isinstance(data, dict) else None
    return ident if isinstance(ident, str | int) and not isinstance(ident, bool) else None


def _what_is_wrong(data: Any) -> str:
    if nesting_depth(data, READER_DEPTH) > READER_DEPTH:
        return _too_deep()
    surrogate = _lone_surrogate(data)
    if surrogate is not None:
        return f"a string holds a lone surrogate {surrogate!r}, which is not Unicode text (send UTF-8 text)"
    if isinstance(data, list):
        return "a batch (a JSON array); MCP sends one JSON-RPC message, an object, per line or request"
    if not isinstance(data, dict):
        return f"a JSON-RPC message is an object, not {type(data).__name__} {json.dumps(data)[:40]}"
    if data.get("jsonrpc") != "2.0":
        return 'the message needs "jsonrpc": "2.0"'
    if not any(key in data for key in ("method", "result", "error")):
        return (
            'the message needs a "method" (a request or notification), or a "result" or "error" (a response)'
        )
    if "method" in data and not isinstance(data["method"], str):
        return '"method" must be a string'
    if "params" in data and not isinstance(data["params"], dict):
        return '"params" must be an object'
    if "id" in data and _request_id(data) is None and data["id"] is not None:
        return '"id" must be a string or an integer'
    return "not a JSON-RPC request, notification or response the MCP schema allows"


def _lone_surrogate(data: Any) -> str | None:
    """The first UTF-16 surrogate found in any key or string of ``data`` (searched without recursion)."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            pending += item
        elif isinstance(item, str):
            found = next((c for c in item if "\ud800" <= c <= "\udfff"), None)
            if found:
                return found
    return None


def _top_level_id(text: str) -> str | int | None:
    """The id of a message too deep for ``json.loads``: the value of "id" at the top level of the object,
    read by a scan that tracks strings and nesting (no recursion)."""
    depth, i, decoder = 0, 0, json.JSONDecoder()
    while i < len(text):
        ch = text[i]
        if ch == '"':
            try:
                key, end = decoder.raw_decode(text, i)
            except ValueError:
                return None
            rest = text[end:].lstrip()
            if depth == 1 and key == "id" and rest.startswith(":"):
                try:
                    value, _ = decoder.raw_decode(rest[1:].lstrip())
                except (ValueError, RecursionError):
                    return None
                return _request_id({"id": value})
            i = end
            continue
        depth += ch in "[{"
        depth -= ch in "]}"
        i += 1
    return None


# --------------------------------------------------------------------------- stdio


class _Lines:
    """stdin as the SDK's stdio reader iterates it, keeping every line it hands out, in order: the reader
    sends exactly one item (a message or an exception) per line, so the n-th item is the n-th line."""

    def __init__(self, source: Any):
        self._source = source
        self.taken: deque[str] = deque()

    def __aiter__(self) -> AsyncIterator[str]:
        return self

    async def __anext__(self) -> str:
        line = await self._source.readline()
        if not line:
            raise StopAsyncIteration
        self.taken.append(line)
        return line


async def serve_stdio(lowlevel: Any) -> None:
    """Run ``lowlevel`` (the MCP low-level server) on stdin/stdout, answering every line the SDK's reader
    cannot read with its JSON-RPC error instead of dropping it."""
    lines = _Lines(anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")))
    async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
        inbound_send, inbound = anyio.create_memory_object_stream(0)

        async def relay() -> None:
            async with inbound_send:
                async for item in read_stream:
                    line = lines.taken.popleft()
                    if not isinstance(item, Exception):
                        await inbound_send.send(item)
                        continue
                    answer = rejection(line)
                    if answer is not None:
                        await write_stream.send(SessionMessage(answer))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(relay)
            await lowlevel.run(inbound, write_stream, lowlevel.create_initialization_options())
            tasks.cancel_scope.cancel()


# --------------------------------------------------------------------------- streamable HTTP


class AnswerEveryBody:
    """ASGI wrapper of the SDK's streamable-HTTP app: a POST body that is not a JSON-RPC message gets its
    JSON-RPC error (HTTP 400) here; everything else, and every request the SDK refuses on its own grounds
    first (foreign Host or Origin, wrong content type, a body over the size limit), goes to the SDK as is."""

    def __init__(self, app: Any, security: TransportSecuritySettings, max_body: int, path: str = "/mcp"):
        self.app, self.max_body, self.path = app, max_body, path
        self.security = TransportSecurityMiddleware(security)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"].rstrip("/") != self.path:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        declared = request.headers.get("content-length", "0")
        if await self.security.validate_request(request, is_post=True) is not None or (
            not declared.isdigit() or int(declared) > self.max_body
        ):
            await self.app(scope, receive, send)
            return
        body, messages = b"", []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if len(body) > self.max_body or not message.get("more_body", False):
                break
        answer = rejection(body) if len(body) <= self.max_body else None
        if answer is None:
            pending = deque(messages)

            async def replay() -> dict:
                return pending.popleft() if pending else await receive()

            await self.app(scope, replay, send)
            return
        text = answer.model_dump_json(by_alias=True, exclude_unset=True)
        await Response(text, status_code=400, media_type="application/json")(scope, receive, send)
