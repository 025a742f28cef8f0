"""The upstream inventory: every config-time assert / raise of the pinned upstream sources, read with ``ast``.

For each root function of ``upstream_scope.yaml`` (and the same-file functions it calls) every ``assert`` and
every ``raise`` becomes one check: file, line, enclosing function, the guard that leads to it (the enclosing
``if`` tests, an early ``return``'s negation), the asserted test, the message expression (normalized source)
and the configuration keys it reads (``args.x``, ``self.x``, ``config.x``, ``self.model.x``, parameters,
locals resolved to what they were computed from, ``os.getenv`` names as ``env:NAME``). The fingerprint hashes
the normalized guard, test and message, so a moved check keeps it and a changed one does not.

This module only reads source text; it imports nothing from Megatron, Bridge or TE, so it runs in the normal
test environment too. ``inventory_check`` compares the result with the committed classification.
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
SCOPE_FILE = HERE / "upstream_scope.yaml"
TE_SNAPSHOT = HERE / "upstream_te_v2.14.json"

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Check:
    """One upstream check as the generator finds it."""

    repo: str
    file: str
    tag: str
    line: int
    end_line: int
    first_line: int  # the innermost enclosing `if` of a raise (or the statement itself): the cited span
    function: str
    kind: str  # assert | raise
    guard: str  # when it applies ('' = always)
    test: str  # what an assert requires ('' for a raise)
    message: str
    keys: tuple[str, ...]  # every key the guard and the test read
    when: tuple[str, ...]  # the keys that decide whether it applies: the guard's (the test's when unguarded)
    test_keys: tuple[str, ...]  # the keys the asserted test reads (as set, not as validate_args derived them)
    parts: tuple[tuple[str, ...], ...]  # the keys of each conjunct of the guard, outermost first
    values: tuple[tuple[str, str, tuple], ...]  # guard conjuncts on one key's value: (key, in|not_in, values)
    fingerprint: str

    def record(self) -> dict:
        return asdict(self) | {
            "keys": list(self.keys),
            "when": list(self.when),
            "test_keys": list(self.test_keys),
        }


@dataclass(frozen=True)
class Scope:
    files: list[dict]
    te_ref: str
    te_commit: str
    call_keys: dict[str, str]
    config_roots: tuple[str, ...]


def load_scope(path: Path = SCOPE_FILE) -> Scope:
    data = yaml.safe_load(path.read_text())
    return Scope(
        files=data["files"],
        te_ref=data["te_ref"],
        te_commit=data["te_commit"],
        call_keys=data.get("call_keys", {}),
        config_roots=tuple(data.get("config_roots", ())),
    )


# --------------------------------------------------------------------------- the file's functions


@dataclass
class FileIndex:
    """A parsed file: functions by qualified name, methods by bare name, classes."""

    tree: ast.Module
    functions: dict[str, FunctionNode] = field(default_factory=dict)
    classes: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, text: str, name: str) -> FileIndex:
        index = cls(ast.parse(text, name))
        for node in index.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                index.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                index.classes.add(node.name)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        index.functions[f"{node.name}.{item.name}"] = item
        return index

    def methods_named(self, name: str) -> list[str]:
        return [q for q in self.functions if "." in q and q.split(".", 1)[1] == name]


def _callees(index: FileIndex, qual: str) -> set[str]:
    """The same-file functions ``qual`` calls."""
    cls = qual.split(".")[0] if "." in qual else None
    found: set[str] = set()
    for node in ast.walk(index.functions[qual]):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in index.functions:
                found.add(func.id)
            elif func.id in index.classes and f"{func.id}.__init__" in index.functions:
                found.add(f"{func.id}.__init__")
        elif isinstance(func, ast.Attribute):
            owner = func.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls") and cls:
                if f"{cls}.{func.attr}" in index.functions:
                    found.add(f"{cls}.{func.attr}")
            elif isinstance(owner, ast.Name) and owner.id in index.classes:
                if f"{owner.id}.{func.attr}" in index.functions:
                    found.add(f"{owner.id}.{func.attr}")
            elif isinstance(owner, ast.Attribute):  # self.train.finalize(): the file's finalize methods
                found.update(index.methods_named(func.attr))
    return found - {qual}


def closure(index: FileIndex, roots: list[str], leaves: frozenset[str] = frozenset()) -> list[str]:
    """The roots and every same-file function they reach, in discovery order (``leaves`` are not followed:
    roots kept to a line range, whose other calls are runtime work)."""
    seen: list[str] = []
    todo = list(roots)
    while todo:
        qual = todo.pop(0)
        if qual in seen:
            continue
        if qual not in index.functions:
            raise ValueError(f"{qual} is not a function of this file")
        seen.append(qual)
        if qual not in leaves:
            todo.extend(sorted(_callees(index, qual)))
    return seen


# --------------------------------------------------------------------------- keys


class KeyReader:
    """The configuration keys an expression reads, inside one function."""

    def __init__(self, fn: FunctionNode, scope: Scope):
        self.scope = scope
        self.params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]} - {
            "self",
            "cls",
        }
        self.locals: dict[str, list[ast.expr]] = {}
        self.derived: dict[str, list[ast.expr]] = {}  # args.x = <expr>: x reads what <expr> reads
        self._memo: dict[tuple[str, str], set[str]] = {}
        self._follow_derived = True
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for t in ast.walk(target):
                        if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
                            self.locals.setdefault(t.id, []).append(node.value)
                        elif isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store):
                            chain = self._chain(t)
                            if chain:
                                self.derived.setdefault(chain, []).append(node.value)
            elif isinstance(node, (ast.For, ast.comprehension)):
                for t in ast.walk(node.target):
                    if isinstance(t, ast.Name):
                        self.locals.setdefault(t.id, []).append(node.iter)

    def _chain(self, node: ast.expr, depth: int = 0) -> str | None:
        """'a.b' for self.config.a.b / args.a.b / config.a.b (the configuration object dropped), a local alias
        of such a chain resolved, a parameter kept as the prefix (model_cfg.a); else None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(node.id)
        parts.reverse()
        for root in sorted(self.scope.config_roots, key=lambda r: -r.count(".")):
            rp = root.split(".")
            if parts[: len(rp)] == rp and len(parts) > len(rp):
                return ".".join(parts[len(rp) :])
        if len(parts) < 2 or depth > 4:
            return None
        for alias in self.locals.get(parts[0], []):  # x = self.dataset.specs; x.pad: dataset.specs.pad
            if isinstance(alias, ast.Call) and ast.unparse(alias.func) == "getattr" and len(alias.args) >= 2:
                alias = ast.Attribute(value=alias.args[0], attr=getattr(alias.args[1], "value", ""))
            base = self._chain(alias, depth + 1) if isinstance(alias, ast.Attribute) else None
            if base is not None:
                return ".".join([base, *parts[1:]])
        if parts[0] in self.params and parts[0] not in self.locals:
            return ".".join(parts)
        return None

    def keys(self, node: ast.AST | None, derived: bool = True) -> set[str]:
        """The keys ``node`` reads; ``derived=False`` does not follow args.x values the function computed itself
        (what decides whether a check applies is what the user set, not what validate_args derived from it)."""
        self._follow_derived = derived
        self._memo = {}
        return {k for k in self._keys(node, frozenset()) if k and not k.startswith("_")}

    def _resolved(self, kind: str, name: str, visiting: frozenset) -> set[str]:
        """What a local (or a derived args.x) was computed from, once per name (cycles cut)."""
        memo_key = (kind, name)
        if memo_key in self._memo:
            return self._memo[memo_key]
        if memo_key in visiting:
            return set()
        values = (self.locals if kind == "local" else self.derived).get(name, [])
        out: set[str] = set()
        for value in values:
            out |= self._keys(value, visiting | {memo_key})
        self._memo[memo_key] = out
        return out

    def _keys(self, node: ast.AST | None, visiting: frozenset) -> set[str]:
        if node is None:
            return set()
        out: set[str] = set()
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, ast.Call):
                name = ast.unparse(n.func)
                if name in self.scope.call_keys:
                    out.add(self.scope.call_keys[name])
                if name in ("os.getenv", "os.environ.get", "getenv") and n.args:
                    if isinstance(n.args[0], ast.Constant):
                        out.add(f"env:{n.args[0].value}")
                    continue
                if (
                    name in ("getattr", "hasattr")
                    and len(n.args) >= 2
                    and isinstance(n.args[1], ast.Constant)
                ):
                    base = self._chain_or_name(n.args[0])
                    if base is not None:
                        out.add(f"{base}.{n.args[1].value}" if base else str(n.args[1].value))
                    stack.extend(n.args[2:])
                    continue
                if isinstance(n.func, ast.Attribute):  # x.startswith(...): x is read, not the method
                    owner = self._chain(n.func.value) if isinstance(n.func.value, ast.Attribute) else None
                    if owner and n.func.attr == "get" and n.args and isinstance(n.args[0], ast.Constant):
                        out.add(f"{owner}.{n.args[0].value}")  # a dict of options: its key is read
                    stack.append(n.func.value)
                stack.extend(n.args)
                stack.extend(k.value for k in n.keywords)
                continue
            if isinstance(n, ast.Attribute):
                chain = self._chain(n)
                if chain is not None:
                    out.add(chain)
                    if self._follow_derived:
                        out |= self._resolved("derived", chain, visiting)
                    continue
                stack.append(n.value)
                continue
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load):
                if isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
                    base = self._chain_or_name(n.value)
                    if base:  # os.environ['X'] and config['x']
                        out.add(f"env:{n.slice.value}" if base == "os.environ" else f"{base}.{n.slice.value}")
                        continue
                stack.extend([n.value, n.slice])
                continue
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                if n.id in self.locals:
                    out |= self._resolved("local", n.id, visiting)
                elif n.id in self.params and n.id not in ("args", "config", "cfg"):
                    out.add(n.id)
                continue
            if isinstance(n, (ast.Lambda, ast.FunctionDef)):
                continue
            stack.extend(ast.iter_child_nodes(n))
        return out

    def _chain_or_name(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            if node.id in ("args", "config", "cfg", "self"):
                return ""
            return node.id if node.id in self.params else None
        chain = self._chain(node)
        if chain is not None:
            return chain
        return ast.unparse(node) if ast.unparse(node) == "os.environ" else None


# --------------------------------------------------------------------------- checks of one function


def _negate(test: ast.expr) -> ast.expr:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.UnaryOp(op=ast.Not(), operand=test)


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Continue, ast.Break))


def _message(exc: ast.expr | None, reader: KeyReader) -> ast.expr | None:
    """The message expression of an assert's msg or a raised exception (a local message variable resolved)."""
    if exc is None:
        return None
    if isinstance(exc, ast.Call):
        exc = exc.args[0] if exc.args else None
    if isinstance(exc, ast.Name) and len(reader.locals.get(exc.id, [])) == 1:
        value = reader.locals[exc.id][0]
        if isinstance(value, (ast.Constant, ast.JoinedStr, ast.BinOp)):
            return value
    return exc


def _walk(stmts: list[ast.stmt], guard: list[ast.expr], where: list[int]) -> Iterator[tuple]:
    """(statement, guard, first line) for every assert and raise, with the guard that reaches it."""
    guard = list(guard)
    for st in stmts:
        if isinstance(st, ast.If):
            yield from _walk(st.body, [*guard, st.test], [*where, st.lineno])
            yield from _walk(st.orelse, [*guard, _negate(st.test)], [*where, st.lineno])
            if not st.orelse and _exits(st.body):
                guard = [*guard, _negate(st.test)]
        elif isinstance(st, ast.Assert):
            yield st, guard, st.lineno
        elif isinstance(st, ast.Raise):
            if st.exc is not None:
                # an `if cond: raise` is cited from its `if` line when the raise is that if's only statement
                yield st, guard, where[-1] if where and st.lineno - where[-1] <= 3 else st.lineno
        elif isinstance(st, ast.While):
            yield from _walk(st.body, [*guard, st.test], where)
        elif isinstance(st, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            yield from _walk(st.body, guard, where)
            yield from _walk(getattr(st, "orelse", []), guard, where)
        elif isinstance(st, ast.Try):
            yield from _walk(st.body, guard, where)
            for handler in st.handlers:
                yield from _walk(handler.body, guard, where)
            yield from _walk(st.orelse, guard, where)
            yield from _walk(st.finalbody, guard, where)
        elif isinstance(st, ast.Match):
            for case in st.cases:
                yield from _walk(case.body, guard, where)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _walk(st.body, [], [])


def _conjuncts(test: ast.expr) -> list[ast.expr]:
    """The top-level conjuncts of a condition: ``a and (b or c)`` -> [a, b or c]."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [p for v in test.values for p in _conjuncts(v)]
    return [test]


def _constant(node: ast.expr) -> tuple | None:
    """A constant or a tuple/list/set of constants, as a tuple of values; else None."""
    if isinstance(node, ast.Constant):
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(
        isinstance(e, ast.Constant) for e in node.elts
    ):
        return tuple(e.value for e in node.elts)
    return None


def _value_test(part: ast.expr, reader: KeyReader) -> tuple[str, str, tuple] | None:
    """A guard conjunct that tests one configuration key against constants: (key, 'in' | 'not_in', values);
    a bare key is ('key', 'in', (True,)) and its negation ('key', 'not_in', (True,)) (truthiness)."""
    negate = isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not)
    node = part.operand if negate else part
    if isinstance(node, ast.Attribute) and (key := reader._chain(node)):
        return key, "not_in" if negate else "in", (True,)
    if (
        negate
        or not isinstance(node, ast.Compare)
        or len(node.ops) != 1
        or not isinstance(node.left, ast.Attribute)
    ):
        return None
    key, values = reader._chain(node.left), _constant(node.comparators[0])
    if key is None or values is None or None in values:
        return None
    op = node.ops[0]
    if isinstance(op, (ast.Eq, ast.In)):
        return key, "in", values
    if isinstance(op, (ast.NotEq, ast.NotIn)):
        return key, "not_in", values
    return None


def _normal(node: ast.AST | None) -> str:
    return ast.unparse(node) if node is not None else ""


def fingerprint(kind: str, guard: str, test: str, message: str) -> str:
    return hashlib.sha1("\x1f".join((kind, guard, test, message)).encode()).hexdigest()[:10]


def function_checks(
    index: FileIndex, qual: str, entry: dict, scope: Scope, lines: tuple[int, int] | None
) -> list[Check]:
    fn = index.functions[qual]
    reader = KeyReader(fn, scope)
    out = []
    for st, guard, first in _walk(fn.body, [], []):
        if lines and not lines[0] <= st.lineno <= lines[1]:
            continue
        g = (
            _normal(ast.BoolOp(op=ast.And(), values=guard))
            if len(guard) > 1
            else _normal(guard[0] if guard else None)
        )
        if isinstance(st, ast.Assert):
            kind, test, msg = "assert", st.test, _message(st.msg, reader)
        else:
            kind, test, msg = "raise", None, _message(st.exc, reader)
        keys = set().union(*(reader.keys(x) for x in guard)) | reader.keys(test)
        guard_keys = set().union(*(reader.keys(x, derived=False) for x in guard))
        t, m = _normal(test), _normal(msg)
        out.append(
            Check(
                repo=entry["repo"],
                file=entry["file"],
                tag=entry["tag"],
                line=st.lineno,
                end_line=st.end_lineno or st.lineno,
                first_line=min(first, st.lineno),
                function=qual,
                kind=kind,
                guard=g,
                test=t,
                message=m,
                keys=tuple(sorted(keys)),
                when=tuple(sorted(guard_keys or reader.keys(test, derived=False))),
                test_keys=tuple(sorted(reader.keys(test, derived=False))),
                parts=tuple(
                    tuple(sorted(reader.keys(p, derived=False))) for g in guard for p in _conjuncts(g)
                ),
                values=tuple(v for c in guard for p in _conjuncts(c) if (v := _value_test(p, reader))),
                fingerprint=fingerprint(kind, g, t, m),
            )
        )
    return out


def file_checks(text: str, entry: dict, scope: Scope) -> list[Check]:
    index = FileIndex.parse(text, entry["file"])
    roots, limits = [], {}
    for root in entry["roots"]:
        if isinstance(root, dict):
            roots.append(root["function"])
            limits[root["function"]] = tuple(root["lines"])
        else:
            roots.append(root)
    seen: set[tuple[int, str]] = set()
    out = []
    try:
        quals = closure(index, roots, frozenset(limits))
    except ValueError as exc:
        raise ValueError(f"{entry['file']}: {exc}") from None
    for qual in quals:
        for check in function_checks(index, qual, entry, scope, limits.get(qual)):
            if (check.line, check.fingerprint) not in seen:  # a helper reached twice
                seen.add((check.line, check.fingerprint))
                out.append(check)
    return sorted(out, key=lambda c: c.line)


# --------------------------------------------------------------------------- sources


def read_source(
    entry: dict, scope: Scope, megatron: Path | None, bridge: Path | None, te_repo: Path | None
) -> str | None:
    """The file's text at the target version, or None when that source is not available here."""
    if entry["source"] == "mcore":
        return (megatron / entry["file"]).read_text() if megatron else None
    if entry["source"] == "bridge":
        return (bridge / entry["file"]).read_text() if bridge else None
    if te_repo is None:
        return None
    return subprocess.run(
        ["git", "-C", str(te_repo), "show", f"{scope.te_commit}:{entry['file']}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def generate(megatron: Path | None, bridge: Path | None, te_repo: Path | None = None, scope: Scope | None = None
             ) -> tuple[list[Check], list[str]]:  # fmt: skip
    """Every check of the scope whose source is available, and the files that were not (their repo: reason)."""
    scope = scope or load_scope()
    checks: list[Check] = []
    missing: list[str] = []
    for entry in scope.files:
        text = read_source(entry, scope, megatron, bridge, te_repo)
        if text is None:
            missing.append(entry["file"])
            continue
        checks.extend(file_checks(text, entry, scope))
    return checks, missing


def te_snapshot_records(checks: list[Check]) -> list[dict]:
    """What the repository keeps of TE's checks (no upstream text): enough to compare a classification with."""
    keep = [
        f for f in Check.__dataclass_fields__ if f not in ("guard", "test", "message")
    ]  # no upstream text
    return [{k: c.record()[k] for k in keep} for c in checks if c.repo == "TE"]
