"""Corrections written into the user's own launch: the smallest edit of the text or override list.

A Megatron-LM script is edited in place: only the characters of the flags a repair changes are rewritten
(a flag whose value changes keeps its place, a flag no longer wanted is removed with its line when the line
held nothing else, a new flag goes after the last Megatron flag), so the launcher line, ``export`` lines,
comments, arrays and line continuations stay byte for byte. Bridge overrides keep their order and every key
the engine does not model. Settings that only mean something with another one (Bridge's
``comm_overlap.delay_wgrad_compute`` needs EP overlap) are turned off with it.
"""

from __future__ import annotations

from typing import Any

from ..dialects.shell import quote
from ..dialects.tables import (
    ParsedScript,
    bridge_items,
    dialect_table,
    flags_for,
    keys_for,
    megatron_tokens,
    parse_bridge_overrides,
)

# field -> value -> what else must change with it when the launch writes it: Megatron-LM flags to remove,
# Bridge keys to set.
DEPENDENTS: dict[str, dict[Any, dict[str, Any]]] = {
    "ep_overlap": {
        False: {
            "megatron_remove": ["--delay-wgrad-compute"],
            "bridge_set": {"comm_overlap.delay_wgrad_compute": False, "model.delay_wgrad_compute": False},
        }
    },
}


def _dependents(name: str, value: Any) -> dict[str, Any]:
    for when, what in DEPENDENTS.get(name, {}).items():
        if when == value:
            return what
    return {}


def _grouped(tokens: list[str]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for tok in tokens:
        if tok.startswith("--"):
            out.append((tok, []))
        elif out:
            out[-1][1].append(tok)
    return out


def _written(flag: str, values: list[str]) -> str:
    return " ".join([flag, *(quote(v) for v in values)])


def _env_assignments(changed: dict[str, Any], parsed: ParsedScript) -> dict[str, str]:
    """Environment variables to export for changed fields that a launch sets through the environment."""
    out: dict[str, str] = {}
    for var, rule in dialect_table()["environment"].items():
        name = rule["field"]
        if name not in changed:
            continue
        value = changed[name]
        current = parsed.env.get(var, "")
        if "false_when" in rule:
            out[var] = rule["false_when"] if value is False else "1"
        elif "true_when" in rule:
            out[var] = rule["true_when"] if value else "0"
        elif "true_when_contains" in rule:
            on = rule["true_when_contains"]
            off = on.replace("True", "False")
            if value:
                out[var] = (
                    current.replace(off, on) if off in current else ",".join(filter(None, [current, on]))
                )
            else:
                out[var] = (
                    current.replace(on, off) if on in current else ",".join(filter(None, [current, off]))
                )
    return out


def edit_megatron(parsed: ParsedScript, changed: dict[str, Any], renames: dict[str, str | None]) -> str:
    """The launch text with the changed fields' flags rewritten and every other character kept."""
    text = parsed.source
    edits: list[tuple[int, int, str]] = []
    appended: list[str] = []
    env = _env_assignments(changed, parsed)
    fields = {k: v for k, v in changed.items() if k in dialect_table()["fields"]}
    owners: dict[str, str] = {}
    for name in fields:
        for flag in flags_for(name):
            owners.setdefault(flag, name)
    removals = set()
    for name, value in fields.items():
        removals |= set(_dependents(name, value).get("megatron_remove", []))
    desired = {name: dict(_grouped(megatron_tokens(name, value))) for name, value in fields.items()}
    last_of_group: dict[str, int] = {}
    for item in parsed.items:
        if item.flag in owners:
            last_of_group[owners[item.flag]] = id(item)

    def replace(item, new: str) -> None:
        if (
            item.span is None
        ):  # written inside a variable: set it again after the last flag (argparse: last wins)
            if new:
                appended.append(new)
            return
        edits.append((item.span[0], item.span[1], new))

    for item in parsed.items:
        if item.flag in renames:
            new = renames[item.flag]
            replace(
                item, "" if not new else new if " " in new else _written(new, item.values)
            )  # text: flag and values
            continue
        if item.flag in removals:
            replace(item, "")
            continue
        name = owners.get(item.flag)
        if name is None:
            continue
        want = desired[name]
        pieces = []
        if item.flag in want:
            values = want.pop(item.flag)
            unchanged = values == item.values and item.span is not None
            pieces.append(text[item.span[0] : item.span[1]] if unchanged else _written(item.flag, values))
        if last_of_group.get(name) == id(item):  # flags of the group the launch does not write yet go here
            pieces += [_written(f, v) for f, v in want.items()]
            want.clear()
        new = " ".join(pieces)
        if item.span is not None and new == text[item.span[0] : item.span[1]]:
            continue
        replace(item, new)
    edited = {(start, end) for start, end, _ in edits}
    for item in parsed.items:  # a value bash would split (an unquoted layout string) is written quoted
        if (
            item.flag in parsed.bash_breaks
            and item.span
            and item.span not in edited
            and item.flag not in owners
        ):
            edits.append((*item.span, _written(item.flag, item.values)))
    for want in desired.values():
        appended += [_written(f, v) for f, v in want.items()]
    if appended:
        at = parsed.insert_at if parsed.insert_at is not None else len(text)
        edits.append((at, at, " " + " ".join(appended)))
    for var, value in env.items():
        line = f"{var}={quote(value)}"
        if var in parsed.exports:
            start, end = parsed.exports[var]
            edits.append((start, end, line))
        else:
            at = parsed.command_start or 0
            edits.append((at, at, f"export {line}\n"))
    return _apply(text, edits)


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        if new == "" and start != end:
            # a removal takes the blank before it; a line left with only a continuation goes entirely
            while start > 0 and text[start - 1] in " \t":
                start -= 1
            line_start = text.rfind("\n", 0, start) + 1
            line_end = text.find("\n", end)
            line_end = len(text) if line_end < 0 else line_end
            rest = text[end:line_end].strip()
            alone = text[line_start:start].strip() == "" and rest in ("\\", "")
            if alone and (rest == "\\" or line_start > 0):
                before = text[:line_start]
                if rest == "" and before.rstrip("\n").endswith("\\"):
                    # the command ended on this line: the line before must not continue into the next one
                    before = before.rstrip("\n")[:-1].rstrip(" \t") + "\n"
                text = before + text[line_end + 1 :]
                continue
            text = text[:start] + text[end:]
        else:
            text = text[:start] + new + text[end:]
    return text


def edit_bridge(
    keys: dict[str, Any], changed: dict[str, Any], renames: dict[str, str | None]
) -> dict[str, Any]:
    """The overrides with the changed fields' keys rewritten in place, new keys at the end."""
    out: dict[str, Any] = {}
    fields = {k: v for k, v in changed.items() if k in dialect_table()["fields"]}
    owners: dict[str, str] = {}
    for name in fields:
        for key in keys_for(name):
            owners.setdefault(key, name)
    desired = {name: bridge_items(name, value) for name, value in fields.items()}
    dependents: dict[str, Any] = {}
    for name, value in fields.items():
        dependents.update(_dependents(name, value).get("bridge_set", {}))
    for key, value in keys.items():
        if key in renames:
            new = renames[key]
            if new and "=" in new:  # 'key=value': the key rewritten with a value
                out.update(parse_bridge_overrides([new]))
            elif new:
                out[new] = value
            continue
        if key in dependents:
            out[key] = dependents[key] if value else value
            continue
        name = owners.get(key)
        if name is None:
            out[key] = value
            continue
        want = desired[name]
        if key in want:
            out[key] = want.pop(key)
    for want in desired.values():
        out.update(want)
    return out
