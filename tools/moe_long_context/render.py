"""Plain-text rendering of tool results for people (the CLI's default output)."""

from __future__ import annotations

import textwrap
from typing import Any

from pydantic import BaseModel

from .findings import Finding

WIDTH = 110


def render_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)"
    cols = list(rows[0])
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(out)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    return str(value)


def _block(row: dict[str, Any]) -> str:
    lines = []
    for i, (key, value) in enumerate(row.items()):
        lines.append(("- " if i == 0 else "  ") + f"{key}: {_cell(value)}")
    return "\n".join(lines)


def render_findings(findings: list[Finding]) -> str:
    if not findings:
        return "findings: none"
    out = ["findings:"]
    for f in findings:
        out.append(f"  [{f.severity.value.upper():7}] {f.code}")
        out += textwrap.wrap(f.message, WIDTH, initial_indent="      ", subsequent_indent="      ")
        if f.fix:
            out += textwrap.wrap(
                "fix: " + f.fix, WIDTH, initial_indent="      ", subsequent_indent="           "
            )
        out += textwrap.wrap(
            "source: " + f.source, WIDTH, initial_indent="      ", subsequent_indent="              "
        )
    return "\n".join(out)


def render_result(title: str, result: BaseModel) -> str:
    """Scalars as 'key: value', nested models flattened, lists of models as tables, findings last."""
    scalars: list[tuple[str, str]] = []
    tables: list[str] = []
    findings: list[Finding] = []
    for name in type(result).model_fields:
        value = getattr(result, name)
        if name == "findings":
            findings = value
        elif name == "sources":
            continue
        elif isinstance(value, BaseModel):
            for sub in type(value).model_fields:
                scalars.append((f"{name}.{sub}", _cell(getattr(value, sub))))
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            rows = [v.model_dump() for v in value]
            table = render_table(rows)
            if max(len(line) for line in table.splitlines()) > WIDTH:
                table = "\n".join(_block(row) for row in rows)
            tables.append(f"{name}:\n" + textwrap.indent(table, "  "))
        elif isinstance(value, list) and value and isinstance(value[0], str) and len(value) > 1:
            tables.append(f"{name}:\n" + "\n".join(f"  - {v}" for v in value))
        elif isinstance(value, str) and "\n" in value:
            tables.append(f"{name}:\n" + textwrap.indent(value, "  "))
        elif isinstance(value, dict) and len(value) > 3:
            tables.append(f"{name}:\n" + "\n".join(f"  {k}: {_cell(v)}" for k, v in value.items()))
        else:
            scalars.append((name, _cell(value)))
    width = max((len(k) for k, _ in scalars), default=0)
    out = [title, "=" * len(title)]
    for key, value in scalars:
        wrapped = textwrap.wrap(value, WIDTH - width - 2) or [""]
        out.append(f"{key.ljust(width)}  {wrapped[0]}")
        out += [" " * (width + 2) + w for w in wrapped[1:]]
    out += tables
    out.append(render_findings(findings))
    return "\n".join(out)
