"""Megatron-LM's --moe-layer-freq as the engine reads it: an int frequency or a per-layer list of 0 (dense) and
1 (MoE), written as Python list arithmetic ('([0]*3+[1]*58)', '[0,1,1]'). Read by pattern, never expanded."""

from __future__ import annotations

import re


def moe_layer_freq_dense(text: str) -> int | None:
    """Leading dense layers from --moe-layer-freq ('1', '([0]*3+[1]*58)', '[0,0,0,1,...]')."""
    compact = text.replace(" ", "")
    m = re.fullmatch(r"\(?\[0\]\*(\d+)\+\[1\]\*(\d+)\)?", compact)
    if m:
        return int(m.group(1))
    if compact == "1":
        return 0
    m = re.fullmatch(r"\[([01](?:,[01])*)\]", compact)
    if m:
        bits = m.group(1).split(",")
        dense = len(bits) - len("".join(bits).lstrip("0"))
        return dense if "0" not in "".join(bits)[dense:] else None
    return None


def moe_layer_freq_length(text: str) -> int | None:
    """Entries of a per-layer list ('([0]*3+[1]*58)' has 61); None for an int frequency or what is not read."""
    compact = text.replace(" ", "").removeprefix("(").removesuffix(")")
    if not compact.startswith("["):
        return None
    total = 0
    for part in compact.split("+"):
        m = re.fullmatch(r"\[([01](?:,[01])*)\](?:\*(\d+))?", part)
        if not m:
            return None
        total += len(m.group(1).split(",")) * int(m.group(2) or 1)
    return total
