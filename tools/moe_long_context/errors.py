"""Input errors: what the caller sent cannot be used, and how to fix it.

Faces turn an ``InputError`` into a readable refusal (CLI: exit 2, MCP: a tool error). Anything else
escaping a tool is a bug and is reported as such, with its cause.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InputError(ValueError):
    """A field of the request has a value the engine cannot use."""

    def __init__(self, field: str, value: object, allowed: str, hint: str | None = None):
        self.field = field
        self.value = value
        self.allowed = allowed
        self.hint = hint
        text = f"{field}={shown(value)} is not allowed: {allowed}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)

    @classmethod
    def plain(cls, message: str, field: str = "request") -> InputError:
        """An InputError whose message is already complete (several fields, already described)."""
        err = cls.__new__(cls)
        err.field, err.value, err.allowed, err.hint = field, None, message, None
        ValueError.__init__(err, message)
        return err


def shown(value: object) -> str:
    """A value as a refusal quotes it: its repr, cut to a line; a list or object that is long, or nested
    deeper than a few levels (its repr would recurse), by its type name."""
    if isinstance(value, dict | list | tuple):
        if nesting_depth(value, 8) > 8:
            return type(value).__name__
        text = repr(value)
        return text if len(text) < 80 else type(value).__name__
    text = repr(value)
    return text if len(text) <= 120 else text[:100] + "..."


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known id most similar to ``name``, if any is reasonably close."""
    matches = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=1, cutoff=0.5)
    if not matches:
        return None
    lowered = {k.lower(): k for k in known}
    return lowered[matches[0]]


def unknown_id(
    field: str, value: str, known: Iterable[str], aliases: dict[str, str] | None = None
) -> InputError:
    """An InputError for an unknown catalog id, listing the known ids and the closest one (aliases too)."""
    known = sorted(known)
    names = {k: k for k in known} | (aliases or {})
    match = closest(value, names)
    guess = names[match] if match else None
    return InputError(
        field,
        value,
        "one of " + ", ".join(known),
        f"did you mean {guess!r}?" if guess else None,
    )


def describe_validation_error(exc, fields: Iterable[str] = ()) -> str:
    """One readable line for a pydantic ValidationError: each bad field, its value and what is allowed."""
    known = list(fields)
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if not str(p).startswith(("function-", "literal["))]
        # unions report every branch (str, dict, int, ...); the first path element is the field
        name = loc[0] if loc else "request"
        if len(loc) > 1 and loc[1].isdigit():
            name = f"{loc[0]}[{loc[1]}]"
        value = err.get("input")
        if err.get("type") == "extra_forbidden":
            guess = closest(name, known) if known else None
            hint = f" (did you mean {guess!r}?)" if guess else ""
            parts.append(f"{name} is not an argument of this tool{hint}")
        elif err.get("type") == "missing":
            parts.append(f"{name} is required")
        elif not loc:  # a check across fields: its message names them
            parts.append(str(err.get("msg")).removeprefix("Value error, "))
        else:
            parts.append(f"{name}={shown(value)} is not allowed: {err.get('msg')}")
    unique = list(dict.fromkeys(parts))
    return "; ".join(unique)


# Lists and objects inside each other: a config.json or a ConfigContainer is a few levels deep. Anything far
# deeper is refused before a recursive reader (json, yaml, repr, pydantic) can run out of stack.
MAX_NESTING = 64


def nesting_depth(value: object, limit: int = MAX_NESTING) -> int:
    """How many levels of lists, tuples and dicts ``value`` has, counted level by level (no recursion) and
    stopped once past ``limit``."""
    depth, level = 0, [value]
    while level and depth <= limit:
        containers = [v for v in level if isinstance(v, dict | list | tuple)]
        if not containers:
            break
        depth += 1
        level = [item for c in containers for item in (c.values() if isinstance(c, dict) else c)]
    return depth


def too_deep(field: str, where: str | None = None) -> InputError:
    """The refusal of a value nested deeper than MAX_NESTING levels, named by its field (and the file it came
    from), never shown: its repr would recurse as deep as it nests."""
    named = f"{field}={where!r}" if where else field
    return InputError.plain(
        f"{named} is nested more than {MAX_NESTING} levels deep (lists and objects inside each other); "
        "a configuration is a few levels: give a flat JSON or YAML object",
        field,
    )


def check_nesting(value: object, field: str, where: str | None = None) -> None:
    if nesting_depth(value) > MAX_NESTING:
        raise too_deep(field, where)
