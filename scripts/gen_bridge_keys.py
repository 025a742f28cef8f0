"""Write the override keys Megatron Bridge 0.6.2's ConfigContainer accepts, section by section.

Reads the unpacked wheels with ``ast`` only (megatron is never imported): the fields of
``megatron/bridge/training/config.py:ConfigContainer``, and for each section the dataclass fields of the
classes its annotation names (``Optional[X]``, ``X | Y``), over their base classes. The ``model`` section is
the union over every model provider and transformer config the Bridge wheel defines (a recipe's
``cfg.model`` is one of them: GPT, MLA/DeepSeek, Qwen, Mamba/hybrid ...) and the classes the annotation
names, so a key any provider has is accepted; the ``peft`` section likewise over every PEFT scheme.
Output: ``tools/moe_long_context/dialects/bridge_keys.json`` (``{"sections": {section: {field: annotation}}, ...}``).

    python3 scripts/gen_bridge_keys.py --bridge build/conformance/bridge --mcore build/conformance/mcore
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tools" / "moe_long_context" / "dialects" / "bridge_keys.json"


class Source:
    """Every module of the two wheels, parsed lazily, with what each imports and defines."""

    def __init__(self, roots: list[Path]):
        self.paths: dict[str, Path] = {}
        for root in roots:
            for path in sorted((root / "megatron").rglob("*.py")):
                parts = list(path.relative_to(root).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                self.paths.setdefault(".".join(parts), path)
        self._trees: dict[str, ast.Module | None] = {}

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.paths.get(module)
            self._trees[module] = ast.parse(path.read_text(encoding="utf-8")) if path else None
        return self._trees[module]

    def _package(self, module: str) -> str:
        path = self.paths[module]
        return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]

    def find(self, module: str, name: str, seen: frozenset = frozenset()) -> tuple[str, ast.ClassDef] | None:
        """The class ``name`` means in ``module``: defined there, or imported (relative and try/except)."""
        if (module, name) in seen:
            return None
        seen = seen | {(module, name)}
        tree = self.tree(module)
        if tree is None:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, node
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) != name:
                        continue
                    base = node.module or ""
                    if node.level:
                        pkg = self._package(module)
                        for _ in range(node.level - 1):
                            pkg = pkg.rsplit(".", 1)[0]
                        base = f"{pkg}.{base}" if base else pkg
                    found = self.find(base, alias.name, seen)
                    if found:
                        return found
        return None

    def resolve(self, module: str, expr: ast.expr) -> tuple[str, ast.ClassDef] | None:
        if isinstance(expr, ast.Name):
            return self.find(module, expr.id)
        if isinstance(expr, ast.Attribute):
            return self.find(module, expr.attr) or self._attribute(module, expr)
        if isinstance(expr, ast.Subscript):  # Generic[T] bases
            return self.resolve(module, expr.value)
        return None

    def _attribute(self, module: str, expr: ast.Attribute) -> tuple[str, ast.ClassDef] | None:
        parts = []
        node: ast.expr = expr
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            dotted = ".".join([node.id, *reversed(parts[1:])])
            return self.find(dotted, expr.attr)
        return None


def _is_dataclass(cls: ast.ClassDef) -> bool:
    for deco in cls.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def fields_of(src: Source, module: str, cls: ast.ClassDef, seen: set | None = None) -> dict[str, str]:
    """Dataclass fields of a class and its bases (bases first; a subclass's annotation wins)."""
    seen = set() if seen is None else seen
    if (module, cls.name) in seen:
        return {}
    seen.add((module, cls.name))
    out: dict[str, str] = {}
    for base in cls.bases:
        found = src.resolve(module, base)
        if found:
            out.update(fields_of(src, *found, seen))
    if _is_dataclass(cls):
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                annotation = ast.unparse(node.annotation)
                if not annotation.startswith("ClassVar"):
                    out[node.target.id] = annotation
    return out


def _annotation_names(expr: ast.expr) -> list[ast.expr]:
    """The class expressions an annotation names: X, Optional[X], Union[X, Y], X | Y | None."""
    if isinstance(expr, ast.BinOp):
        return _annotation_names(expr.left) + _annotation_names(expr.right)
    if isinstance(expr, ast.Subscript) and getattr(expr.value, "id", getattr(expr.value, "attr", "")) in (
        "Optional",
        "Union",
    ):
        inner = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        return [n for e in inner for n in _annotation_names(e)]
    if isinstance(expr, ast.Constant):
        return []
    return [expr]


def _inherits(src: Source, module: str, cls: ast.ClassDef, target: str, depth: int = 0) -> bool:
    if cls.name == target:
        return True
    if depth > 30:
        return False
    for base in cls.bases:
        found = src.resolve(module, base)
        if found and _inherits(src, *found, target, depth + 1):
            return True
    return False


def model_fields(src: Source) -> dict[str, str]:
    """The union of fields over every dataclass of megatron.bridge.models that is a TransformerConfig."""
    out: dict[str, str] = {}
    for module in sorted(m for m in src.paths if m.startswith("megatron.bridge.models")):
        tree = src.tree(module)
        for node in tree.body if tree else []:
            if isinstance(node, ast.ClassDef) and _inherits(src, module, node, "TransformerConfig"):
                for name, annotation in fields_of(src, module, node).items():
                    out.setdefault(name, annotation)
    return out


def peft_fields(src: Source) -> dict[str, str]:
    """The union of fields over every PEFT scheme of megatron.bridge.peft (LoRA, DoRA, ...): a PEFT recipe's
    ``cfg.peft`` is one of them, and its fields are what a ``peft.*`` override can set."""
    out: dict[str, str] = {}
    for module in sorted(m for m in src.paths if m.startswith("megatron.bridge.peft")):
        tree = src.tree(module)
        for node in tree.body if tree else []:
            if (
                isinstance(node, ast.ClassDef)
                and _is_dataclass(node)
                and _inherits(src, module, node, "PEFT")
            ):
                for name, annotation in fields_of(src, module, node).items():
                    if not name.startswith("_"):  # the matcher's private caches
                        out.setdefault(name, annotation)
    return out


def container_sections(src: Source) -> dict[str, dict[str, str]]:
    module = "megatron.bridge.training.config"
    found = src.find(module, "ConfigContainer")
    if found is None:
        raise SystemExit("ConfigContainer not found in megatron/bridge/training/config.py")
    _, container = found
    sections: dict[str, dict[str, str]] = {}
    for node in container.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        if name.startswith("_"):
            continue
        merged: dict[str, str] = {"model": model_fields, "peft": peft_fields}.get(name, lambda _: {})(src)
        for expr in _annotation_names(node.annotation):
            cls = src.resolve(module, expr)
            if cls:
                for key, annotation in fields_of(src, *cls).items():
                    merged.setdefault(key, annotation)
        sections[name] = merged  # empty for plain values (env_vars is a dict; any key is allowed)
    return sections


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bridge", type=Path, default=ROOT / "build" / "conformance" / "bridge")
    ap.add_argument("--mcore", type=Path, default=ROOT / "build" / "conformance" / "mcore")
    ap.add_argument("-o", "--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    src = Source([args.bridge, args.mcore])
    sections = container_sections(src)
    data = {
        "_about": "Override keys of Megatron Bridge 0.6.2's ConfigContainer by section (model: the union over "
        "the wheel's model providers). Generated by: python3 scripts/gen_bridge_keys.py --bridge "
        "<megatron-bridge 0.6.2 wheel, unpacked> --mcore <megatron-core 0.19.2 wheel, unpacked>. Do not edit.",
        "free_sections": sorted(n for n, f in sections.items() if not f),
        "sections": {n: dict(sorted(f.items())) for n, f in sections.items()},
    }
    args.out.write_text(json.dumps(data, indent=0, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}: {sum(len(f) for f in sections.values())} keys in {len(sections)} sections")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
