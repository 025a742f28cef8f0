"""Which override keys Megatron Bridge 0.6.2 accepts, and how list-form values read in engine terms.

Bridge applies overrides with Hydra in struct mode over the ConfigContainer: a key that is not a field of
the recipe's objects stops the run ("Could not override 'model.tensor_model_parallel_sz'"). The fields are
in ``bridge_keys.json``, generated from the Bridge 0.6.2 and Megatron Core 0.19.2 wheels by
``scripts/gen_bridge_keys.py`` (the command is in the file). Sections whose objects are plain dicts
(``env_vars``) take any key; keys below a field (``dataset.offline_packing_specs.pad_cu_seqlens``) are
checked down to the field.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def bridge_sections() -> dict[str, dict[str, str]]:
    data = json.loads(resources.files(__package__).joinpath("bridge_keys.json").read_text())
    return data["sections"]


@cache
def free_sections() -> frozenset[str]:
    data = json.loads(resources.files(__package__).joinpath("bridge_keys.json").read_text())
    return frozenset(data["free_sections"])


@cache
def _all_keys() -> tuple[str, ...]:
    return tuple(f"{s}.{f}" for s, fields in bridge_sections().items() for f in fields) + tuple(
        bridge_sections()
    )


def unknown_bridge_key(key: str) -> tuple[bool, str | None]:
    """(whether Bridge 0.6.2 refuses the key, the closest key it accepts)."""
    sections = bridge_sections()
    parts = key.split(".")
    section = parts[0]
    if section not in sections:
        return True, _closest(key)
    if len(parts) == 1 or section in free_sections():
        return False, None
    if parts[1] in sections[section]:
        return False, None
    # not a field: Bridge instantiates the class it names (omegaconf_utils.py:478-486)
    if key == "peft._target_":
        return False, None
    return True, _closest(key, prefix=section + ".")


def _closest(key: str, prefix: str = "") -> str | None:
    pool = [k for k in _all_keys() if k.startswith(prefix)] if prefix else list(_all_keys())
    head = ".".join(key.split(".")[:2])
    match = difflib.get_close_matches(head, pool, n=1, cutoff=0.7)
    if not match and prefix:  # a field of another section (ddp.sequence_parallel -> model.sequence_parallel)
        field = key.split(".")[1]
        match = [k for k in _all_keys() if k.endswith("." + field)][:1]
    if not match:
        return None
    rest = key.split(".")[2:]
    return ".".join([match[0], *rest])


_SCALARS = {"int": int, "float": float, "bool": bool}


def _scalar_type(annotation: str) -> tuple[type, bool] | None:
    """(int, float or bool, whether None is allowed) for a plain scalar annotation, else None."""
    text = annotation.replace(" ", "")
    optional = False
    if text.startswith("Optional[") and text.endswith("]"):
        text, optional = text[9:-1], True
    elif text.endswith("|None"):
        text, optional = text[:-5], True
    return (_SCALARS[text], optional) if text in _SCALARS else None


def bridge_value_problem(key: str, value: Any) -> str | None:
    """Why Bridge 0.6.2 cannot use ``value`` for ``key`` (Hydra does not convert: an int field given 2.0 or
    'two' keeps it), or None. Only plain int / float / bool fields are checked."""
    parts = key.split(".")
    if len(parts) != 2:
        return None
    annotation = bridge_sections().get(parts[0], {}).get(parts[1])
    kind = _scalar_type(annotation) if annotation else None
    if kind is None:
        return None
    want, optional = kind
    noun = {int: "an integer", float: "a number", bool: "true or false"}[want]
    if value is None:
        return None if optional else f"null, but {key} takes {noun} and cannot be null"
    if want is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return None
    if isinstance(value, want) and (want is bool or not isinstance(value, bool)):
        return None
    shown = "a float" if isinstance(value, float) else "a boolean" if isinstance(value, bool) else (
        "a string" if isinstance(value, str) else f"a {type(value).__name__}")  # fmt: skip
    return f"{shown}, but {key} takes {noun} (Bridge keeps the value Hydra reads, unconverted)"


_LAYOUT_WORDS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}


def layout_from_list(value: Any) -> str | None:
    """A list-form pipeline layout ([["embedding","decoder",...], ...], one list per virtual stage, as
    Bridge's DeepSeek-V3 recipes write it) in the engine's string form ('Et|tt|...|tmL'); None if not one."""
    if not isinstance(value, list) or not all(isinstance(stage, list) for stage in value):
        return None
    stages = []
    for stage in value:
        if not all(isinstance(w, str) and w in _LAYOUT_WORDS for w in stage):
            return None
        stages.append("".join(_LAYOUT_WORDS[w] for w in stage))
    return "|".join(stages)
