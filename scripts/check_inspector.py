"""The MCP Inspector CLI (pinned) lists the server's tools and calls one, over stdio and over HTTP.

Checks: tools/list with --strict (schema portability) shows every registry tool with input schema,
output schema and read-only annotations; tools/call of size_cp returns structured content with cp 32
for DeepSeek-V3 at 128K tokens on H100; a bad call exits 5 with isError naming the field.

Run: python -m scripts.check_inspector   (exit 0 passed, 1 failed, 77 could not run here)
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from moe_long_context.faces.registry import TOOLS
from scripts.harness import console_script, http_server, main, npm_install, package_bin, system_node

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
SIZE_CP = {"model": "deepseek-v3", "gpu": "h100", "seq_len": 131072}


def inspect(inspector: list[str], target: list[str], *args: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [*inspector, "--cli", *target, *args], capture_output=True, text=True, timeout=120, check=False
    )
    return proc.returncode, proc.stdout, proc.stderr


def list_problems(code: int, out: str, err: str, where: str) -> list[str]:
    if code != 0:
        return [f"{where}: tools/list --strict exited {code}: {err[-500:]}"]
    tools = {t["name"]: t for t in json.loads(out)["tools"]}
    problems = []
    if list(tools) != [t.name for t in TOOLS]:
        problems.append(f"{where}: tools/list gave {list(tools)}")
    for name, tool in tools.items():
        if not (tool.get("inputSchema", {}).get("properties") and tool.get("outputSchema")):
            problems.append(f"{where}: {name} lacks an input or output schema")
        if not tool.get("annotations", {}).get("readOnlyHint"):
            problems.append(f"{where}: {name} is not annotated read-only")
    return problems


def run(log: Callable[[str], None]) -> list[str]:
    inspector = [
        system_node(),
        str(package_bin(npm_install(INSPECTOR), "@modelcontextprotocol/inspector", "mcp-inspector")),
    ]
    stdio = [str(console_script()), "serve"]
    problems = list_problems(*inspect(inspector, stdio, "--method", "tools/list", "--strict"), "stdio")

    call = ["--method", "tools/call", "--tool-name", "size_cp", "--format", "json"]
    code, out, err = inspect(inspector, stdio, *call, "--tool-args-json", json.dumps(SIZE_CP))
    result = json.loads(out)["result"] if code == 0 else {}
    log(f"stdio tools/call size_cp: exit {code}, cp={result.get('structuredContent', {}).get('cp')}")
    if code != 0 or result.get("isError") or result["structuredContent"]["cp"] != 32:
        problems.append(f"stdio: tools/call size_cp exited {code}: {out[-300:]} {err[-300:]}")

    code, out, err = inspect(
        inspector, stdio, *call, "--tool-args-json", json.dumps({**SIZE_CP, "model": "dsv4"})
    )
    log(f"stdio tools/call size_cp with model dsv4: exit {code}")
    if code != 5 or "model='dsv4' is not allowed" not in out:
        problems.append(
            f"stdio: a bad size_cp call exited {code} (expected 5, isError naming model): {out[-300:]}"
        )

    with http_server() as url:
        problems += list_problems(*inspect(inspector, [url], "--method", "tools/list", "--strict"), "http")
    log(f"{len(TOOLS)} tools listed over stdio and HTTP")
    return problems


if __name__ == "__main__":
    sys.exit(main(run, "MCP Inspector CLI check"))
