"""Bridge's ``cfg.peft`` as override keys: a PEFT recipe's object overridden key by key, read as LoRA.

Megatron-LM has no PEFT; ``peft.dim`` and ``peft.target_modules`` are dialect-table keys (lora_dim,
lora_target_modules), the rest of a LoRA's fields (alpha, dropout, init methods) change neither memory nor time.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..engine.findings import Finding
from ..engine.rules import finding
from ..model.lora import LORA_DEFAULT_TARGETS, LORA_TARGETS


class Understood(Protocol):
    """What launch.Understood offers this module (a protocol, so this module does not import launch)."""

    fields: dict[str, Any]
    not_checked: list[str]
    notes: list[Finding]

    def set(self, name: str, value: Any, source: str) -> None: ...


def peft_key(u: Understood, key: str, keys: dict[str, Any]) -> bool:
    """cfg.peft itself: null is full training; a peft=<text> override is not read (Bridge would keep the string,
    no conversion). _target_ is read by bridge_peft; any other peft key the table does not map is not read."""
    if key == "peft" and keys[key] is None:
        u.set("peft", "none", key)
        return True
    return key == "peft._target_"


def bridge_peft(u: Understood, keys: dict[str, Any]) -> None:
    """Any peft.* key overrides a recipe's PEFT object: read as LoRA unless its _target_ names another scheme
    (DoRA and canonical LoRA are not modelled, and then nothing of it is read)."""
    peft_keys = [k for k in keys if k.startswith("peft.")]
    if not peft_keys:
        return
    scheme = str(keys.get("peft._target_") or "LoRA").rsplit(".", 1)[-1]
    if scheme != "LoRA":
        u.fields = {k: v for k, v in u.fields.items() if k not in ("lora_dim", "lora_target_modules")}
        u.not_checked.append(f"{', '.join(peft_keys)} (PEFT scheme {scheme} not modelled: LoRA only)")
        return
    u.set("peft", "lora", peft_keys[0])
    _exclude_with_targets(u, keys)
    _known_targets(u, keys)


def _value(keys: dict[str, Any], name: str) -> tuple[str | None, Any]:
    key = next((k for k in keys if k.endswith(f"peft.{name}")), None)
    return key, keys.get(key) if key else None


def _exclude_with_targets(u: Understood, keys: dict[str, Any]) -> None:
    """Bridge's matcher asserts exclude_modules is empty whenever target_modules is not (peft/module_matcher.py:
    141-142), and LoRA's target_modules defaults to four names (peft/lora.py:101-103): exclude_modules needs
    target_modules set empty."""
    excluded_key, excluded = _value(keys, "exclude_modules")
    targets_key, targets = _value(keys, "target_modules")
    if targets_key is None:
        targets = list(LORA_DEFAULT_TARGETS)
    sized = (str, list, tuple, dict)  # Bridge keeps the value as Hydra parsed it and takes its len()
    if not (isinstance(excluded, sized) and excluded and isinstance(targets, sized) and targets):
        return
    named = f"{targets_key}={targets}" if targets_key else f"target_modules (LoRA's default {targets})"
    u.notes.append(
        finding(
            "PEFT_EXCLUDE_WITH_TARGETS",
            f"{excluded_key} is set next to {named}: Bridge's module matcher asserts 'exclude_modules should be "
            "empty when using target_modules' when LoRA transforms the model, so the run stops there.",
            "Either list the linears LoRA should wrap in target_modules and drop exclude_modules, or set "
            "++peft.target_modules=[] to wrap every linear except those in exclude_modules.",
            [k for k in (excluded_key, targets_key) if k],
        )
    )


def _known_targets(u: Understood, keys: dict[str, Any]) -> None:
    """Keep the target_modules entries the engine models. Bridge accepts any name or wildcard pattern and only
    warns when an entry matches no module (peft/module_matcher.py:195-209), so the others are not checked, not
    refused; with none left the estimate cannot say what LoRA trains, and LoRA is not read."""
    if "lora_target_modules" not in u.fields:
        return
    targets = u.fields["lora_target_modules"]
    names = [] if targets is None else list(targets) if isinstance(targets, list | tuple) else [targets]
    known = [n for n in names if n in LORA_TARGETS]
    other = [n for n in names if n not in LORA_TARGETS]
    if names and not other:
        return
    where = _value(keys, "target_modules")[0] or "peft.target_modules"
    if not names:  # the matcher then takes every nn.Linear not excluded (peft/module_matcher.py:113-121)
        other = ["empty, so Bridge's matcher takes every nn.Linear that exclude_modules does not name"]
    if known:
        u.fields["lora_target_modules"] = known
        verdict = (
            "not a modelled module name",
            "Bridge warns at build when an entry matches no module and trains no adapter for it",
        )
    else:
        u.fields = {k: v for k, v in u.fields.items() if k not in ("peft", "lora_dim", "lora_target_modules")}
        verdict = (
            "no modelled module name",
            "LoRA is not read, and memory and time are those of full training",
        )
    u.not_checked.append(
        f"{where} ({', '.join(map(str, other))}: {verdict[0]}, which are {', '.join(LORA_TARGETS)}; {verdict[1]})"
    )
