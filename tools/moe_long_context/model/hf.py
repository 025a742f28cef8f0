"""Convert a Hugging Face ``config.json`` into a ModelSpec.

Supported families (by ``model_type``): DeepSeek-V3 (also Kimi-K2 and Moonlight), Qwen3-MoE,
Qwen3-Next, GPT-OSS and Mixtral by the converters below, and the families of ``hf_families.yaml`` (GLM-4.5,
DeepSeek-V2, Qwen3.5, MiniMax-M2, OLMoE, ERNIE-4.5, Ling 2.0, Gemma-4, Step-3.5, MiMo-V2-Flash, Sarvam and
others) by its table-driven reader. A config whose ``model_type`` is unknown is matched by its ``architectures``,
as Bridge's AutoBridge dispatches. Other families are refused with a message that names the ways that always
work, rather than guessed at. Every field of the result records the config.json key it came from in ``sources``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import InputError, check_nesting, too_deep
from .hf_families import convert_table_family, family_table, language_config
from .hf_hybrid import REFUSED_MODEL_TYPES
from .hf_hybrid import register as register_hybrid_families
from .specs import ModelSpec

# The families converted by the functions below (the others are in hf_families.yaml): the models each covers,
# its attention kinds and the Megatron Bridge 0.6.2 file that maps it (none: Bridge has no bridge for it).
CONVERTER_TITLES = {
    "deepseek_v3": ("DeepSeek-V3, Kimi-K2, Moonlight", "MLA",
                    "megatron/bridge/models/deepseek/deepseek_v3_bridge.py, megatron/bridge/models/kimi/kimi_bridge.py"),
    "qwen3_moe": ("Qwen3 MoE (30B-A3B, 235B-A22B) and Qwen3-VL MoE's language model", "GQA",
                  "megatron/bridge/models/qwen/qwen3_moe_bridge.py, megatron/bridge/models/qwen_vl/qwen3_vl_bridge.py"),
    "qwen3_next": ("Qwen3-Next-80B-A3B", "GQA + Gated DeltaNet", "megatron/bridge/models/qwen/qwen3_next_bridge.py"),
    "gpt_oss": ("gpt-oss-20b, gpt-oss-120b", "GQA + sliding window", "megatron/bridge/models/gpt_oss/gpt_oss_bridge.py"),
    "mixtral": ("Mixtral-8x7B, Mixtral-8x22B", "GQA", "none"),
    # read by model/hf_hybrid.py
    "glm_moe_dsa": ("GLM-5, GLM-5.1, GLM-5.2", "MLA + DSA indexer", "megatron/bridge/models/glm_moe_dsa/glm5_bridge.py"),
    "deepseek_v32": ("DeepSeek-V3.2", "MLA + DSA indexer", "none (Megatron-LM launch)"),
    "nemotron_h": (
        "Nemotron 3 Nano, Super, Ultra and 3.5 Lightning (LatentMoE, repeated MTP block)",
        "Mamba-2 + GQA hybrid",
        "megatron/bridge/models/nemotronh/nemotron_h_bridge.py",
    ),
}  # fmt: skip

FAMILY_BY_MODEL_TYPE = {
    "deepseek_v3": "deepseek_v3",
    "kimi_k2": "deepseek_v3",
    "qwen3_moe": "qwen3_moe",
    "qwen3_vl_moe": "qwen3_moe",
    "qwen3_next": "qwen3_next",
    "gpt_oss": "gpt_oss",
    "mixtral": "mixtral",
}
# Vision-language model types whose language model (under text_config) a converter family reads: Bridge's
# Qwen3VLMoe bridge builds it from text_config as a Qwen3 MoE (models/qwen_vl/qwen3_vl_bridge.py:232-262);
# the vision tower is not modelled.
TEXT_CONFIG_MODEL_TYPES = {"qwen3_vl_moe"}


# config.json keys the converters compute with (multiply, divide, count layers) before ModelSpec validates
# anything, with the range a real model stays within. Checked first, so a mistyped or hostile value is
# refused by key instead of raising inside the arithmetic or allocating a per-layer tuple of its size.
_ARITHMETIC_KEYS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 10_000),
    "hidden_size": (1, 1 << 20),
    "num_attention_heads": (1, 1 << 16),
    "moe_intermediate_size": (1, 1 << 24),
    "n_shared_experts": (0, 1 << 10),
    "n_group": (0, 1 << 16),
    "full_attention_interval": (1, 10_000),
}


def _check_arithmetic_keys(cfg: Mapping[str, Any]) -> None:
    for key, (low, high) in _ARITHMETIC_KEYS.items():
        value = cfg.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
        ):
            raise InputError(f"model.{key}", value, f"an integer from {low} to {high}")
    layer_types = cfg.get("layer_types")
    if layer_types is not None and not (
        isinstance(layer_types, list) and all(isinstance(t, str) for t in layer_types)
    ):
        raise InputError("model.layer_types", layer_types, "a list of layer type names")


class _Reader:
    """Reads config.json keys and remembers which key fed which spec field."""

    def __init__(self, cfg: Mapping[str, Any], origin: str):
        self.cfg = cfg
        self.origin = origin
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def take(self, field: str, key: str, default: Any = ..., convert: Callable[[Any], Any] | None = None):
        if key in self.cfg and self.cfg[key] is not None:
            value = self.cfg[key]
            self.sources[field] = f"{self.origin}: {key}"
        elif default is ...:
            raise InputError(f"model.{key}", None, f"config.json must set {key!r} for this family")
        else:
            value = default
            self.sources[field] = f"default (config.json has no {key!r})"
        if convert is not None:
            value = convert(value)
        self.values[field] = value
        return value

    def set(self, field: str, value: Any, why: str) -> None:
        self.values[field] = value
        self.sources[field] = why


def _common(r: _Reader) -> None:
    r.take("num_layers", "num_hidden_layers")
    r.take("hidden_size", "hidden_size")
    r.take("vocab_size", "vocab_size")
    r.take("tie_embeddings", "tie_word_embeddings", False, bool)
    r.take("max_position_embeddings", "max_position_embeddings", None)
    r.take("num_attention_heads", "num_attention_heads")


def _deepseek_v3(r: _Reader) -> None:
    _common(r)
    cfg = r.cfg
    r.set("attention", "mla", f"{r.origin}: kv_lora_rank (multi-latent attention)")
    r.take("num_query_groups", "num_key_value_heads", cfg.get("num_attention_heads"))
    r.take("head_dim", "qk_nope_head_dim")
    r.take("q_lora_rank", "q_lora_rank", None)
    r.take("kv_lora_rank", "kv_lora_rank")
    r.take("qk_pos_emb_head_dim", "qk_rope_head_dim")
    r.take("v_head_dim", "v_head_dim")
    r.set("attention_layer_types", ("full",) * cfg["num_hidden_layers"], "all layers use MLA")
    r.take("ffn_hidden_size", "intermediate_size")
    freq = cfg.get("moe_layer_freq", 1)
    if freq != 1:
        raise InputError("model.moe_layer_freq", freq, "1 (every layer after first_k_dense_replace is MoE)")
    r.take("num_dense_layers", "first_k_dense_replace", 0)
    r.take("num_experts", "n_routed_experts")
    r.take("moe_router_topk", "num_experts_per_tok")
    moe_ffn = r.take("moe_ffn_hidden_size", "moe_intermediate_size")
    shared = cfg.get("n_shared_experts") or 0
    if shared:
        r.set(
            "moe_shared_expert_intermediate_size",
            shared * moe_ffn,
            f"{r.origin}: n_shared_experts x moe_intermediate_size",
        )
    r.take("moe_router_score_function", "scoring_func", "softmax")
    if cfg.get("n_group") and cfg.get("n_group", 1) > 1:
        r.take("moe_router_num_groups", "n_group")
        r.take("moe_router_group_topk", "topk_group")
    r.take("mtp_num_layers", "num_nextn_predict_layers", 0)


def _gqa_trunk(r: _Reader) -> dict[str, Any]:
    """The trunk and grouped-query attention every GQA converter reads the same way; returns the config."""
    _common(r)
    cfg = r.cfg
    r.set("attention", "gqa", f"{r.origin}: num_key_value_heads (grouped-query attention)")
    r.take("num_query_groups", "num_key_value_heads")
    r.take("head_dim", "head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    return cfg


def _qwen3_moe(r: _Reader) -> None:
    _qwen3_attention(r)
    cfg = r.cfg
    r.set("attention_layer_types", ("full",) * cfg["num_hidden_layers"], "all layers use full attention")
    r.take("ffn_hidden_size", "intermediate_size")
    step = cfg.get("decoder_sparse_step", 1)
    dense_only = list(cfg.get("mlp_only_layers") or [])
    if step != 1 or dense_only != list(range(len(dense_only))):
        raise InputError(
            "model.mlp_only_layers",
            dense_only or step,
            "MoE layers after leading dense ones (decoder_sparse_step 1, mlp_only_layers [0, 1, ..., k-1])",
        )
    r.set(
        "num_dense_layers",
        len(dense_only),
        f"{r.origin}: decoder_sparse_step 1 and mlp_only_layers {dense_only}",
    )
    r.take("num_experts", "num_experts")
    r.take("moe_router_topk", "num_experts_per_tok")
    r.take("moe_ffn_hidden_size", "moe_intermediate_size")


def _qwen3_next(r: _Reader) -> None:
    _qwen3_attention(r)
    cfg = r.cfg
    interval = r.cfg.get("full_attention_interval", 4)
    types = tuple("full" if (i + 1) % interval == 0 else "linear" for i in range(cfg["num_hidden_layers"]))
    r.set("attention_layer_types", types, f"{r.origin}: full_attention_interval={interval}")
    r.take("linear_num_key_heads", "linear_num_key_heads")
    r.take("linear_num_value_heads", "linear_num_value_heads")
    r.take("linear_key_head_dim", "linear_key_head_dim")
    r.take("linear_value_head_dim", "linear_value_head_dim")
    r.take("linear_conv_kernel_dim", "linear_conv_kernel_dim")
    r.set("attention_output_gate", True, "Qwen3-Next gates the attention output")
    r.take("ffn_hidden_size", "intermediate_size")
    r.set("num_dense_layers", 0, f"{r.origin}: decoder_sparse_step 1 and mlp_only_layers []")
    r.take("num_experts", "num_experts")
    r.take("moe_router_topk", "num_experts_per_tok")
    r.take("moe_ffn_hidden_size", "moe_intermediate_size")
    r.take("moe_shared_expert_intermediate_size", "shared_expert_intermediate_size", None)
    if r.values.get("moe_shared_expert_intermediate_size"):
        r.set("moe_shared_expert_gate", True, "Qwen3-Next gates the shared expert")
    r.take("mtp_num_layers", "num_nextn_predict_layers", 0)


def _qwen3_attention(r: _Reader) -> None:
    _gqa_trunk(r)
    r.set("qk_layernorm", True, "Qwen3 applies RMSNorm to Q and K")


def _gpt_oss(r: _Reader) -> None:
    cfg = _gqa_trunk(r)
    layer_types = cfg.get("layer_types")
    if layer_types:
        types = tuple("sliding" if t == "sliding_attention" else "full" for t in layer_types)
        r.set("attention_layer_types", types, f"{r.origin}: layer_types")
    else:
        types = tuple("sliding" if i % 2 == 0 else "full" for i in range(cfg["num_hidden_layers"]))
        r.set("attention_layer_types", types, "gpt-oss alternates sliding and full attention")
    r.take("sliding_window", "sliding_window", None)
    r.set("softmax_sinks", True, "gpt-oss uses learned attention sinks")
    r.take("add_bias_linear", "attention_bias", True, bool)
    r.take("ffn_hidden_size", "intermediate_size")
    r.set("num_dense_layers", 0, "every gpt-oss layer is MoE")
    key = "num_local_experts" if "num_local_experts" in cfg else "num_experts"
    r.take("num_experts", key)
    key = "num_experts_per_tok" if "num_experts_per_tok" in cfg else "experts_per_token"
    r.take("moe_router_topk", key)
    r.take("moe_ffn_hidden_size", "intermediate_size")


def _mixtral(r: _Reader) -> None:
    cfg = _gqa_trunk(r)
    window = cfg.get("sliding_window")
    types = ("sliding" if window else "full",) * cfg["num_hidden_layers"]
    r.set("attention_layer_types", types, f"{r.origin}: sliding_window={window}")
    r.take("sliding_window", "sliding_window", None)
    r.take("ffn_hidden_size", "intermediate_size")
    r.set("num_dense_layers", 0, "every Mixtral layer is MoE")
    r.take("num_experts", "num_local_experts")
    r.take("moe_router_topk", "num_experts_per_tok")
    r.take("moe_ffn_hidden_size", "intermediate_size")


CONVERTERS: dict[str, Callable[[_Reader], None]] = {
    "deepseek_v3": _deepseek_v3,
    "qwen3_moe": _qwen3_moe,
    "qwen3_next": _qwen3_next,
    "gpt_oss": _gpt_oss,
    "mixtral": _mixtral,
}


def supported_model_types() -> list[str]:
    """Every config.json ``model_type`` the loader converts."""
    return sorted({*FAMILY_BY_MODEL_TYPE, *family_table()})


# config.json ``architectures`` of the converter families, as Bridge registers its bridges (register_bridge
# source=...); the table families list theirs in hf_families.yaml.
CONVERTER_ARCHITECTURES = {
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen3VLMoeForConditionalGeneration": "qwen3_moe",
    "Qwen3NextForCausalLM": "qwen3_next",
    "GptOssForCausalLM": "gpt_oss",
    "MixtralForCausalLM": "mixtral",
}


@cache
def _architecture_families() -> dict[str, str]:
    known = dict(CONVERTER_ARCHITECTURES)
    for family, entry in family_table().items():
        known.update(dict.fromkeys(entry.get("architectures", ()), family))
    return known


def _family_by_architecture(cfg: Mapping[str, Any]) -> str | None:
    """The family Bridge's AutoBridge would pick from ``architectures`` (it dispatches on the class name), for a
    config whose model_type the loader does not know, e.g. Ling-flash-2.0's ``bailing_moe``."""
    names = cfg.get("architectures")
    if not isinstance(names, list):
        return None
    known = _architecture_families()
    return next((known[n] for n in names if isinstance(n, str) and n in known), None)


def _family_of(model_type: str) -> str | None:
    if model_type in FAMILY_BY_MODEL_TYPE:
        return FAMILY_BY_MODEL_TYPE[model_type]
    base = model_type.removesuffix("_text")  # a VLM's language model, e.g. qwen3_5_moe_text
    return base if base in family_table() else None


def refuse_model_type(model_type: Any) -> InputError:
    """The error for a config.json family the loader does not convert: why, when a family is known to be one
    Megatron Core 0.19.2 cannot build (model/hf_hybrid.py), then the supported ones and the ways that always
    work."""
    why = REFUSED_MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
    return InputError(
        "model.model_type",
        model_type,
        "one of the supported families (" + ", ".join(supported_model_types()) + ")",
        (f"{why}; " if why else "")
        + "give the architecture another way: as Megatron-LM flags in a launch script (lint_config reads "
        "--num-layers, --hidden-size, --num-experts ...) or as a YAML file of ModelSpec fields passed as the "
        "model argument (e.g. model: my-model.yaml with family, num_layers, hidden_size, vocab_size, "
        "tie_embeddings, attention, num_attention_heads, num_query_groups, head_dim, ffn_hidden_size, "
        "num_experts, moe_router_topk, moe_ffn_hidden_size)",
    )


register_hybrid_families(FAMILY_BY_MODEL_TYPE, CONVERTERS)  # sparse-attention and Mamba-hybrid families


def read_config_json(source: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """Load a config.json from a path (a file, or a folder holding one) or take it as given; return it and a
    label for sources. Refuses, naming the path: a folder without config.json, a file that is not UTF-8 JSON
    text, JSON that is not an object or nests deeper than a config does."""
    if isinstance(source, Mapping):
        check_nesting(source, "model")
        return dict(source), "config.json"
    path = Path(source)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(
                "model", str(source), "a config.json path; this is a directory without a config.json"
            )
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(
            "model", str(source), f"a catalog id, a config.json path or a config object ({exc.strerror})"
        ) from None
    except UnicodeDecodeError:
        raise InputError(
            "model", str(source), "a config.json: JSON text; this file is not UTF-8 text"
        ) from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise too_deep("model", str(source)) from None
    except json.JSONDecodeError as exc:
        yaml_hint = "" if path.suffix == ".json" else "; a YAML ModelSpec file needs a .yaml or .yml name"
        raise InputError(
            "model", str(source), f"valid JSON ({exc.msg} at line {exc.lineno}){yaml_hint}"
        ) from None
    if not isinstance(data, dict):
        raise InputError("model", str(source), "a JSON object")
    check_nesting(data, "model", str(source))
    return data, f"{path.name}"


def spec_from_hf_config(
    source: str | Path | Mapping[str, Any],
    *,
    model_id: str = "custom",
    name: str | None = None,
    hf_repo: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json (path, directory or parsed object)."""
    cfg, origin = read_config_json(source)
    model_type = cfg.get("model_type")
    family = _family_of(model_type) if isinstance(model_type, str) else None
    by_architecture = model_type is None or (
        isinstance(model_type, str) and model_type not in REFUSED_MODEL_TYPES
    )
    family = family or (_family_by_architecture(cfg) if by_architecture else None)
    if family is None:
        raise refuse_model_type(model_type)
    if hf_repo:
        origin = f"https://huggingface.co/{hf_repo}/blob/main/config.json"
    vlm = family_table().get(family, {}).get("text_config") or model_type in TEXT_CONFIG_MODEL_TYPES
    if vlm and isinstance(cfg.get("text_config"), Mapping):
        cfg = dict(language_config(cfg))
        origin = f"{origin} text_config"
    _check_arithmetic_keys(cfg)
    reader = _Reader(cfg, origin)
    try:
        if family in CONVERTERS:
            CONVERTERS[family](reader)
        else:
            convert_table_family(reader, family)
    except KeyError as exc:
        raise InputError(f"model.{exc.args[0]}", None, "a value (the config.json lacks this key)") from exc
    values = dict(reader.values)
    sources = dict(reader.sources)
    for key, value in (extra or {}).items():
        if key == "sources":
            sources.update(value)
        else:
            values[key] = value
    try:
        return ModelSpec(
            id=model_id,
            name=name or hf_repo or cfg.get("_name_or_path") or f"custom {model_type} model",
            family=family,
            hf_repo=hf_repo,
            sources=sources,
            **values,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        if not field:  # a check across fields: its message names them
            raise InputError.plain(f"model: {err['msg'].removeprefix('Value error, ')}", "model") from exc
        raise InputError(f"model.{field}", err.get("input"), err["msg"]) from exc
