"""What a launch configuration says, in engine terms.

Reads a parsed Megatron-LM script or a set of Bridge keys and returns the engine fields it sets, the
flag or key each came from, the model architecture it declares, the GPU count, deprecated names (info,
as Megatron accepts them) and everything the engine does not model (listed as not checked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..engine.config import TrainingConfig
from ..engine.findings import Finding
from ..engine.rules import finding
from .tables import ParsedScript, dialect_table, megatron_flags


@dataclass
class Understood:
    dialect: str  # megatron-lm | bridge
    fields: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, list[str]] = field(default_factory=dict)
    not_checked: list[str] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    architecture: dict[str, Any] = field(default_factory=dict)  # as Hugging Face config.json keys
    num_gpus: int | None = None
    problems: list[str] = field(default_factory=list)  # values that could not be read

    def set(self, name: str, value: Any, source: str) -> None:
        self.fields[name] = value
        self.origin.setdefault(name, [])
        if source not in self.origin[name]:
            self.origin[name].append(source)


def _int(text: str) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _scalar(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _moe_layer_freq(text: str) -> int | None:
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


def _deprecated(name: str, new: str) -> Finding:
    return finding(
        "DEPRECATED_NAME",
        f"{name} is deprecated; Megatron still accepts it and reads it as {new}.",
        f"Write {new} instead.",
        [name],
    )


# --------------------------------------------------------------------------- Megatron-LM


def understand_megatron(parsed: ParsedScript) -> Understood:
    u = Understood("megatron-lm")
    table = dialect_table()
    by_flag: dict[str, str] = {}
    for name, spec in table["fields"].items():
        m = spec.get("megatron", {})
        if m.get("flag") and not spec.get("special"):
            by_flag[m["flag"]] = name
    deprecated = {
        "--cuda-graph-scope": ("cuda_graph_modules", "--cuda-graph-modules"),
        "--moe-router-padding-for-fp8": (
            "moe_router_padding_for_quantization",
            "--moe-router-padding-for-quantization",
        ),
    }
    flags = megatron_flags()
    values: dict[str, ArgValues] = {}
    for item in parsed.items:
        values[item.flag] = item.values
    arch = table["architecture"]
    for item in parsed.items:
        flag, vals = item.flag, item.values
        if flag in parsed.unknown:
            u.notes.append(
                finding(
                    "LM_UNKNOWN_FLAG",
                    f"{flag} is not a Megatron-LM argument: pretrain_gpt.py stops with 'unrecognized arguments'.",
                    _suggest_flag(flag),
                    [flag],
                )
            )
            continue
        if any("$" in v for v in vals):
            u.not_checked.append(f"{flag} {' '.join(vals)} (unresolved shell variable)")
            continue
        if flag in arch:
            u.architecture[arch[flag]] = _scalar(vals[0]) if vals else None
            continue
        if flag == "--moe-layer-freq":
            dense = _moe_layer_freq(vals[0]) if vals else None
            if dense is None:
                u.not_checked.append(f"{flag} {' '.join(vals)}")
            else:
                u.architecture["first_k_dense_replace"] = dense
            continue
        if flag in ("--experimental-attention-variant", "--hybrid-layer-pattern") and vals:
            u.architecture[flag] = vals[0]  # tells DSA and hybrid models from their dense-attention twins
            continue
        if flag in (
            "--multi-latent-attention",
            "--group-query-attention",
            "--untie-embeddings-and-output-weights",
        ):
            u.architecture[flag] = True
            continue
        name = by_flag.get(flag)
        if flag in deprecated:
            name, new = deprecated[flag]
            u.notes.append(_deprecated(flag, new))
        if name is not None:
            _set_plain(u, name, flag, vals, flags[flag]["kind"])
            continue
        if _special_megatron(u, flag, vals, values):
            continue
        u.not_checked.append(flag)
    for var, rule in table["environment"].items():
        if var not in parsed.env:
            continue
        value = parsed.env[var]
        if "true_when_contains" in rule:
            u.set(rule["field"], rule["true_when_contains"] in value, var)
        elif "false_when" in rule:
            u.set(rule["field"], value != rule["false_when"], var)
    # GPU count from the launcher (torchrun --nnodes x --nproc-per-node)
    nodes = (
        _int(parsed.launcher.get("--nnodes", "").split(":")[-1]) if parsed.launcher.get("--nnodes") else None
    )
    per_node = _int(parsed.launcher.get("--nproc-per-node", ""))
    if per_node and (nodes or parsed.launcher.get("--standalone")):
        u.num_gpus = per_node * (nodes or 1)
    for value in parsed.unresolved:
        if value not in u.not_checked and not any(value.startswith(n) for n in u.not_checked):
            u.not_checked.append(f"{value} (unresolved shell variable)")
    return u


ArgValues = list[str]


def _suggest_flag(flag: str) -> str:
    import difflib

    close = difflib.get_close_matches(flag, list(megatron_flags()), n=1, cutoff=0.75)
    return (
        f"Did you mean {close[0]}?"
        if close
        else "Remove it, or check the spelling against Megatron-LM's --help."
    )


def _set_plain(u: Understood, name: str, flag: str, vals: list[str], kind: str) -> None:
    field_info = TrainingConfig.model_fields[name]
    if kind == "true":
        u.set(name, True, flag)
    elif kind == "false":
        u.set(name, False, flag)
    elif name in ("recompute_modules", "cuda_graph_modules", "hierarchical_cp_sizes", "activation_offload"):
        items = [v for val in vals for v in val.replace(",", " ").split() if v]
        u.set(name, items, flag)
    elif name == "cp_comm_type":
        kinds = sorted(set(vals))
        if len(kinds) == 1:
            u.set(name, kinds[0], flag)
        else:
            u.not_checked.append(f"{flag} {' '.join(vals)} (per-layer cp_comm_type)")
    else:
        text = vals[0] if vals else ""
        if field_info.annotation in (int, int | None):
            value = _int(text)
            if value is None:
                u.problems.append(f"{flag} {text}: not an integer")
                return
            u.set(name, value, flag)
        elif field_info.annotation in (float, float | None):
            try:
                u.set(name, float(text), flag)
            except ValueError:
                u.problems.append(f"{flag} {text}: not a number")
        else:
            u.set(name, text, flag)


def _special_megatron(u: Understood, flag: str, vals: list[str], values: dict[str, list[str]]) -> bool:
    """Flags that map to composite engine fields. Returns True when the flag was consumed."""
    if flag in ("--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend", "--moe-enable-deepep"):
        kind = (values.get("--moe-token-dispatcher-type") or ["allgather"])[0]
        if "--moe-enable-deepep" in values:
            if flag == "--moe-enable-deepep":
                u.notes.append(_deprecated(flag, "--moe-flex-dispatcher-backend deepep"))
            backend = "deepep"
        else:
            backend = (values.get("--moe-flex-dispatcher-backend") or ["deepep"])[0]
        u.set("dispatcher", f"flex-{backend}" if kind == "flex" else kind, flag)
        return True
    if flag in ("--bf16", "--fp16", "--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe"):
        if "--fp4-format" in values:
            u.set("precision", "nvfp4", flag)
        elif "--fp8-format" in values:
            recipe = (values.get("--fp8-recipe") or ["delayed"])[0]
            u.set("precision", "mxfp8" if recipe == "mxfp8" else f"fp8-{recipe}", flag)
        elif flag == "--fp16":
            u.not_checked.append("--fp16 (FP16 training is not modelled; checked as BF16)")
            u.set("precision", "bf16", flag)
        else:
            u.set("precision", "bf16", flag)
        return True
    if flag in ("--optimizer-cpu-offload", "--optimizer-offload-fraction"):
        if "--optimizer-cpu-offload" in values:
            fraction = (values.get("--optimizer-offload-fraction") or ["1.0"])[0]
            try:
                u.set("optimizer_cpu_offload_fraction", float(fraction), flag)
            except ValueError:
                u.problems.append(f"--optimizer-offload-fraction {fraction}: not a number")
        return True
    if flag in ("--fine-grained-activation-offloading", "--offload-modules"):
        if "--fine-grained-activation-offloading" in values:
            mods = [v for val in values.get("--offload-modules", []) for v in val.replace(",", " ").split()]
            u.set("activation_offload", mods, flag)
        return True
    if flag == "--enable-cuda-graph":
        u.notes.append(_deprecated(flag, "--cuda-graph-impl local"))
        u.set("cuda_graph_impl", "local", flag)
        return True
    if flag == "--external-cuda-graph":
        u.notes.append(_deprecated(flag, "--cuda-graph-impl transformer_engine"))
        u.set("cuda_graph_impl", "transformer_engine", flag)
        return True
    if flag == "--moe-layer-recompute":
        u.notes.append(_deprecated(flag, "--recompute-granularity selective --recompute-modules moe"))
        u.set("recompute_granularity", "selective", flag)
        mods = u.fields.get("recompute_modules") or [
            v for val in values.get("--recompute-modules", []) for v in val.replace(",", " ").split()
        ]
        if "moe" not in mods:
            mods = [*mods, "moe"]
        u.set("recompute_modules", mods, flag)
        return True
    if flag == "--recompute-activations":
        u.set("recompute_granularity", "selective", flag)
        return True
    if flag == "--num-layers-per-virtual-pipeline-stage":
        u.set("_layers_per_virtual_stage", _int(vals[0]) if vals else None, flag)
        return True
    return False


# --------------------------------------------------------------------------- Bridge


def understand_bridge(keys: dict[str, Any]) -> Understood:
    u = Understood("bridge")
    table = dialect_table()
    by_key: dict[str, str] = {}
    for name, spec in table["fields"].items():
        b = spec.get("bridge", {})
        if spec.get("special"):
            continue
        for key in [b.get("key"), *b.get("also", []), *b.get("deprecated", [])]:
            if key:
                by_key[key] = name
    deprecated = {}
    for spec in table["fields"].values():
        for key in spec.get("bridge", {}).get("deprecated", []):
            deprecated[key] = spec["bridge"]["key"]
    for key, value in keys.items():
        if key in deprecated:
            u.notes.append(_deprecated(key, deprecated[key]))
        if key in by_key:
            name = by_key[key]
            if name in ("recompute_modules", "cuda_graph_modules", "hierarchical_cp_sizes") and isinstance(
                value, str
            ):
                value = [v for v in value.replace(",", " ").split() if v]
            if name == "cp_comm_type" and isinstance(value, list):
                if len(set(value)) == 1:
                    value = value[0]
                else:
                    u.not_checked.append(f"{key} (per-layer cp_comm_type)")
                    continue
            u.set(name, value, key)
        elif not _special_bridge(u, key, value, keys):
            u.not_checked.append(key)
    return u


_PRESETS = {spec["bridge"]: name for name, spec in dialect_table()["precision"].items()}


def _special_bridge(u: Understood, key: str, value: Any, keys: dict[str, Any]) -> bool:
    if key in (
        "model.moe_token_dispatcher_type",
        "model.moe_flex_dispatcher_backend",
        "model.moe_enable_deepep",
    ):
        kind = keys.get("model.moe_token_dispatcher_type", "alltoall")
        backend = (
            "deepep"
            if keys.get("model.moe_enable_deepep")
            else keys.get("model.moe_flex_dispatcher_backend") or "deepep"
        )
        if key == "model.moe_enable_deepep" and value:
            u.notes.append(_deprecated(key, "model.moe_flex_dispatcher_backend=deepep"))
        u.set("dispatcher", f"flex-{backend}" if kind == "flex" else kind, key)
        return True
    if key == "mixed_precision" and isinstance(value, str):
        name = value.replace("-", "_")
        if name in _PRESETS:
            u.set("precision", _PRESETS[name], key)
        else:
            u.not_checked.append(f"{key}={value} (preset not modelled)")
        return True
    if key.startswith("mixed_precision.") and key.split(".", 1)[1] in (
        "fp8",
        "fp8_recipe",
        "fp4",
        "fp4_recipe",
    ):
        if keys.get("mixed_precision.fp4"):
            u.set("precision", "nvfp4", key)
        elif keys.get("mixed_precision.fp8"):
            recipe = keys.get("mixed_precision.fp8_recipe", "delayed")
            u.set("precision", "mxfp8" if recipe == "mxfp8" else f"fp8-{recipe}", key)
        return True
    if key in ("optimizer.optimizer_cpu_offload", "optimizer.optimizer_offload_fraction"):
        if keys.get("optimizer.optimizer_cpu_offload"):
            u.set(
                "optimizer_cpu_offload_fraction",
                float(keys.get("optimizer.optimizer_offload_fraction", 0.0)),
                key,
            )
        return True
    if key in ("model.fine_grained_activation_offloading", "model.offload_modules"):
        if keys.get("model.fine_grained_activation_offloading"):
            mods = keys.get("model.offload_modules") or []
            u.set("activation_offload", [mods] if isinstance(mods, str) else list(mods), key)
        return True
    if key in ("model.enable_cuda_graph", "model.external_cuda_graph"):
        if value:
            impl = "local" if key == "model.enable_cuda_graph" else "transformer_engine"
            u.notes.append(_deprecated(key, f"model.cuda_graph_impl={impl}"))
            u.set("cuda_graph_impl", impl, key)
        return True
    if key == "model.moe_layer_recompute":
        if value:
            u.notes.append(
                _deprecated(
                    key,
                    "model.recompute_granularity=selective with moe in recompute_modules",
                )
            )
            u.set("recompute_granularity", "selective", key)
            mods = list(u.fields.get("recompute_modules") or keys.get("model.recompute_modules") or [])
            u.set("recompute_modules", [*mods, "moe"] if "moe" not in mods else mods, key)
        return True
    return False
