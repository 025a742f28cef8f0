"""``python -m moe_long_context.server [--http HOST:PORT]``: the MCP server, as ``moe-lc serve`` runs it."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
