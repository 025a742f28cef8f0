"""config.json converters for the sparse-attention and Mamba-hybrid families (issue 16), and the families the
engine refuses with the reason Megatron Core 0.19.2 cannot build them.

* ``glm_moe_dsa`` (GLM-5 / 5.1 / 5.2): MLA with a DSA lightning indexer on every layer, first k layers dense,
  as Megatron Bridge 0.6.2 ``models/glm_moe_dsa/glm5_bridge.py`` builds it.
* ``deepseek_v32`` (DeepSeek-V3.2): DeepSeek-V3's MLA/MoE trunk with a DSA indexer on every layer, as Megatron
  Core 0.19.2 ``transformer/experimental_attention_variant/dsa.py`` builds it. Bridge 0.6.2 ships no
  deepseek_v32 bridge (``models/deepseek`` has v2, v3 and v4 only).
* ``nemotron_h`` (Nemotron-3): a Megatron hybrid stack whose ``hybrid_override_pattern`` gives one symbol per
  layer (M Mamba-2, * attention, - MLP, E MoE), as ``models/nemotronh/nemotron_h_bridge.py`` maps it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import InputError

# hf.py's config reader (``take`` / ``set`` a field and record its source); typed loosely so that this module does
# not import hf.py, which registers it.
_Reader = Any
Converter = Callable[[Any], None]

# model_type -> why the engine refuses it (every reason is what Megatron Core 0.19.2 / Bridge 0.6.2 do).
REFUSED_MODEL_TYPES = {
    "deepseek_v4": (
        "DeepSeek-V4 cannot run on Megatron Core 0.19.2: Megatron Bridge 0.6.2's DeepSeekV4Bridge sets "
        "experimental_attention_variant='dsv4_hybrid' (models/deepseek/deepseek_v4_bridge.py:397), and Megatron "
        "Core 0.19.2 accepts only 'gated_delta_net' and 'dsa' (transformer/transformer_config.py:294-295); its "
        "compressed attention and hyper-connections need a newer Megatron Core"
    ),
    "kimi_linear": (
        "Kimi-Linear (KDA linear attention) is in neither Megatron Core 0.19.2 (experimental_attention_variant is "
        "'gated_delta_net' or 'dsa', transformer/transformer_config.py:294) nor Megatron Bridge 0.6.2 (models/kimi "
        "holds the Kimi-K2 bridge only)"
    ),
    "granitemoehybrid": (
        "Granite-MoE-Hybrid has no bridge in Megatron Bridge 0.6.2 (no models/granite*), so Bridge cannot load "
        "its checkpoint"
    ),
}

# Symbols of Megatron's hybrid pattern (models/hybrid/hybrid_layer_allocation.py:14-26) that nemotron_h uses,
# and the layer type the engine gives each.
NEMOTRON_H_SYMBOLS = {"M": "mamba", "*": "full", "-": "none", "E": "none"}
_BLOCK_TYPE_SYMBOLS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
MAX_PATTERN = 10_000


def _dsa_indexer(r: _Reader) -> None:
    r.set(
        "attention_layer_types",
        ("dsa",) * r.cfg["num_hidden_layers"],
        f"{r.origin}: index_topk (DSA on every layer)",
    )
    r.take("dsa_index_n_heads", "index_n_heads")
    r.take("dsa_index_head_dim", "index_head_dim")
    r.take("dsa_index_topk", "index_topk")
    r.take("dsa_index_topk_freq", "index_topk_freq", 1)
    r.take("dsa_index_skip_topk_offset", "index_skip_topk_offset", 0)


def _glm_moe_dsa(r: _Reader, trunk: Converter) -> None:
    trunk(r)
    _dsa_indexer(r)
    why = "Bridge models/glm_moe_dsa/glm5_bridge.py:102 sets moe_router_score_function='sigmoid'"
    r.set("moe_router_score_function", "sigmoid", why)
    r.set("tie_embeddings", False, "Bridge glm5_bridge.py:86 share_embeddings_and_output_weights=False")


def _deepseek_v32(r: _Reader, trunk: Converter) -> None:
    trunk(r)
    _dsa_indexer(r)


def _pattern(r: _Reader) -> str:
    """The main stack's pattern, from hybrid_override_pattern or layers_block_type (transformers 5)."""
    raw = _symbols(r, "hybrid_override_pattern", "layers_block_type")
    if raw is None:
        raise InputError(
            "model.hybrid_override_pattern", None, "a pattern of M, *, - and E, one symbol per layer"
        )
    key = (
        "hybrid_override_pattern" if r.cfg.get("hybrid_override_pattern") is not None else "layers_block_type"
    )
    r.sources["hybrid_layer_pattern"] = f"{r.origin}: {key}"
    return raw


def _symbols(r: _Reader, text_key: str, list_key: str) -> str | None:
    """A hybrid pattern written as a string (``text_key``) or as a list of block names (``list_key``, the
    transformers 5 form), checked to use only M, *, - and E; None when neither key is set."""
    cfg = r.cfg
    raw = cfg.get(text_key)
    if raw is None and cfg.get(list_key) is not None:
        blocks = cfg[list_key]
        if not isinstance(blocks, list) or not all(isinstance(b, str) for b in blocks):
            raise InputError(f"model.{list_key}", blocks, "a list of mamba, attention, mlp or moe per layer")
        unknown = [b for b in blocks if b not in _BLOCK_TYPE_SYMBOLS]
        if unknown:
            raise InputError(f"model.{list_key}", unknown[0], "mamba, attention, mlp or moe per layer")
        return "".join(_BLOCK_TYPE_SYMBOLS[b] for b in blocks)
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw or len(raw) > MAX_PATTERN:
        raise InputError(f"model.{text_key}", raw, "a pattern of M, *, - and E, one symbol per layer")
    bad = sorted(set(raw) - set(NEMOTRON_H_SYMBOLS))
    if bad:
        raise InputError(f"model.{text_key}", raw, f"only M, *, - and E (found {''.join(bad)!r})")
    return raw


MAX_MTP_BLOCK = 64


def _mtp_block(r: _Reader, pattern: str) -> None:
    """Nemotron-H MTP as Bridge reads it (nemotron_h_bridge.py:252-308): num_nextn_predict_layers blocks of the
    mtp_hybrid_override_pattern (or mtp_layers_block_type) layers, one repeated block unless the config says
    mtp_use_repeated_layer false."""
    cfg = r.cfg
    depth = cfg.get("num_nextn_predict_layers") or 0
    if not isinstance(depth, int) or isinstance(depth, bool) or not 0 <= depth <= 16:
        raise InputError("model.num_nextn_predict_layers", depth, "a whole number from 0 to 16")
    r.set("mtp_num_layers", depth, f"{r.origin}: num_nextn_predict_layers")
    if not depth:
        return
    block = _symbols(r, "mtp_hybrid_override_pattern", "mtp_layers_block_type")
    if not block:
        raise InputError(
            "model.mtp_hybrid_override_pattern",
            cfg.get("mtp_hybrid_override_pattern"),
            "the MTP block's pattern (e.g. '*E'): Bridge raises without it when num_nextn_predict_layers > 0 "
            "(nemotron_h_bridge.py:260-262)",
        )
    if len(block) > MAX_MTP_BLOCK:
        raise InputError("model.mtp_hybrid_override_pattern", block, f"at most {MAX_MTP_BLOCK} symbols")
    missing = sorted(set(block) - set(pattern))
    if missing:
        raise InputError(
            "model.mtp_hybrid_override_pattern",
            block,
            "symbols the main pattern also has (the engine counts each MTP layer like the decoder's first layer "
            f"of its kind; {''.join(missing)!r} has none)",
        )
    key = (
        "mtp_layers_block_type"
        if cfg.get("mtp_hybrid_override_pattern") is None
        else "mtp_hybrid_override_pattern"
    )
    r.set("mtp_block_pattern", block, f"{r.origin}: {key}")
    repeated = cfg.get("mtp_use_repeated_layer", True)
    if not isinstance(repeated, bool):
        raise InputError("model.mtp_use_repeated_layer", repeated, "true or false")
    why = "mtp_use_repeated_layer" if "mtp_use_repeated_layer" in cfg else "unset: Bridge's default True"
    r.set("mtp_use_repeated_layer", repeated, f"{r.origin}: {why} (nemotron_h_bridge.py:305)")


def _nemotron_h(r: _Reader) -> None:
    cfg = r.cfg
    pattern = _pattern(r)
    layers = cfg.get("num_hidden_layers", len(pattern))
    if layers != len(pattern):
        raise InputError(
            "model.num_hidden_layers", layers, f"the pattern length ({len(pattern)} symbols, one per layer)"
        )
    _mtp_block(r, pattern)
    if cfg.get("moe_latent_size") is not None:  # nemotron_h_bridge.py:298-299 hasattr(moe_latent_size)
        r.take("moe_latent_size", "moe_latent_size", None, int)
    r.values["hybrid_layer_pattern"] = pattern
    if cfg.get("num_hidden_layers") is None:  # transformers 5 configs (Ultra) give the layer list alone
        r.set("num_layers", len(pattern), r.sources["hybrid_layer_pattern"])
    else:
        r.take("num_layers", "num_hidden_layers")
    r.take("hidden_size", "hidden_size")
    r.take("vocab_size", "vocab_size")
    r.take("tie_embeddings", "tie_word_embeddings", False, bool)
    r.take("max_position_embeddings", "max_position_embeddings", None)
    types = tuple(NEMOTRON_H_SYMBOLS[s] for s in pattern)
    r.set("attention_layer_types", types, f"{r.origin}: hybrid_override_pattern (M mamba, * attention)")
    r.set("attention", "gqa", f"{r.origin}: num_key_value_heads (grouped-query attention)")
    r.take("num_attention_heads", "num_attention_heads")
    r.take("num_query_groups", "num_key_value_heads")
    r.take("head_dim", "head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    r.take("add_bias_linear", "use_bias", False, bool)
    r.take("mamba_num_heads", "mamba_num_heads")
    r.take("mamba_head_dim", "mamba_head_dim")
    r.take("mamba_state_dim", "ssm_state_size")
    r.take("mamba_num_groups", "n_groups")
    r.take("mamba_chunk_size", "chunk_size", 128)
    r.set(
        "mamba_conv_kernel",
        4,
        "Megatron Core ssm/mamba_mixer.py default d_conv=4 (nemotron_h_bridge.py:233-246 does not map conv_kernel)",
    )
    r.set("gated_linear_unit", False, "nemotron_h_bridge.py:275 activation_func=squared_relu (not gated)")
    r.set("mlp_squared_relu", True, "nemotron_h_bridge.py:275 activation_func=squared_relu")
    r.take("ffn_hidden_size", "intermediate_size")
    r.set("num_dense_layers", 0, "hybrid: MLP and MoE layers come from the pattern")
    r.take("num_experts", "n_routed_experts")
    r.take("moe_router_topk", "num_experts_per_tok")
    r.take("moe_ffn_hidden_size", "moe_intermediate_size")
    r.take("moe_shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", None)
    r.set(
        "moe_router_score_function", "sigmoid", "nemotron_h_bridge.py:289 moe_router_score_function='sigmoid'"
    )
    if cfg.get("n_group") and cfg["n_group"] > 1:
        r.take("moe_router_num_groups", "n_group")
        r.take("moe_router_group_topk", "topk_group")


def register(families: dict[str, str], converters: dict[str, Converter]) -> None:
    """Add this module's families to hf.py's tables (called once from hf.py); the DSA families read the
    DeepSeek-V3 trunk with hf.py's own deepseek_v3 converter."""
    trunk = converters["deepseek_v3"]
    families.update(
        {"glm_moe_dsa": "glm_moe_dsa", "deepseek_v32": "deepseek_v32", "nemotron_h": "nemotron_h"}
    )
    converters.update(
        {
            "glm_moe_dsa": lambda r: _glm_moe_dsa(r, trunk),
            "deepseek_v32": lambda r: _deepseek_v32(r, trunk),
            "nemotron_h": _nemotron_h,
        }
    )


def refuse(model_type: str | None) -> None:
    """Raise the precise reason for a family Megatron Core 0.19.2 cannot build."""
    if model_type in REFUSED_MODEL_TYPES:
        raise InputError(
            "model.model_type",
            model_type,
            "a family Megatron Core 0.19.2 builds",
            REFUSED_MODEL_TYPES[model_type],
        )


# Catalog names of the refused families (DeepSeek-V4 Flash / Pro, Kimi-Linear), by their model_type.
_REFUSED_NAMES = {"deepseek-v4": "deepseek_v4", "dsv4": "deepseek_v4", "kimi-linear": "kimi_linear"}


def refuse_name(name: str) -> None:
    """Refuse a catalog name of a family Megatron Core 0.19.2 cannot build, with the reason."""
    key = name.strip().lower().replace("_", "-").removeprefix("deepseek-ai/").removeprefix("moonshotai/")
    for prefix, model_type in _REFUSED_NAMES.items():
        if key.startswith(prefix):
            raise InputError(
                "model", name, "a model Megatron Core 0.19.2 builds", REFUSED_MODEL_TYPES[model_type]
            )
