"""Megatron Bridge override values as Hydra's override grammar reads and writes them.

Bridge 0.6.2 applies ``key=value`` overrides with Hydra (hydra-core 1.3) over an untyped OmegaConf copy of
the ConfigContainer, so a value means what Hydra's grammar makes of it, with no coercion afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import MAX_NESTING

_HYDRA_INT = re.compile(r"[+-]?(?:0|[1-9](?:_?\d)*)")
_HYDRA_FLOAT = re.compile(
    r"[+-]?(?:(?:\d(?:_?\d)*)?\.\d(?:_?\d)*(?:[eE][+-]?\d(?:_?\d)*)?|\d(?:_?\d)*\.(?:[eE][+-]?\d(?:_?\d)*)?"
    r"|\d(?:_?\d)*[eE][+-]?\d(?:_?\d)*|[iI][nN][fF]|[nN][aA][nN])"
)


class HydraValueError(ValueError):
    pass


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets and quotes."""
    parts, buf, depth, quote = [], "", 0, ""
    for ch in text:
        if quote:
            buf += ch
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            buf += ch
        elif ch in "[{":
            depth += 1
            buf += ch
        elif ch in "]}":
            depth -= 1
            buf += ch
        elif ch == sep and depth == 0:
            parts.append(buf)
            buf = ""
        else:
            buf += ch
    if quote or depth:
        raise HydraValueError("unbalanced quotes or brackets")
    parts.append(buf)
    return parts


def _bracket_depth(text: str) -> int:
    """The deepest nesting of [ ] and { } outside quotes (read without recursion)."""
    depth = deepest = 0
    quote = ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _hydra_element(text: str) -> Any:
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1].replace("\\" + t[0], t[0])
    if t.startswith("["):
        if not t.endswith("]"):
            raise HydraValueError(f"{t!r}: a list must end with ]")
        inner = t[1:-1].strip()
        return [] if not inner else [_hydra_element(e) for e in _split_top(inner)]
    if t.startswith("{"):
        if not t.endswith("}"):
            raise HydraValueError(f"{t!r}: a dict must end with }}")
        inner = t[1:-1].strip()
        out = {}
        for pair in _split_top(inner) if inner else []:
            key, colon, value = pair.partition(":")
            if not colon:
                raise HydraValueError(f"{pair!r}: a dict item is key:value")
            out[key.strip()] = _hydra_element(value)
        return out
    if t.lower() == "null":
        return None
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if _HYDRA_INT.fullmatch(t):
        return int(t.replace("_", ""))
    if _HYDRA_FLOAT.fullmatch(t):
        return float(t.replace("_", ""))
    if any(c in t for c in "()=~") or t.startswith(("'", '"')):
        raise HydraValueError(f"{t!r} needs quotes (Hydra refuses ( ) = ~ unquoted)")
    return t


def parse_value(text: str) -> Any:
    """An override value as Hydra's override grammar reads it (Megatron Bridge 0.6.2, hydra-core 1.3).

    Only ``null`` (any case) is None; ``none`` and ``None`` are strings. ``true``/``false`` (any case) are
    booleans (``yes``/``on`` are strings); ``1_000`` is an int, ``1e3`` a float; ``[a,b]`` and nested lists
    are lists with typed elements; quotes force a string. A bare comma is a Hydra sweep, which Bridge
    refuses; ( ) = and ~ must be quoted. Raises HydraValueError for what Hydra would not parse.
    """
    stripped = text.strip()
    if _bracket_depth(stripped) > MAX_NESTING:
        raise HydraValueError(f"the value is nested more than {MAX_NESTING} levels deep")
    if not (stripped.startswith(("[", "{", "'", '"'))) and len(_split_top(stripped)) > 1:
        raise HydraValueError(
            f"{stripped!r} is a Hydra sweep (a bare comma); write a list as [a,b] or quote it"
        )
    return _hydra_element(stripped)


_HYDRA_BARE = re.compile(r"[A-Za-z_/\\+.$%*@?|:-][A-Za-z0-9_/\\+.$%*@?|:-]*")


def hydra_value(value: Any) -> str:
    """A value written so that Hydra's override grammar reads it back as the same Python value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    if _HYDRA_BARE.fullmatch(text) and text.lower() not in ("null", "true", "false", "inf", "nan"):
        return text
    return "'" + text.replace("'", "\\'") + "'"
