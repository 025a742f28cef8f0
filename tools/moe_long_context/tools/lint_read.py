"""lint_config's reading of a launch: what is refused as not a launch, and the findings about the input itself.

Input that is not a launch (empty, no flag or key, a file path given as text, what argparse or Hydra would
refuse) is refused with one line naming what is wrong; an override key Bridge 0.6.2's ConfigContainer does
not have is an error with a did-you-mean; without a GPU, one finding names the checks that were skipped.
"""

from __future__ import annotations

from typing import Any

from ..dialects.argcheck import check_megatron_arguments
from ..dialects.bridge_keys import bridge_sections, bridge_value_problem, layout_from_list, unknown_bridge_key
from ..dialects.bridge_read import engine_reads
from ..dialects.launch import Understood, understand_bridge, understand_megatron
from ..dialects.shell import quote
from ..dialects.tables import (
    bridge_override_prefixes,
    flatten_config,
    load_config_object,
    megatron_flags,
    parse_bridge_overrides,
    parse_megatron_args,  # fmt: skip
)
from ..engine.context import Context
from ..engine.findings import Finding, NotChecked
from ..engine.rules import finding
from ..engine.rules.bridge_state_checks import JUDGED_KEYS, JUDGED_NOTE
from ..engine.rules.upstream import model_keys, not_checked_written
from ..errors import InputError
from ..model.specs import ModelSpec


def _preview(text: str) -> str:
    one = " ".join(text.split())
    return one[:60] + ("..." if len(one) > 60 else "")


def _refuse_non_launch(name: str, source: Any) -> None:
    """Refuse input that is not a launch at all: empty, or a file path given as text."""
    if isinstance(source, list):
        if not any(str(s).strip() for s in source):
            raise InputError.plain(f"{name} is empty: give the launch as text or a list of its words")
        return
    if isinstance(source, str):
        text = source.strip()
        if not text:
            raise InputError.plain(
                f"{name} is empty: give the launch script's text, its flags or its overrides"
            )
        if not any(c.isspace() for c in text) and ("/" in text or text.endswith((".sh", ".yaml", ".yml", ".json")))\
                and "=" not in text and not text.startswith(("-", "{")):  # fmt: skip
            raise InputError.plain(
                f"{name}={text[:80]!r} looks like a file path, which is not read here: pass the file's text "
                "(the moe-lc CLI reads a path that exists)"
            )


def _bash_breaks(flag: str, value: str) -> Finding:
    """LAUNCH_BASH_UNQUOTED: bash splits this value at its unquoted | ( ) before Megatron sees it."""
    return finding(
        "LAUNCH_BASH_UNQUOTED",
        f"{flag} {value} is not quoted: bash reads its | as a pipe and ( ) as a subshell (with parentheses a "
        "syntax error), so the launch fails before Megatron starts.",
        f"Quote the value: {flag} {quote(value)}",
        [flag],
    )


def understand_launch(dialect: str, source: Any) -> tuple[Understood, Any]:
    """The launch read in engine terms, and its parsed form; refuses what is not a launch."""
    if dialect == "megatron-lm":
        _refuse_non_launch("megatron_args", source)
        parsed = parse_megatron_args(source)
        if not parsed.items:
            raise InputError.plain(
                f"megatron_args has no Megatron-LM flag (read {_preview(_source_of(source))!r}): give the launch "
                "script or its flags, e.g. --tensor-model-parallel-size 2 --seq-length 131072"
            )
        check_megatron_arguments(parsed)
        understood = understand_megatron(parsed)
        understood.notes += [_bash_breaks(flag, value) for flag, value in parsed.bash_breaks.items()]
        return understood, parsed
    if dialect == "bridge":
        _refuse_non_launch("bridge_overrides", source)
        keys = parse_bridge_overrides(source)
        if not keys:
            raise InputError.plain(
                "bridge_overrides has no key=value item, e.g. model.context_parallel_size=8"
            )
        _refuse_wrong_types("bridge_overrides", keys)
        prefixes = bridge_override_prefixes(source)
        _refuse_append_to_set_keys(prefixes, keys)
        understood = understand_bridge(_engine_keys(keys))
        understood.notes += peft_override_findings(prefixes)
        return understood, keys
    _refuse_non_launch("config", source)
    obj = load_config_object(source)
    keys = flatten_config(obj)
    if not keys:
        raise InputError.plain("config has no ConfigContainer section (model, train, optimizer, ...)")
    _refuse_wrong_types("config", keys)
    return understand_bridge(_engine_keys(keys)), obj


def peft_override_findings(prefixes: dict[str, str]) -> list[Finding]:
    """How Bridge 0.6.2 applies peft overrides (run with hydra-core 1.3.8): a plain peft.<field> is refused on
    every recipe; on a PEFT recipe peft=null and peft._target_ are undone when Bridge restores its PEFT object."""
    out = []
    plain = [k for k, prefix in prefixes.items() if k.startswith("peft.") and not prefix]
    if plain:
        out.append(finding(
            "BRIDGE_PEFT_KEY_PLAIN",
            f"Hydra refuses {', '.join(plain)} (\"Could not override\"): a recipe's LoRA is left out of Bridge's "
            "OmegaConf view (a PEFT object is callable) and a full-training recipe's peft is null, so there is "
            "no such key to override.",
            "Write " + ", ".join(f"++{k}" for k in plain) + " (Hydra's add-or-override).",
            plain,
        ))  # fmt: skip
    undone = [k for k in ("peft", "peft._target_") if k in prefixes]
    if undone:
        out.append(finding(
            "BRIDGE_PEFT_OBJECT_RESTORED",
            f"{' and '.join(undone)} only takes effect on a full-training recipe: on a PEFT recipe Bridge puts "
            "the recipe's PEFT object back after the overrides, so peft=null leaves LoRA on and a peft._target_ "
            "is dropped with every peft key beside it. The engine read them as written.",
            "For full training start from the model's SFT or pretrain recipe; on a PEFT recipe drop "
            "peft._target_ and set its fields alone (++peft.dim=...).",
            undone,
        ))  # fmt: skip
    return out


# Sections every recipe builds as an object (others, like peft, comm_overlap or profiling, may be null).
_ALWAYS_OBJECTS = ("model", "train", "optimizer", "ddp", "scheduler", "dataset", "checkpoint", "logger", "tokenizer",
                   "dist", "rng")  # fmt: skip


def _refuse_append_to_set_keys(prefixes: dict[str, str], keys: dict[str, Any]) -> None:
    """Hydra's '+' appends a key and refuses one that holds a value ("Could not append to config. An item is
    already at ..."; Bridge applies overrides with ConfigLoaderImpl._apply_overrides_to_config,
    training/utils/omegaconf_utils.py:163-183). Judged only where it changes the reading: a key the engine reads
    whose field is a plain int, float, bool, str or Literal with no None (no such field of the target versions
    defaults to None; a dtype or callable may be left out of Bridge's OmegaConf view, where '+' does add it)."""
    sections = bridge_sections()
    for key, prefix in prefixes.items():
        section, _, name = key.partition(".")
        kind = sections.get(section, {}).get(name, "")
        if (
            prefix != "+"
            or section not in _ALWAYS_OBJECTS
            or not kind
            or isinstance(keys.get(key), (dict, list))
        ):
            continue
        plain = kind in ("int", "float", "bool", "str") or kind.startswith("Literal[")
        if plain and "None" not in kind and engine_reads(key):
            raise InputError.plain(
                f"bridge_overrides: +{key} appends a key, and Hydra refuses it where the recipe already sets one "
                f"(Could not append to config): write {key}=... to override it, or ++{key}=... to add or override"
            )


def _refuse_wrong_types(name: str, keys: dict[str, Any]) -> None:
    """Refuse a value the engine reads that Bridge would keep but cannot run with (a string TP, a null EP).

    Bridge applies overrides with no conversion or type check (training/utils/omegaconf_utils.py: OmegaConf
    from a plain dict, Hydra's OverridesParser, then setattr), so a key the engine does not read keeps
    whatever value it is given, as the recipes themselves do (train.manual_gc_eval=100 on a bool field,
    model.rotary_base=1000000.0 on an int one, model.q_lora_rank=null): those are accepted unread.
    """
    for key, value in keys.items():
        if not engine_reads(key):
            continue
        problem = bridge_value_problem(key, value)
        if problem:
            raise InputError.plain(f"{name}: {key}={value!r} is {problem}")


def _source_of(source: Any) -> str:
    return source if isinstance(source, str) else " ".join(map(str, source))


def _engine_keys(keys: dict[str, Any]) -> dict[str, Any]:
    """Bridge values in the form the dialect table reads (a list-form pipeline layout as its string)."""
    out = dict(keys)
    layout = out.get("model.pipeline_model_parallel_layout")
    as_text = layout_from_list(layout)
    if as_text is not None:
        out["model.pipeline_model_parallel_layout"] = as_text
    return out


def bridge_key_findings(keys: dict[str, Any]) -> tuple[list[Finding], dict[str, str | None]]:
    """BRIDGE_UNKNOWN_KEY for every key Bridge 0.6.2's ConfigContainer does not have, and the renames."""
    found, renames = [], {}
    for key in keys:
        unknown, close = unknown_bridge_key(key)
        if not unknown:
            continue
        renames[key] = close if close and close not in keys else None
        found.append(finding(
            "BRIDGE_UNKNOWN_KEY",
            f"{key} is not a field of Megatron Bridge 0.6.2's ConfigContainer: Hydra stops with "
            f"\"Could not override '{key}'\" and the engine did not read it.",
            f"Did you mean {close}?" if close else "Remove it, or check the key against the recipe's ConfigContainer.",
            [key],
        ))  # fmt: skip
    return found, renames


# GPU-dependent checks, by what they check (the rule codes that stay silent without a GPU).
GPU_CHECKS = {
    "precision recipe support on the GPU": ["PRECISION_GPU", "PRECISION_ADVICE"],
    "flex dispatcher backend on the GPU": ["DISPATCHER_GPU", "DISPATCHER_ADVICE"],
    "NVLink domains": ["TP_OUTSIDE_NVLINK", "EP_OUTSIDE_NVLINK", "CP_OUTSIDE_NVLINK"],
    "memory fit": ["MEMORY_OVER_BUDGET"],
}


def gpu_skipped(ctx: Context) -> Finding:
    what = "; ".join(f"{k} ({', '.join(v)})" for k, v in GPU_CHECKS.items())
    extra = (
        f" precision={ctx.cfg.precision} was not checked against any GPU."
        if ctx.cfg.precision != "bf16"
        else ""
    )
    return finding(
        "GPU_CHECKS_SKIPPED",
        f"No GPU given, so these checks were skipped: {what}.{extra}",
        "Pass gpu (h100, h200, b200, b300, gb200, gb300) to run them.",
        ["gpu"],
    )


def lint_not_checked(u: Understood, parsed: Any, dialect: str, model: ModelSpec) -> list[NotChecked]:
    """What lint_config could not check: the not-modelled upstream checks the launch reaches (by the flags or keys
    it writes, its environment and its model), then each flag or key the engine does not read that no such check
    names already (with why, when the reading says: an unresolved shell variable, FP16, a per-layer list)."""
    written: dict[str, str] = {}
    values: dict[str, Any] = {}
    if dialect == "megatron-lm":
        flags = megatron_flags()
        for item in parsed.items:
            spec = flags.get(item.flag, {})
            dest = spec.get("dest") or item.flag.lstrip("-").replace("-", "_")
            written.setdefault(dest, item.flag)
            kind = spec.get("kind")
            values[dest] = (
                kind == "true"
                if kind in ("true", "false")
                else item.values[0]
                if len(item.values) == 1
                else None
            )
        for name, value in parsed.env.items():
            written.setdefault(f"env:{name}", name)
            values[f"env:{name}"] = value
    else:
        keys = parsed if dialect == "bridge" else flatten_config(parsed)
        for key, value in keys.items():
            name = f"env:{key.split('.', 1)[1]}" if key.startswith("env_vars.") else key
            written.setdefault(name, key)
            values[name.rsplit(".", 1)[-1] if not name.startswith("env:") else name] = value
    pattern = u.architecture.get("--hybrid-layer-pattern") or (parsed.get("model.hybrid_layer_pattern")
                                                                if isinstance(parsed, dict) else None)  # fmt: skip
    if (
        isinstance(pattern, str) and "|" in pattern
    ):  # stage boundaries the engine does not read (the model's has none)
        written["hybrid_pipe_boundaries"] = (
            "--hybrid-layer-pattern" if dialect == "megatron-lm" else "model.hybrid_layer_pattern"
        )
    written.update({k: v for k, v in model_keys(model).items() if k not in written})
    checks = not_checked_written(written, "megatron-lm" if dialect == "megatron-lm" else "bridge",
                                 {k: v for k, v in values.items() if v is not None})  # fmt: skip
    named = {key for c in checks for key in c.keys}
    out = list(checks)
    for text in u.not_checked:
        head, _, note = text.partition(" (")
        if head.split(" ")[0] in named:
            continue
        default = JUDGED_NOTE if head in JUDGED_KEYS else "not read by the engine: no rule uses it"
        out.append(NotChecked(keys=[head], requires=note.rstrip(")") or default))
    return out
