"""Pasting text where a user pastes it: bash (syntax check, then the words it passes) and Hydra's override
grammar (the project's reader of Bridge 0.6.2's overrides, dialects/hydra.py)."""

from __future__ import annotations

import subprocess

from moe_long_context.dialects.tables import parse_bridge_overrides


def bash_syntax_ok(arguments: str) -> tuple[bool, str]:
    """Whether ``pretrain_gpt.py ARGUMENTS`` is a bash command bash can parse (``bash -n``)."""
    proc = subprocess.run(
        ["bash", "-n", "-c", f"python pretrain_gpt.py {arguments}\n"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return proc.returncode == 0, proc.stderr.strip()


def bash_words(arguments: str) -> list[str]:
    """The words bash passes for ``arguments`` pasted after a command (no command is run)."""
    ok, error = bash_syntax_ok(arguments)
    assert ok, f"bash cannot parse the pasted text: {error}\n{arguments}"
    script = f"set -- {arguments}\nprintf '%s\\0' \"$@\""
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout.split("\0")[:-1]


def hydra_values(overrides: list[str]) -> dict:
    """Each ``key=value`` override as Hydra reads it (raises what Hydra would refuse)."""
    return parse_bridge_overrides(overrides)
