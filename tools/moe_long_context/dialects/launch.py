"""What a launch configuration says, in engine terms.

Reads a parsed Megatron-LM script or a set of Bridge keys and returns the engine fields it sets, the
flag or key each came from, the model architecture it declares, the GPU count, deprecated names (info,
as Megatron accepts them) and everything the engine does not model (listed as not checked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engine.config import TrainingConfig
from ..engine.findings import Finding
from ..engine.rules import finding
from ..engine.rules.lm_args_features import lm_launch_findings
from .bridge_peft import bridge_peft, peft_key
from .bridge_values import check_bridge_values, one_word_list
from .conflicts import bridge_conflicts, megatron_conflicts
from .launch_checks import bridge_checks, megatron_checks
from .lm_args import LM_ONLY_FLAGS, runs_pretrain
from .lm_derived import derive_ffn_sizes
from .moe_layer_freq import moe_layer_freq_dense
from .overrides import FUNCTION_FLAGS
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
    derived: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # flag -> value and rule, as validate_args

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


def _moe_layer_with_full(name: str, full: str) -> Finding:
    """MCore transformer_config.py:1835-1843: the deprecated MoE-layer recompute refuses full recompute."""
    return finding(
        "RECOMPUTE_MOE_LAYER_FULL",
        f"{name} with {full}: Megatron Core refuses the deprecated MoE-layer recompute with full recompute.",
        "Drop the deprecated switch (full recompute already recomputes the MoE layer), or use selective recompute "
        "with moe in the recompute modules.",
        [name, full.split("=")[0].split(" ")[0]],
    )


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
        if flag in FUNCTION_FLAGS:  # judged against the model's own (lint_model.function_flags_missing)
            u.architecture[flag] = _scalar(vals[0]) if vals else True
        if flag in arch:
            u.architecture[arch[flag]] = _scalar(vals[0]) if vals else None
            if flag == "--mtp-num-layers":  # the launch's own MTP count wins over the catalog's
                _set_plain(u, "mtp_num_layers", flag, vals, "value")
            continue
        if flag == "--moe-layer-freq":
            u.architecture[flag] = vals[0] if vals else None  # its length is judged by lint_model
            dense = moe_layer_freq_dense(vals[0]) if vals else None
            if dense is None:
                u.not_checked.append(f"{flag} {' '.join(vals)}")
            else:
                u.architecture["first_k_dense_replace"] = dense
            continue
        if (
            flag
            in ("--experimental-attention-variant", "--hybrid-layer-pattern", "--position-embedding-type")
            and vals
        ):
            u.architecture[flag] = vals[0]  # tells DSA and hybrid models from their dense-attention twins
            continue
        if (
            flag
            in (
                "--multi-latent-attention",
                "--group-query-attention",
                "--untie-embeddings-and-output-weights",
                "--qk-layernorm",
                "--add-qkv-bias",
                "--moe-shared-expert-gate",
                "--use-rotary-position-embeddings",  # these two are judged with --mtp-num-layers (dialects/conflicts.py)
                "--no-position-embedding",
            )
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
        if _special_megatron(u, flag, vals, values) or _special_megatron_more(u, flag, values):
            continue
        if (
            flag not in LM_ONLY_FLAGS
        ):  # read by validate_args checks on the flags themselves (dialects/lm_args.py)
            u.not_checked.append(flag)
    if "--cuda-graph-scope" in values and "--cuda-graph-modules" in values:
        u.notes.append(
            finding(
                "LM_CUDA_GRAPH_SCOPE_AND_MODULES",
                "--cuda-graph-scope and --cuda-graph-modules are both given: Megatron-LM 0.19 asserts they are "
                "not used together.",
                "Drop the deprecated --cuda-graph-scope and keep --cuda-graph-modules.",
                ["--cuda-graph-scope", "--cuda-graph-modules"],
            )
        )
    _megatron_semantics(u, values)
    u.notes += megatron_checks(values)
    u.notes += lm_launch_findings(values, parsed.env, flags)  # validate_args on flags no field carries
    u.notes += [c.finding for c in megatron_conflicts(values, runs_pretrain(parsed.launcher_tokens))]
    # a whole launch script (assignments or a launcher line) says what it exports; bare flags do not
    is_script = bool(parsed.env or parsed.launcher_tokens)
    for var, rule in table["environment"].items():
        if var not in parsed.env:
            if "absent" in rule and is_script:
                u.set(rule["field"], rule["absent"], f"{var} (not exported by the launch)")
            continue
        value = parsed.env[var]
        if "true_when" in rule:
            u.set(rule["field"], value == rule["true_when"], var)
        elif "true_when_contains" in rule:
            u.set(rule["field"], rule["true_when_contains"] in value, var)
        elif "false_when" in rule:
            u.set(rule["field"], value != rule["false_when"], var)
    # GPU count from the launcher (torchrun --nnodes x --nproc-per-node)
    raw = parsed.launcher.get("--nnodes")  # absent: torchrun's default of one node
    nodes = _int(raw.split(":")[-1]) if raw else 1
    per_node = _int(parsed.launcher.get("--nproc-per-node", ""))
    if per_node and nodes:
        u.num_gpus = per_node * nodes
    for value in parsed.unresolved:
        if value not in u.not_checked and not any(value.startswith(n) for n in u.not_checked):
            u.not_checked.append(f"{value} (unresolved shell variable)")
    return u


ArgValues = list[str]

_LEGACY_GRAPH_FLAGS = {"--enable-cuda-graph": "local", "--external-cuda-graph": "transformer_engine"}


def _megatron_semantics(u: Understood, values: dict[str, list[str]]) -> None:
    """What validate_args derives from the flags as a whole (so flag order never matters)."""
    if "--mtp-num-layers" in values and "mtp_num_layers" not in u.fields:
        u.fields["mtp_num_layers"] = (
            None  # given but not read (a shell variable): the model's own count stands
        )
    if "--micro-batch-size" not in values:
        u.notes.append(
            finding(
                "LM_MICRO_BATCH_SIZE_MISSING",
                "--micro-batch-size is not given: Megatron-LM core_r0.19 has no default for it and asserts.",
                "Add --micro-batch-size (1 is the usual choice for long context).",
                ["--micro-batch-size"],
            )
        )
    derive_ffn_sizes(u, values)
    if (
        "--recompute-activations" in values
    ):  # LM arguments.py:589-590: selective, whatever --recompute-granularity says
        u.set("recompute_granularity", "selective", "--recompute-activations")
    legacy = [flag for flag in _LEGACY_GRAPH_FLAGS if flag in values]
    if legacy:
        impl = (values.get("--cuda-graph-impl") or ["none"])[0]
        if impl != "none" or len(legacy) > 1:
            u.notes.append(
                finding(
                    "GRAPH_LEGACY_WITH_IMPL",
                    f"{' and '.join(legacy)}"
                    + (f" with --cuda-graph-impl {impl}" if impl != "none" else " together")
                    + ": Megatron refuses the deprecated switches next to --cuda-graph-impl or each other.",
                    f"Keep only --cuda-graph-impl {impl if impl != 'none' else _LEGACY_GRAPH_FLAGS[legacy[-1]]}.",
                    [*legacy, "--cuda-graph-impl"],
                )
            )
        else:
            u.set("cuda_graph_impl", _LEGACY_GRAPH_FLAGS[legacy[0]], legacy[0])


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
    elif name in ("recompute_modules", "cuda_graph_modules", "hierarchical_cp_sizes", "activation_offload",
                  "moe_router_load_balancing_type", "moe_aux_loss_coeff"):  # fmt: skip
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
        # an FP4 recipe other than nvfp4 (custom) is not modelled: refused as bad input
        if "--fp4-format" in values:
            recipe = (values.get("--fp4-recipe") or ["nvfp4"])[0]
            u.set("precision", "nvfp4" if recipe == "nvfp4" else f"fp4-{recipe}", flag)
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
            u.set("optimizer_cpu_offload", True, flag)
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
    if flag in _LEGACY_GRAPH_FLAGS:  # resolved with --cuda-graph-impl in _megatron_semantics
        u.notes.append(_deprecated(flag, f"--cuda-graph-impl {_LEGACY_GRAPH_FLAGS[flag]}"))
        return True
    if flag in ("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl"):
        fused = "--cross-entropy-loss-fusion" in values
        impl = (values.get("--cross-entropy-fusion-impl") or ["native"])[0]
        u.set("cross_entropy_fusion", ("te" if impl == "te" else "native") if fused else "none", flag)
        return True
    if flag == "--moe-layer-recompute":
        u.notes.append(_deprecated(flag, "--recompute-granularity selective --recompute-modules moe"))
        if (values.get("--recompute-granularity") or [None])[0] == "full":
            u.notes.append(_moe_layer_with_full(flag, "--recompute-granularity full"))
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
    check_bridge_values(keys)
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
            value = one_word_list(name, value)
            if name == "cp_comm_type" and isinstance(value, list):
                if len(set(value)) == 1:
                    value = value[0]
                else:
                    u.not_checked.append(f"{key} (per-layer cp_comm_type)")
                    continue
            u.set(name, value, key)
        elif not (_special_bridge_more(u, key, keys) or _special_bridge(u, key, value, keys)):
            u.not_checked.append(key)
    _bridge_graph_switches(u, keys)
    bridge_peft(u, keys)
    u.notes += bridge_checks(keys)
    u.notes += [c.finding for c in bridge_conflicts(keys)]
    return u


_LEGACY_GRAPH_KEYS = {"model.enable_cuda_graph": "local", "model.external_cuda_graph": "transformer_engine"}


def _bridge_graph_switches(u: Understood, keys: dict[str, Any]) -> None:
    """The deprecated graph switches as Megatron Core resolves them, whatever the key order.

    MCore transformer_config.py:2365-2381 (in __post_init__, on the final values): either switch needs
    cuda_graph_impl 'none' and excludes the other, then sets the impl. Bridge validates the graph setting
    before that (training/config.py:1260 before finalize at :1262) and, seeing 'none', clears the modules
    (utils/cuda_graph.py:134-138), so the switches always capture whole layers.
    """
    legacy = [key for key in _LEGACY_GRAPH_KEYS if keys.get(key) is True]
    if not legacy:
        return
    impl = keys.get("model.cuda_graph_impl") or "none"
    if impl != "none" or len(legacy) > 1:
        u.notes.append(
            finding(
                "GRAPH_LEGACY_WITH_IMPL",
                f"{' and '.join(legacy)}"
                + (f" with model.cuda_graph_impl={impl}" if impl != "none" else " together")
                + ": Megatron Core refuses the deprecated switches next to cuda_graph_impl or each other.",
                f"Keep only model.cuda_graph_impl={impl if impl != 'none' else _LEGACY_GRAPH_KEYS[legacy[-1]]}.",
                [*legacy, "model.cuda_graph_impl"],
            )
        )
        return
    u.set("cuda_graph_impl", _LEGACY_GRAPH_KEYS[legacy[0]], legacy[0])
    scoped = [k for k in ("model.cuda_graph_modules", "model.cuda_graph_scope") if keys.get(k)]
    if scoped:
        u.notes.append(
            finding(
                "GRAPH_LEGACY_CLEARS_MODULES",
                f"{legacy[0]} with {', '.join(scoped)}: Megatron Bridge clears the modules before Megatron Core "
                "turns the switch into cuda_graph_impl, so whole layers are captured.",
                f"To capture modules, write model.cuda_graph_impl={_LEGACY_GRAPH_KEYS[legacy[0]]} with "
                "model.cuda_graph_modules instead of the deprecated switch.",
                [legacy[0], *scoped],
            )
        )
    u.set("cuda_graph_modules", [], legacy[0])


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
            u.set("optimizer_cpu_offload", True, key)
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
    if key in _LEGACY_GRAPH_KEYS:  # resolved with model.cuda_graph_impl in _bridge_graph_switches
        if value:
            u.notes.append(_deprecated(key, f"model.cuda_graph_impl={_LEGACY_GRAPH_KEYS[key]}"))
        return True
    if key in ("model.cross_entropy_loss_fusion", "model.cross_entropy_fusion_impl"):
        fused = keys.get("model.cross_entropy_loss_fusion", True)  # GPTModelProvider default: fused
        impl = keys.get("model.cross_entropy_fusion_impl", "native")
        u.set("cross_entropy_fusion", ("te" if impl == "te" else "native") if fused else "none", key)
        return True
    if key == "model.moe_layer_recompute":
        if value and keys.get("model.recompute_granularity") == "full":
            u.notes.append(_moe_layer_with_full(key, "model.recompute_granularity=full"))
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


# --------------------------------------------------------------------------- precision, loss and gradients


def _special_megatron_more(u: Understood, flag: str, values: dict[str, list[str]]) -> bool:
    """Cross-entropy fusion and the gradient-reduction dtype (flags that map to one engine field)."""
    if flag in ("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl"):
        if "--cross-entropy-loss-fusion" in values:
            impl = (values.get("--cross-entropy-fusion-impl") or ["native"])[0]
            u.set("cross_entropy_fusion", impl, flag)
        elif flag == "--cross-entropy-fusion-impl":
            u.set("cross_entropy_fusion", "none", flag)  # the impl means nothing without the fusion switch
        return True
    if flag == "--grad-reduce-in-bf16":
        u.set("grad_reduce_in_fp32", False, flag)
        return True
    return False


_RECIPE_DEFAULTS = {"mixed_precision.": "tensorwise", "model.": "delayed"}  # Bridge / Megatron Core defaults


def _special_bridge_more(u: Understood, key: str, keys: dict[str, Any]) -> bool:
    """Precision from model.fp8* / mixed_precision.fp8* keys (a preset in mixed_precision wins, as Bridge's
    setup copies it onto the model), cross-entropy fusion and the gradient-reduction dtype."""
    section, _, name = key.partition(".")
    if section in ("mixed_precision", "model") and name in ("fp8", "fp8_recipe", "fp4", "fp4_recipe"):
        if isinstance(keys.get("mixed_precision"), str):
            return True  # the preset decides; mixed_precision=<preset> is read on its own
        for prefix in ("mixed_precision.", "model."):
            if keys.get(prefix + "fp4"):  # a custom FP4 recipe is not modelled: refused as bad input
                recipe = keys.get(prefix + "fp4_recipe") or "nvfp4"
                u.set("precision", "nvfp4" if recipe == "nvfp4" else f"fp4-{recipe}", key)
                return True
            if keys.get(prefix + "fp8"):
                recipe = keys.get(prefix + "fp8_recipe") or _RECIPE_DEFAULTS[prefix]
                u.set("precision", "mxfp8" if recipe == "mxfp8" else f"fp8-{recipe}", key)
                return True
        if name in ("fp8", "fp4"):
            u.set("precision", "bf16", key)  # fp8=null / fp4=null: no quantized recipe
        return True
    if key in ("model.cross_entropy_loss_fusion", "model.cross_entropy_fusion_impl"):
        fused = keys.get("model.cross_entropy_loss_fusion", True)  # GPTModelProvider's default
        u.set("cross_entropy_fusion", (keys.get("model.cross_entropy_fusion_impl") or "native") if fused else "none",
              key)  # fmt: skip
        return True
    if key in ("ddp.grad_reduce_in_fp32", "mixed_precision.grad_reduce_in_fp32"):
        value = keys.get("mixed_precision.grad_reduce_in_fp32", keys.get("ddp.grad_reduce_in_fp32"))
        u.set("grad_reduce_in_fp32", bool(value), key)
        return True
    if section == "peft":
        return peft_key(u, key, keys)
    return False
