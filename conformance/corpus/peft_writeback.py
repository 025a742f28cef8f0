"""The engine's LoRA, written back, applied by Megatron Bridge itself: the deliverable checked on upstream's code.

For every Nemotron 3 PEFT recipe the engine checks (engine/recipes_nemotron3.yaml), the recipe's configuration
with another LoRA rank and target list is rendered as the engine renders it (``bridge_override_list`` and
``bridge_python_snippet``) and applied to the recipe's own ConfigContainer, built by the wheel's function, with
Bridge's ``process_config_with_overrides`` (Hydra in struct mode; PEFT objects excluded and restored) and, for
the Python form, by running it. A second container, the same recipe with ``peft`` set to None (a full-training
recipe), takes the override list with the LoRA class added as its target, as references/ says, and the Python
form as written. Each must come out a LoRA with the rank and targets written and the recipe's layout.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path
from typing import Any

from moe_long_context.dialects.overrides import bridge_override_list, bridge_python_snippet
from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.representative import nemotron3_recipes

from . import bridge_env
from .bridge_recipes import RUN_DIR, _in_folder
from .build import _oracle

_FUNCTION = re.compile(r"megatron/bridge/(\S+)\.py:\d+ (\w+)")
LORA_CLASS = "megatron.bridge.peft.lora.LoRA"
CHANGED = {"lora_dim": 64, "lora_target_modules": ("linear_qkv", "linear_proj", "in_proj")}


def _recipe(source: str) -> Any:
    m = _FUNCTION.search(source)
    if m is None:
        raise ValueError(f"no recipe function in {source!r}")
    module = importlib.import_module("megatron.bridge." + m.group(1).replace("/", "."))
    bridge_env.offline_auto_bridge()
    with _in_folder(RUN_DIR):
        return getattr(module, m.group(2))()


def _problems(name: str, cfg: Any, want: TrainingConfig) -> list[str]:
    from megatron.bridge.peft.lora import LoRA

    peft = cfg.peft
    if not isinstance(peft, LoRA):
        return [f"{name}: cfg.peft is {type(peft).__name__}, not LoRA"]
    out = []
    if peft.dim != want.lora_dim:
        out.append(f"{name}: dim {peft.dim}, written {want.lora_dim}")
    if list(peft.target_modules) != list(want.lora_target_modules):
        out.append(
            f"{name}: target_modules {list(peft.target_modules)}, written {list(want.lora_target_modules)}"
        )
    if cfg.model.tensor_model_parallel_size != want.tp:
        out.append(f"{name}: TP {cfg.model.tensor_model_parallel_size}, the recipe's {want.tp}")
    return out


def check() -> tuple[list[str], list[str]]:
    """(one line per recipe and form, the problems)."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    lines, problems = [], []
    for layout in nemotron3_recipes():
        if layout.config.get("peft") != "lora":
            continue
        want = TrainingConfig(**{**layout.config, **CHANGED})
        overrides = bridge_override_list(want)
        snippet = bridge_python_snippet(want)
        forms = {
            "overrides on the PEFT recipe": (False, overrides),
            "overrides with the LoRA target on the recipe with peft None": (True, [f"++peft._target_={LORA_CLASS}", *overrides]),
            "Python on the PEFT recipe": (False, snippet),
            "Python on the recipe with peft None": (True, snippet),
        }  # fmt: skip
        for form, (null, written) in forms.items():
            cfg = _recipe(layout.source)
            if null:
                cfg.peft = None
            try:
                if isinstance(written, str):
                    exec(compile(written, f"<{layout.id}>", "exec"), {"cfg": cfg})
                else:
                    process_config_with_overrides(cfg, cli_overrides=list(written))
                found = _problems(f"{layout.id}, {form}", cfg, want)
            except Exception as exc:
                found = [
                    f"{layout.id}, {form}: Bridge raises {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                ]
            problems += found
            lines.append(f"  {'FAIL' if found else 'ok  '} {layout.id}: {form}")
    return lines, problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--megatron", type=Path, required=True)
    p.add_argument("--bridge", type=Path, required=True)
    args = p.parse_args(argv)
    _oracle(args.megatron, args.bridge)
    lines, problems = check()
    print(f"LoRA write-back applied by Bridge 0.6.2: {len(lines) - len(problems)} of {len(lines)} as written")
    print("\n".join(lines + [f"  - {p}" for p in problems]))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
