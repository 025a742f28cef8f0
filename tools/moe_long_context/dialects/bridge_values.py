"""Bridge override values Megatron refuses at start that a reader would otherwise take as meant.

Bridge passes override values through as Hydra reads them (training/utils/omegaconf_utils.py), so a value the
engine reads must be one Megatron can use: the dispatcher's type and backend, list fields written as one string
(Megatron Core iterates a string as its characters), and mixed-precision recipe names Bridge registers.
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from .tables import dialect_table

# MCore 0.19.2 transformer/moe/moe_layer.py:297-322 builds one of these and raises on any other type; the flex
# dispatcher raises on a backend not among these (token_dispatcher.py:1769-1800).
DISPATCHER_TYPES = ("alltoall", "allgather", "flex")
FLEX_BACKENDS = ("deepep", "hybridep", "ncclep")

# List fields MCore turns into a set when the feature is on: (key, the switch that makes MCore check it, line).
_LIST_KEYS = (
    (
        "model.recompute_modules",
        ("model.recompute_granularity", "selective"),
        "transformer_config.py:1778-1782",
    ),
    (
        "model.offload_modules",
        ("model.fine_grained_activation_offloading", True),
        "transformer_config.py:1863-1867",
    ),
)


_ONE_WORD_LISTS = ("recompute_modules", "cuda_graph_modules", "hierarchical_cp_sizes")


def one_word_list(name: str, value: Any) -> Any:
    """A list field written as one string, as the engine reads it ('moe_act,layernorm'); check_bridge_values has
    refused the strings Megatron Core would read as characters."""
    return value.replace(",", " ").split() if isinstance(value, str) and name in _ONE_WORD_LISTS else value


def check_bridge_values(keys: dict[str, Any]) -> None:
    """Raise an InputError for the first value Megatron Core or Bridge would refuse at start."""
    kind = keys.get("model.moe_token_dispatcher_type")
    if kind is not None and kind not in DISPATCHER_TYPES:
        raise InputError(
            "model.moe_token_dispatcher_type", kind,
            "alltoall, allgather or flex (a flex backend goes in model.moe_flex_dispatcher_backend: deepep, hybridep "
            "or ncclep); Megatron Core's MoE layer raises on any other type (transformer/moe/moe_layer.py:297-322)",
        )  # fmt: skip
    backend = keys.get("model.moe_flex_dispatcher_backend")
    if (
        kind == "flex" and backend is not None and backend not in FLEX_BACKENDS
    ):  # only the flex dispatcher reads it
        raise InputError("model.moe_flex_dispatcher_backend", backend, "deepep, hybridep or ncclep; the flex "
                         "dispatcher raises on any other (transformer/moe/token_dispatcher.py:1769-1800)")  # fmt: skip
    for key, (switch, on), line in _LIST_KEYS:
        value = keys.get(key)
        if isinstance(value, str) and keys.get(switch) == on:
            raise InputError(
                key, value,
                f"a list such as [{value}]: Bridge passes a string through and Megatron Core reads it as its "
                f"characters ({sorted(set(value))}), which it refuses ({line})",
            )  # fmt: skip
    recipe = keys.get("mixed_precision")
    known = dialect_table()["bridge_mixed_precision_recipes"]
    if isinstance(recipe, str) and recipe.replace("-", "_") not in known:
        raise InputError(
            "mixed_precision", recipe,
            f"a recipe Bridge registers ({', '.join(known)}); training/mixed_precision.py:445-461 raises on any other",
        )  # fmt: skip
