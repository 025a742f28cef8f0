"""Reading the package's own YAML data files (presets, rules, dialects, layouts) fast.

libyaml's C parser builds the same safe Python types as PyYAML's pure-Python one in a fraction of the time,
which is most of a cold start; user-supplied YAML keeps ``yaml.safe_load`` and its error messages.
"""

from __future__ import annotations

from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_data_yaml(text: str) -> Any:
    """One YAML document of the package's data, parsed with the C loader when PyYAML was built with it."""
    return yaml.load(text, Loader=_LOADER)
