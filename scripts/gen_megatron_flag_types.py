"""Add argparse's value type to every flag of dialects/megatron_lm_flags.json.

Builds Megatron-LM's argument parser (core_r0.19, shipped in the megatron-core 0.19.2 wheel) on the CPU
through the conformance environment, reads each action's ``type`` and records it as ``type``: ``int``,
``float``, ``str`` or the name of Megatron's own converter (``moe_freq_type``, ...). The other entries of the
file are left as they are. Run from the repository root with the conformance venv (``make conformance``
builds it):

    build/conformance/venv/bin/python scripts/gen_megatron_flag_types.py build/conformance/mcore
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ROOT / "tools" / "moe_long_context" / "dialects" / "megatron_lm_flags.json"


def _type_name(action: argparse.Action) -> str | None:
    t = action.type
    if t is None:
        return None if action.nargs == 0 else "str"
    return getattr(t, "__name__", type(t).__name__)


def main(argv: list[str]) -> int:
    core = Path(argv[0]) if argv else ROOT / "build" / "conformance" / "mcore"
    sys.path.insert(0, str(ROOT))
    from conformance.megatron_env import load

    load(core)
    from megatron.training.arguments import add_megatron_arguments

    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(parser)
    data = json.loads(FLAGS.read_text())
    flags = data["flags"]
    for action in parser._actions:
        for option in action.option_strings:
            if option in flags and flags[option]["kind"] == "value":
                name = _type_name(action)
                if name is not None:
                    flags[option]["type"] = name
    data["_about"] = data["_about"].split(" Types:")[0] + (
        " Types: argparse's type per value flag (int, float, str or Megatron's converter), added by "
        "scripts/gen_megatron_flag_types.py."
    )
    FLAGS.write_text(json.dumps(data, indent=0, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
