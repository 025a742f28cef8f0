"""Megatron-LM's argument parser, as far as it refuses a launch before training starts.

pretrain_gpt.py parses its command line with argparse: a flag that takes a value and has none, a value
argparse cannot convert with the flag's ``type`` (``int``, ``float``, Megatron's own converters such as
``moe_freq_type``), a value outside the flag's ``choices``, and a word that belongs to no flag all stop the
launch with a usage error. The flag inventory (``megatron_lm_flags.json``) records nargs, type and choices
for every flag; this module applies them to a parsed launch and raises an ``InputError`` naming the first
problem, as argparse would.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import InputError
from .tables import ArgItem, ParsedScript, megatron_flags

# Megatron Core 0.19 CudaGraphModule names, plus the spellings _parse_cuda_graph_modules_arg passes through.
_GRAPH_MODULE_WORDS = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full", "full_iteration",
                       "full_iteration_inference")  # fmt: skip
_PATTERN_CHARS = re.compile(r"[^,\d\[\]\(\)\+\*]")


def _argparse_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _argparse_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _freq_pattern(text: str) -> bool:
    """moe_freq_type: an integer, or a list expression of digits, [ ] ( ) + * and commas only."""
    if "[" not in text:
        return _argparse_int(text)
    return not _PATTERN_CHARS.search(text)


_FREQ = "an integer N or a list expression of digits, [ ] ( ) + * and commas (no spaces or quotes)"
_TYPES: dict[str, tuple[Any, str]] = {
    "int": (_argparse_int, "an integer"),
    "float": (_argparse_float, "a number"),
    "moe_freq_type": (_freq_pattern, _FREQ + ", e.g. ([0]*3+[1]*58)"),
    "la_freq_type": (_freq_pattern, _FREQ),
    "no_rope_freq_type": (_freq_pattern, _FREQ),
    "_parse_cuda_graph_modules_arg": (
        lambda v: v in _GRAPH_MODULE_WORDS,
        "one of " + ", ".join(_GRAPH_MODULE_WORDS),
    ),
}


def _choices(spec: dict[str, Any]) -> list[str] | None:
    choices = spec.get("choices")
    if not choices:
        return None
    if spec.get("type") == "enum_type_handler":  # Enum members: the user writes the member name
        return [str(c).rsplit(".", 1)[-1] for c in choices]
    return [str(c) for c in choices]


def _value_problem(item: ArgItem, spec: dict[str, Any]) -> str | None:
    """What argparse says about this flag's values, or None when it accepts them."""
    nargs = spec.get("nargs", 1)
    if not item.values and nargs in (1, "+"):
        return "needs a value (argparse: expected one argument)" if nargs == 1 else "needs at least one value"
    if isinstance(nargs, int) and nargs > 1 and len(item.values) != nargs:
        return f"takes exactly {nargs} values"
    for value in item.values:
        if "$" in value:  # an unresolved shell variable: listed as not checked
            continue
        type_name = spec.get("type")
        check = _TYPES.get(type_name)
        if check and not check[0](value):
            return f"{value!r} is not {check[1]} (argparse type {type_name})"
        choices = _choices(spec)
        if choices and value not in choices:
            return f"{value!r} is not one of {', '.join(choices)}"
    return None


def check_megatron_arguments(parsed: ParsedScript) -> None:
    """Raise an InputError for the first flag or word Megatron-LM's argument parser would refuse."""
    flags = megatron_flags()
    for item in parsed.items:
        spec = flags.get(item.flag)
        if spec is None:
            continue  # unknown flags are findings (LM_UNKNOWN_FLAG) with a did-you-mean and a rename
        if spec["kind"] != "value":
            if item.inline:
                raise InputError(item.flag, item.values[0], "nothing: it is a switch and takes no value")
            continue
        problem = _value_problem(item, spec)
        if problem:
            raise InputError.plain(f"megatron_args: {item.flag} {problem}")
    if parsed.stray:
        word = parsed.stray[0]
        raise InputError.plain(
            f"megatron_args: {word!r} follows the Megatron flags but belongs to none of them "
            "(argparse: unrecognized arguments); quote a value with spaces, or remove the word"
        )
