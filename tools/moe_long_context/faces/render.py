"""Plain-text rendering of tool results for people (the CLI's default output)."""

from __future__ import annotations

import textwrap
from typing import Any

from pydantic import BaseModel

from ..engine.findings import Checked, Finding, NotChecked

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


def render_wrapped_table(rows: list[dict[str, Any]], width: int = WIDTH) -> str:
    """A table whose last column wraps onto continuation lines so the table stays within ``width``."""
    cols = list(rows[0])
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lead = sum(widths[:-1]) + 2 * (len(cols) - 1)
    widths[-1] = max(len(cols[-1]), min(widths[-1], width - lead))
    out = [
        "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    for row in cells:
        tail = textwrap.wrap(row[-1], widths[-1]) or [""]
        head = "  ".join(v.ljust(w) for v, w in zip(row[:-1], widths[:-1], strict=True))
        out.append(f"{head}  {tail[0]}".rstrip())
        out += [" " * (lead) + line for line in tail[1:]]
    return "\n".join(out)


def _nested_field(model: BaseModel) -> str | None:
    """The name of a field holding a non-empty list of models, if the model has one."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, list) and value and isinstance(value[0], BaseModel):
            return name
    return None


def _render_nested(items: list[BaseModel]) -> str:
    """Each item as its scalar fields followed by its nested list of models as a table."""
    blocks = []
    for item in items:
        nested = _nested_field(item)
        lines = []
        for name in type(item).model_fields:
            if name != nested:
                lines.append(("- " if not lines else "  ") + f"{name}: {_cell(getattr(item, name))}")
        rows = [v.model_dump() for v in getattr(item, nested)]
        lines.append(f"  {nested}:")
        lines.append(textwrap.indent(render_wrapped_table(rows, WIDTH - 4), "    "))
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def _block(row: dict[str, Any]) -> str:
    lines = []
    for i, (key, value) in enumerate(row.items()):
        first = ("- " if i == 0 else "  ") + f"{key}: "
        lines.append(textwrap.fill(_cell(value), WIDTH - 2, initial_indent=first, subsequent_indent="      "))
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


def render_coverage(result: BaseModel) -> list[str]:
    """What a judging result covers, and the upstream checks it reaches that no rule models (one line each)."""
    checked: Checked | None = getattr(result, "checked", None)
    if checked is None:
        return []
    out = [f"checked: {checked.rules} rules, modelling {checked.upstream} of the {checked.applicable} upstream "
           "checks that apply (moe-lc rules --upstream)"]  # fmt: skip
    items: list[NotChecked] = result.not_checked
    if items:
        out.append(f"not checked ({len(items)}): no rule decides these; verify them yourself")
        for item in items:
            out += textwrap.wrap(item.label(), WIDTH, initial_indent="  - ", subsequent_indent="    ")
    return out


def render_result(title: str, result: BaseModel) -> str:
    """Scalars as 'key: value', nested models flattened, lists of models as tables, findings last, then what
    the result covers and did not check.

    A result that knows a better summary for people (``render_text()``) is shown that way instead."""
    if hasattr(result, "render_text"):
        return "\n".join([title, "=" * len(title), result.render_text(), render_findings(result.findings),
                          *render_coverage(result)])  # fmt: skip
    scalars: list[tuple[str, str]] = []
    tables: list[str] = []
    findings: list[Finding] = []
    for name in type(result).model_fields:
        value = getattr(result, name)
        if name == "findings":
            findings = value
        elif name in ("sources", "checked") or (name == "not_checked" and hasattr(result, "checked")):
            continue
        elif isinstance(value, BaseModel):
            for sub in type(value).model_fields:
                scalars.append((f"{name}.{sub}", _cell(getattr(value, sub))))
        elif (
            isinstance(value, list) and value and isinstance(value[0], BaseModel) and _nested_field(value[0])
        ):
            tables.append(f"{name}:\n" + textwrap.indent(_render_nested(value), "  "))
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            rows = [v.model_dump() for v in value]
            table = render_table(rows)
            if max(len(line) for line in table.splitlines()) > WIDTH:
                table = "\n".join(_block(row) for row in rows)
            tables.append(f"{name}:\n" + textwrap.indent(table, "  "))
        elif isinstance(value, list) and value and isinstance(value[0], str) and len(value) > 1:
            items = [textwrap.fill(v, WIDTH, initial_indent="  - ", subsequent_indent="    ") for v in value]
            tables.append(f"{name}:\n" + "\n".join(items))
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
    out += render_coverage(result)
    return "\n".join(out)
