"""The architecture values Megatron-LM derives when a launch leaves their flags out.

parse_args gives an absent flag its argparse default, and validate_args fills in the FFN sizes from the
hidden size; the engine reads a launch with the same values, and says which it derived.
"""

from __future__ import annotations

from typing import Any

from ..engine.rules import finding
from .tables import megatron_flags


def derive_ffn_sizes(u: Any, values: dict[str, list[str]]) -> None:
    """The FFN sizes validate_args fills in when their flags are absent, recorded in ``u.derived``.

    LM arguments.py:1280-1289: --ffn-hidden-size defaults to 4 x --hidden-size, or int(4h x 2/3 / 64) x 64
    with --swiglu; arguments.py:1593-1597: --num-experts 0 means no experts, and --moe-ffn-hidden-size
    defaults to --ffn-hidden-size.
    """
    arch = u.architecture
    hidden = arch.get("hidden_size")
    if "intermediate_size" not in arch and isinstance(hidden, int) and not isinstance(hidden, bool):
        swiglu = "--swiglu" in values
        arch["intermediate_size"] = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
        rule = "int(4 x hidden x 2/3 / 64) x 64 with --swiglu" if swiglu else "4 x hidden"
        u.derived["--ffn-hidden-size"] = {
            "value": arch["intermediate_size"],
            "from": f"--hidden-size {hidden}: {rule} (LM arguments.py:1280-1289)",
        }
    experts = arch.get("num_experts")
    flags = megatron_flags()
    for flag, key, needs in (
        ("--moe-router-topk", "num_experts_per_tok", experts),
        ("--num-query-groups", "num_key_value_heads", "--group-query-attention" in values),
    ):
        if needs and key not in arch:  # argparse's default, as parse_args leaves it
            arch[key] = flags[flag]["default"]
            u.derived[flag] = {"value": arch[key], "from": "argparse default (LM arguments.py)"}
    if experts and "moe_intermediate_size" not in arch and "intermediate_size" in arch:
        arch["moe_intermediate_size"] = arch["intermediate_size"]
        u.derived["--moe-ffn-hidden-size"] = {
            "value": arch["intermediate_size"],
            "from": "--ffn-hidden-size (LM arguments.py:1595-1596)",
        }
        u.notes.append(
            finding(
                "MOE_FFN_FROM_FFN",
                f"--moe-ffn-hidden-size is not given: Megatron-LM uses --ffn-hidden-size "
                f"({arch['intermediate_size']}{', itself derived from --hidden-size' if '--ffn-hidden-size' in u.derived else ''}) "
                "for the experts.",
                "Give --moe-ffn-hidden-size if the experts are narrower than the dense FFN.",
                ["--ffn-hidden-size"],
            )
        )
