"""MCP face: every tool of the registry as an MCP tool, over stdio or streamable HTTP.

The tools are generated from ``registry.TOOLS``: a tool's arguments are the fields of its request model
(flat, with short descriptions, see ``schemas``) plus ``detail``, its output schema is the result model's
shape, and the result goes out as structured content, with a short summary as text (``summary``) or, with
``detail='full'``, the same JSON as text. A tool added to the registry appears here with
no edit. Resources (catalogs, rule table, representative layouts, the skill text) and the planning
prompt (with completion of model and GPU ids) are in ``server_content``.

Errors: bad arguments and ``InputError`` come back as tool errors naming the field and what is allowed;
any other exception comes back as a tool error with its type and message (and its traceback on the
server's stderr). Nothing a caller sends stops the server.
"""

from __future__ import annotations

import json
import logging
import sys
from functools import cache
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from mcp.types import Tool as MCPTool
from pydantic import ValidationError

from .. import __version__
from ..errors import InputError, describe_validation_error
from .registry import TOOLS, TOOLS_BY_NAME, Tool, validate_arguments
from .schemas import compact_input_schema, compact_output_schema
from .server_content import INSTRUCTIONS, SKILL_NAME, add_completions, add_prompts, add_resources
from .summary import summarize
from .wire import AnswerEveryBody, serve_stdio

SERVER_NAME = SKILL_NAME
MAX_ARGUMENTS_BYTES = 256 * 1024  # a request is a few hundred bytes; an inline config.json a few KiB
MAX_HTTP_BODY_BYTES = 1024 * 1024
TOOL_TIME_LIMIT_S = 30.0  # every tool answers in milliseconds; this only guards against an engine bug

# Read-only and closed-world. The MCP spec gives destructiveHint and idempotentHint meaning only when
# readOnlyHint is false, so sending them would cost every session bytes and say nothing.
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)

logger = logging.getLogger(__name__)


DETAIL = "detail"
# the enum says it all (full: the text is the result's JSON; references/tools.md has the long form)
DETAIL_SCHEMA = {"enum": ["summary", "full"], "default": "summary"}


def input_schema(tool: Tool) -> dict[str, Any]:
    """The request model's fields, compacted, plus ``detail``, which only this face reads."""
    schema = compact_input_schema(tool.request.model_json_schema())
    schema["properties"][DETAIL] = DETAIL_SCHEMA
    return schema


@cache
def tool_definition(tool: Tool) -> MCPTool:
    """The MCP description of a registry tool: flat input schema, result schema, read-only annotations."""
    return MCPTool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=input_schema(tool),
        output_schema=compact_output_schema(tool.result.model_json_schema(mode="serialization")),
        annotations=READ_ONLY,
    )


def run_tool(tool: Tool, arguments: dict[str, Any]) -> CallToolResult:
    """Validate the arguments, run the tool, and wrap the result; every failure becomes a ToolError."""
    arguments = dict(arguments)
    detail = arguments.pop(DETAIL, "summary")
    if detail not in DETAIL_SCHEMA["enum"]:
        raise ToolError(f"{tool.name}: detail={detail!r} is not allowed: one of 'summary', 'full'")
    try:
        request = validate_arguments(tool.request, arguments)
    except ValidationError as exc:
        raise ToolError(f"{tool.name}: {describe_validation_error(exc, tool.request.model_fields)}") from None
    try:
        result = tool.fn(request)
    except InputError as exc:
        raise ToolError(f"{tool.name}: {exc}") from None
    except Exception as exc:
        logger.exception("Tool %s failed on %r", tool.name, arguments)
        raise ToolError(
            f"{tool.name}: internal error {type(exc).__name__}: {exc} "
            "(an engine bug, not a problem with the arguments; please report it with the arguments)"
        ) from exc
    data = result.model_dump(mode="json")
    # MCP 2025-06-18 and 2025-11-25, server/tools, "Structured Content": "For backwards compatibility, a
    # tool that returns structured content SHOULD also return the serialized JSON in a TextContent block",
    # and with an outputSchema "Servers MUST provide structured results that conform to this schema".
    # structuredContent is therefore always the complete result, checked against the output schema; the
    # serialized JSON is the text with detail='full', the spec's recommendation to the letter. The default
    # text (detail='summary') departs from that SHOULD on purpose: clients that hand the model the text
    # block (Claude Code among them) would otherwise put every byte of the result into the agent's context,
    # while a client that reads only text still gets the verdict, the key numbers and every error with its
    # fix, and can ask for detail='full'.
    text = json.dumps(data) if detail == "full" else _summary(tool, data)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _summary(tool: Tool, data: dict[str, Any]) -> str:
    """The summary text; should it fail (a bug), the result still goes out, with its JSON as the text."""
    try:
        return summarize(tool.name, data)
    except Exception:
        logger.exception("Summary of %s failed; sending the JSON as text", tool.name)
        return json.dumps(data)


def _check_size(name: str, arguments: dict[str, Any]) -> None:
    try:
        size = len(json.dumps(arguments))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ToolError(f"{name}: the arguments are not a JSON object of plain values ({exc})") from None
    if size > MAX_ARGUMENTS_BYTES:
        raise ToolError(
            f"{name}: the arguments are {size} bytes, more than the {MAX_ARGUMENTS_BYTES} this server accepts"
        )


class EngineServer(MCPServer):
    """MCPServer whose tools are the registry's, listed and called through the request/result models, and
    whose stdio transport answers every line (``wire``)."""

    async def run_stdio_async(self) -> None:
        await serve_stdio(self._lowlevel_server)

    async def list_tools(self) -> list[MCPTool]:
        return [tool_definition(tool) for tool in TOOLS]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult:
        tool = TOOLS_BY_NAME.get(name)
        if tool is None:
            raise ToolError(f"Unknown tool: {name!r}; this server has " + ", ".join(TOOLS_BY_NAME))
        _check_size(name, arguments)
        try:
            with anyio.fail_after(TOOL_TIME_LIMIT_S):
                return await anyio.to_thread.run_sync(run_tool, tool, arguments, abandon_on_cancel=True)
        except TimeoutError:
            logger.error("Tool %s took more than %s s on %r", name, TOOL_TIME_LIMIT_S, arguments)
            raise ToolError(
                f"{name}: no answer within {TOOL_TIME_LIMIT_S:.0f} s (an engine bug; please report it "
                "with the arguments)"
            ) from None


def build_server() -> EngineServer:
    server = EngineServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    add_resources(server)
    add_prompts(server)
    add_completions(server)
    return server


server = build_server()


# --------------------------------------------------------------------------- running


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def parse_bind(text: str) -> tuple[str, int]:
    """'HOST:PORT', '[::1]:PORT', ':PORT' or 'PORT' -> (host, port); the host defaults to 127.0.0.1."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError("--http", text, "HOST:PORT with a port from 1 to 65535, e.g. 127.0.0.1:8765")
    return host, int(port)


def authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def transport_security(host: str, port: int, extra_hosts: list[str]) -> TransportSecuritySettings:
    """DNS-rebinding protection on: only Host and Origin headers naming this server are accepted."""
    names = {host, *extra_hosts} | (set(LOOPBACK) if host in LOOPBACK else set())
    hosts = sorted(authority(name, port) for name in names)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")],
    )


def serve(http: str | None = None, allowed_hosts: list[str] | None = None) -> None:
    """Run the server: stdio when ``http`` is None, else streamable HTTP at http://HOST:PORT/mcp."""
    if http is None:
        server.run()
        return
    import uvicorn

    host, port = parse_bind(http)
    security = transport_security(host, port, allowed_hosts or [])
    app = server.streamable_http_app(
        max_request_body_size=MAX_HTTP_BODY_BYTES, transport_security=security, host=host
    )
    print(f"{SERVER_NAME}: MCP endpoint http://{authority(host, port)}/mcp", file=sys.stderr, flush=True)
    uvicorn.run(
        AnswerEveryBody(app, security, MAX_HTTP_BODY_BYTES), host=host, port=port, log_level="warning"
    )
