"""The package's folders are its layers: each module imports only its own layer and the ones below it.

The order is written once, here. A module's layer is its first folder under ``moe_long_context``; modules at
the package root are named explicitly (``errors`` is the base everything may raise, ``cli`` and ``server`` are
the entry points on top). The imports are read with ``ast``, so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tools" / "moe_long_context"

# Lowest first. A module may import its own layer and any layer before it, never one after it.
LAYERS = (
    "base",  # errors.py, __init__.py: input errors and the target versions
    "model",  # model and GPU specs, the catalog, parameter counts
    "engine",  # request fields, the resolved Context, layout, pipeline split, schedule, findings, rules, step time
    "memory",  # the per-rank memory model and its terms
    "dialects",  # Megatron-LM flags and Bridge keys, launch-text parsing, overrides
    "tools",  # one module per MCP tool, with its helpers
    "faces",  # CLI, MCP server, the tool registry, generated docs, the HTML report
    "evals",  # tasks, grader, runner, reference agent
    "entry",  # cli.py, server.py: the commands, composing the faces and the evals
)
ROOT_MODULES = {"__init__": "base", "errors": "base", "cli": "entry", "server": "entry"}
MAX_ROOT_MODULES = 8
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    """Dotted module name (relative to the package) -> file, for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _layer(module: str) -> str:
    head = module.split(".")[0]
    if "." not in module and head in ROOT_MODULES:
        return ROOT_MODULES[head]
    assert head in LAYERS, f"{module}: folder {head!r} is not a layer of tests/test_architecture.py LAYERS"
    return head


def _package_of(module: str, path: Path) -> list[str]:
    parts = (
        module.split(".") if path.name == "__init__.py" and module != "__init__" else module.split(".")[:-1]
    )
    return [p for p in parts if p and p != "__init__"]


def _imports(module: str, path: Path) -> set[str]:
    """The package modules that ``module`` imports (a name imported from a package counts as that package,
    or as its submodule when one has that name)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(module, path)
                base = base[: len(base) - (node.level - 1)]
                target = [*base, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.split(".")[0] == "moe_long_context":
                target = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                sub = ".".join([*target, alias.name])
                found.add(sub if sub in MODULES else ".".join(target) or "__init__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "moe_long_context":
                    found.add(".".join(alias.name.split(".")[1:]) or "__init__")
    return {m for m in found if m in MODULES and m != module}


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def test_every_folder_is_a_layer():
    for module in MODULES:
        _layer(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_from_a_higher_layer(module):
    own = LAYERS.index(_layer(module))
    upward = sorted(m for m in GRAPH[module] if LAYERS.index(_layer(m)) > own)
    assert not upward, f"{module} ({_layer(module)}) imports the higher layer(s): " + ", ".join(
        f"{m} ({_layer(m)})" for m in upward
    )


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as its modules (first repeated last), or None: depth-first, a back edge is a cycle."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        stack.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_no_import_cycle():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_checker_finds_cycles_and_upward_imports():
    """The checker itself: a synthetic cycle is found, and the real graph resolves relative imports."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    # relative imports resolve: engine.context reads the catalog (a lower layer) and its own config
    assert {"model.catalog", "engine.config"} <= GRAPH["engine.context"]
    # the package-level registry of rules is its own module, so rules/__init__ and its checks form no cycle
    assert "engine.rules.table" in GRAPH["engine.rules.batch"]
    assert _layer("faces.cli") == "faces" and _layer("cli") == "entry" and _layer("errors") == "base"


def test_root_is_small_and_modules_are_short():
    root = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_each_tool_has_a_module_named_after_it():
    from moe_long_context.faces.registry import TOOLS

    for tool in TOOLS:
        assert f"tools.{tool.name}" in MODULES, tool.name
        assert tool.fn.__module__ == f"moe_long_context.tools.{tool.name}", tool.fn.__module__
