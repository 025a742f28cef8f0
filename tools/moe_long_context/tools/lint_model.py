"""Which model a launch describes, for lint_config: the one named, a Hugging Face config.json, or the architecture
the launch itself writes (the Megatron-LM flags or Bridge keys checked against a named model when both are given).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..dialects.launch import Understood, _scalar
from ..dialects.moe_layer_freq import moe_layer_freq_length
from ..dialects.overrides import flag_groups, function_flags
from ..engine.findings import Finding
from ..engine.rules import finding
from ..errors import InputError
from ..model.catalog import load_model, models
from ..model.hf import spec_from_hf_config
from ..model.params import model_params
from ..model.specs import ModelSpec

_ARCH_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_experts", "num_experts_per_tok",
              "moe_intermediate_size")  # fmt: skip


def _spec_value(spec: ModelSpec, key: str) -> Any:
    return {
        "num_hidden_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "num_attention_heads": spec.num_attention_heads,
        "num_experts": spec.num_experts,
        "num_experts_per_tok": spec.moe_router_topk,
        "moe_intermediate_size": spec.moe_ffn_hidden_size,
    }[key]


def resolve_model(u: Understood, given: str | dict | None) -> tuple[ModelSpec, list[Finding]]:
    spec, notes = _resolve(u, given)
    return spec, notes + _function_flags_missing(u, spec) + _moe_layer_freq_length(u, spec)


def _same_pattern(arch: dict[str, Any], spec: ModelSpec) -> bool:
    """A hybrid launch's --hybrid-layer-pattern is this model's, MTP block included ('main/mtp/mtp')."""
    written = arch.get("--hybrid-layer-pattern")
    if written is None or not spec.is_hybrid:
        return True
    main, *mtp = str(written).split("/")
    return main == spec.hybrid_layer_pattern and all(b == spec.mtp_block_pattern for b in mtp)


def _moe_layer_freq_length(u: Understood, spec: ModelSpec) -> list[Finding]:
    """MOE_LAYER_FREQ_LENGTH: a per-layer --moe-layer-freq list needs one entry per decoder layer (MCore
    models/gpt/gpt_layer_specs.py:653 asserts it)."""
    text = u.architecture.get("--moe-layer-freq")
    length = moe_layer_freq_length(str(text)) if text is not None else None
    layers = u.architecture.get("num_hidden_layers") or spec.num_layers
    if length is None or length == layers:
        return []
    return [finding("MOE_LAYER_FREQ_LENGTH",
                    f"--moe-layer-freq {text} has {length} entries for {layers} decoder layers: Megatron Core asserts "
                    "one per layer.", f"Give {layers} entries (0 dense, 1 MoE), e.g. "
                    f"'([0]*{spec.num_dense_layers}+[1]*{layers - spec.num_dense_layers})'.", ["--moe-layer-freq"])]  # fmt: skip


def _function_flags_missing(u: Understood, spec: ModelSpec) -> list[Finding]:
    """MODEL_FLAGS_DEFAULTED: a Megatron-LM launch that writes the model's shapes (--num-layers) but not the flags
    of its functions trains what Megatron-LM's defaults build (LayerNorm, GeLU, biases, the softmax router)."""
    arch = u.architecture
    if u.dialect != "megatron-lm" or "num_hidden_layers" not in arch or spec.id == "custom":
        return []
    missing: list[str] = []
    for flag, values in flag_groups(function_flags(spec)):
        given = arch.get(flag)
        if given is None or (values and _scalar(str(given)) != _scalar(values[0])):
            missing += [flag, *values]
    if not missing:
        return []
    return [finding("MODEL_FLAGS_DEFAULTED",
                    f"The launch writes {spec.name}'s shapes but not {' '.join(missing)}: Megatron-LM's defaults "
                    "(LayerNorm, GeLU MLPs, biases, the softmax router, vanilla softmax) then build another model. "
                    "The rules and the memory model judge the catalog model.",
                    f"Add {' '.join(missing)}.", [t for t in missing if t.startswith("--")])]  # fmt: skip


def _resolve(u: Understood, given: str | dict | None) -> tuple[ModelSpec, list[Finding]]:
    arch = u.architecture
    notes: list[Finding] = []
    if isinstance(given, ModelSpec):  # the model the other dialect's reading already resolved
        return given, notes
    if given is not None:
        spec = load_model(given)
        diff = [f"{k}={arch[k]} (model: {_spec_value(spec, k)})" for k in _ARCH_KEYS if k in arch
                and arch[k] != _spec_value(spec, k)]  # fmt: skip
        if diff:
            notes.append(finding("MODEL_FLAGS_MISMATCH", f"The launch declares {', '.join(diff)}, unlike {spec.name}.",
                                 "Check the launch is for this model, or drop model= to check the flags' model.",
                                 ["model"]))  # fmt: skip
        return spec, notes
    present = [k for k in _ARCH_KEYS if k in arch]
    if not present:
        raise InputError(
            "model",
            None,
            "a catalog id (model=...) or the architecture flags (--num-layers, --hidden-size, --num-attention-heads, "
            "--num-experts, --moe-router-topk, ...) in the launch",
        )
    matches = [s for s in models() if all(arch[k] == _spec_value(s, k) for k in present)]
    dsa = arch.get("--experimental-attention-variant") == "dsa"
    hybrid = "--hybrid-layer-pattern" in arch
    matches = [s for s in matches if s.has_dsa == dsa and s.is_hybrid == hybrid]
    if (
        len(matches) > 1
    ):  # twins in shape (Moonlight and DeepSeek-V2-Lite, Nano and Lightning): what else agrees
        closer = [s for s in matches if _same_pattern(arch, s) and not _function_flags_missing(u, s)
                  and arch.get("--moe-router-score-function", "softmax") == s.moe_router_score_function]  # fmt: skip
        matches = closer or matches
    same = (
        len({model_params(s).total for s in matches}) == 1
    )  # e.g. GLM-4.5 and GLM-4.7 share one architecture
    if matches and same and len(present) >= 3:
        spec = matches[0]
        also = "".join(f"; {s.name} has the same architecture" for s in matches[1:])
        notes.append(finding("MODEL_RECOGNISED", f"The architecture flags match {spec.name} ({spec.id}){also}.",
                             None, ["model"]))  # fmt: skip
        return spec, notes
    return _custom_spec(arch), notes


def _custom_spec(arch: dict[str, Any]) -> ModelSpec:
    """A ModelSpec from Megatron-LM architecture flags (no catalog match)."""
    cfg = {k: v for k, v in arch.items() if not k.startswith("--")}
    heads = cfg.get("num_attention_heads")
    if "--multi-latent-attention" in arch:
        cfg["model_type"] = "deepseek_v3"
        cfg["n_routed_experts"] = cfg.pop("num_experts", None)
        shared = cfg.pop("shared_expert_intermediate_size", None)
        if shared and cfg.get("moe_intermediate_size"):
            cfg["n_shared_experts"] = shared // cfg["moe_intermediate_size"]
        cfg.setdefault("num_key_value_heads", heads)
        cfg.setdefault("qk_nope_head_dim", 128)
        cfg.setdefault("qk_rope_head_dim", 64)
        cfg.setdefault("v_head_dim", 128)
        cfg.setdefault("kv_lora_rank", 32)
    else:
        return _gqa_spec(cfg, arch)
    cfg.setdefault("tie_word_embeddings", "--untie-embeddings-and-output-weights" not in arch)
    cfg.setdefault("vocab_size", 128256)
    dense = cfg.pop("first_k_dense_replace", 0)
    if cfg["model_type"] == "deepseek_v3":
        cfg["first_k_dense_replace"] = dense
    elif dense:  # leading dense layers, as Megatron builds them from --moe-layer-freq for any attention
        cfg["mlp_only_layers"] = list(range(dense))
    missing = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "moe_intermediate_size")
               if not cfg.get(k)]  # fmt: skip
    if missing:
        raise InputError("model", None, f"model= or the flags for {missing} (the launch does not set them)")
    cfg.setdefault("intermediate_size", cfg["moe_intermediate_size"])
    return spec_from_hf_config(cfg, name="custom model from launch flags")


def _gqa_spec(cfg: dict[str, Any], arch: dict[str, Any]) -> ModelSpec:
    """A GQA/MHA ModelSpec written from the flags (leading dense layers, shared expert, QK norm, QKV bias)."""
    missing = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "moe_intermediate_size",
                           "num_experts", "num_experts_per_tok") if not cfg.get(k)]  # fmt: skip
    if missing:
        raise InputError("model", None, f"model= or the flags for {missing} (the launch does not set them)")
    heads, layers = cfg["num_attention_heads"], cfg["num_hidden_layers"]
    if not isinstance(layers, int) or not 0 < layers <= 10_000:
        raise InputError("--num-layers", layers, "an integer from 1 to 10000")
    groups = cfg.get("num_key_value_heads", heads) if "--group-query-attention" in arch else heads
    values = {
        "num_layers": layers,
        "hidden_size": cfg["hidden_size"],
        "vocab_size": cfg.get("vocab_size", 128256),
        "tie_embeddings": "--untie-embeddings-and-output-weights" not in arch,
        "attention": "gqa",
        "num_attention_heads": heads,
        "num_query_groups": groups,
        "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads,
        "qk_layernorm": "--qk-layernorm" in arch,
        "add_qkv_bias": "--add-qkv-bias" in arch,
        "attention_layer_types": ("full",) * layers,
        "ffn_hidden_size": cfg.get("intermediate_size") or cfg["moe_intermediate_size"],
        "num_dense_layers": cfg.get("first_k_dense_replace", 0),
        "num_experts": cfg["num_experts"],
        "moe_router_topk": cfg["num_experts_per_tok"],
        "moe_ffn_hidden_size": cfg["moe_intermediate_size"],
        "moe_shared_expert_intermediate_size": cfg.get("shared_expert_intermediate_size"),
        "moe_shared_expert_gate": "--moe-shared-expert-gate" in arch,
        "mtp_num_layers": cfg.get("num_nextn_predict_layers") or 0,
    }
    sources = {field: "launch flags" for field in values}
    try:
        return ModelSpec(id="custom", name="custom model from launch flags", family="custom", sources=sources,
                         **values)  # fmt: skip
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(
            f"model.{'.'.join(str(p) for p in err['loc'])}", err.get("input"), err["msg"]
        ) from exc
