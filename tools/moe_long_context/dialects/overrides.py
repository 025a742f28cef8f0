"""A configuration written out in full in either dialect: Megatron-LM flags or Megatron Bridge overrides.

Only settings that differ from what the dialect does by itself are written: Megatron-LM's argparse
defaults for flags, Bridge's MoE recipe defaults (the engine's TrainingConfig defaults) for overrides.
"""

from __future__ import annotations

from typing import Any

from ..engine.config import TrainingConfig
from ..model.specs import ModelSpec
from .tables import bridge_items, dialect_table, megatron_tokens, render_bridge

# Engine fields that describe the job rather than a Megatron setting, or that have no flag.
_NOT_SETTINGS = {"launcher", "model", "gpu", "num_gpus", "mtp_num_layers"}


def _written(name: str, cfg: TrainingConfig) -> bool:
    """Whether a field belongs in a written-out configuration: a Megatron setting that means something here."""
    if name not in TrainingConfig.model_fields or name in _NOT_SETTINGS:
        return False
    conditions = dialect_table()["fields"][name].get("applies_when", {})
    return all(getattr(cfg, other) in values for other, values in conditions.items())


def megatron_defaults() -> dict[str, Any]:
    """What Megatron-LM uses for each engine field when its flag is absent."""
    out = {}
    for name, spec in dialect_table()["fields"].items():
        m = spec.get("megatron", {})
        if "absent" in m and name in TrainingConfig.model_fields:
            out[name] = m["absent"]
    return out


def architecture_flags(
    model: ModelSpec, mtp_layers: int | None = None, seq_len: int | None = None
) -> list[str]:
    """Megatron-LM model-architecture flags for a ModelSpec (the ones the engine reads back), with the position
    table at least the sequence length (arguments.py:1313-1316 requires it; with RoPE it only bounds positions)."""
    m = model
    positions = max(m.max_position_embeddings or 0, seq_len or 0) or 4096
    out = [
        "--num-layers", str(m.num_layers),
        "--hidden-size", str(m.hidden_size),
        "--ffn-hidden-size", str(m.ffn_hidden_size),
        "--num-attention-heads", str(m.num_attention_heads),
        "--position-embedding-type", m.position_embedding_type,
        "--max-position-embeddings", str(positions),
    ]  # fmt: skip
    if m.is_mla:
        out += ["--multi-latent-attention", "--kv-lora-rank", str(m.kv_lora_rank)]
        if (
            m.hidden_size % m.num_attention_heads
        ):  # LM derives kv_channels from them and asserts (LM_KV_CHANNELS)
            out += ["--kv-channels", str(m.v_head_dim or m.head_dim)]
        if m.q_lora_rank:
            out += ["--q-lora-rank", str(m.q_lora_rank)]
        out += ["--qk-head-dim", str(m.head_dim), "--qk-pos-emb-head-dim", str(m.qk_pos_emb_head_dim),
                "--v-head-dim", str(m.v_head_dim)]  # fmt: skip
    else:
        out += ["--group-query-attention", "--num-query-groups", str(m.num_query_groups), "--kv-channels",
                str(m.head_dim)]  # fmt: skip
    out += function_flags(m)
    out += ["--num-experts", str(m.num_experts), "--moe-router-topk", str(m.moe_router_topk),
            "--moe-ffn-hidden-size", str(m.moe_ffn_hidden_size)]  # fmt: skip
    if m.moe_shared_expert_intermediate_size:
        out += ["--moe-shared-expert-intermediate-size", str(m.moe_shared_expert_intermediate_size)]
    if m.moe_latent_size:
        out += ["--moe-latent-size", str(m.moe_latent_size)]
    if m.num_dense_layers:
        out += ["--moe-layer-freq", f"([0]*{m.num_dense_layers}+[1]*{m.num_moe_layers})"]
    if not m.tie_embeddings:
        out.append("--untie-embeddings-and-output-weights")
    if m.has_dsa:
        # DSA refuses RoPE fusion, which Megatron-LM turns on by default (MCore transformer_config.py:2837-2838)
        out += ["--experimental-attention-variant", "dsa", "--dsa-indexer-n-heads", str(m.dsa_index_n_heads),
                "--dsa-indexer-head-dim", str(m.dsa_index_head_dim), "--dsa-indexer-topk", str(m.dsa_index_topk),
                "--no-rope-fusion"]  # fmt: skip
    mtp = m.mtp_num_layers if mtp_layers is None else mtp_layers
    if (
        m.is_hybrid
    ):  # the unified pattern: main stack, then the MTP block once per depth (arguments.py:838-853)
        mtp_part = f"/{m.mtp_block_pattern}" * mtp if m.mtp_block_pattern else ""
        out += ["--hybrid-layer-pattern", f"{m.hybrid_layer_pattern}{mtp_part}"]
    if mtp:
        out += ["--mtp-num-layers", str(mtp)]
        if m.mtp_use_repeated_layer:
            out.append("--mtp-use-repeated-layer")
    return out


# Flags that choose what Megatron-LM builds (norm, activation, biases, router, softmax) where its defaults
# build other functions; overrides.function_flags writes them for a catalog model.
FUNCTION_FLAGS = frozenset({"--normalization", "--swiglu", "--squared-relu", "--quick-geglu", "--glu-linear-offset",
    "--activation-func-clamp-value", "--disable-bias-linear", "--add-qkv-bias", "--qk-layernorm",
    "--moe-shared-expert-gate", "--moe-router-score-function", "--moe-router-num-groups", "--moe-router-group-topk",
    "--softmax-type", "--window-size", "--window-attn-skip-freq"})  # fmt: skip


def function_flags(m: ModelSpec) -> list[str]:
    """The flags that make Megatron-LM build this model's functions where its defaults build others (core_r0.19.0
    parse_args defaults: LayerNorm, GeLU MLPs, biases on every linear, the softmax router, vanilla softmax)."""
    out = ["--normalization", "RMSNorm"] if m.normalization == "RMSNorm" else []
    if m.mlp_squared_relu:
        out.append("--squared-relu")
    elif m.family == "gpt_oss":  # clamped quick-GeGLU with the +1 offset (Bridge gpt_oss_bridge.py:82-84)
        out += ["--quick-geglu", "--glu-linear-offset", "1.0", "--activation-func-clamp-value", "7.0"]
    elif m.gated_linear_unit:
        out.append("--swiglu")
    if not m.add_bias_linear:
        out.append("--disable-bias-linear")
    out += [flag for flag, on in (("--add-qkv-bias", m.add_qkv_bias), ("--qk-layernorm", m.qk_layernorm),
            ("--moe-shared-expert-gate", m.moe_shared_expert_gate)) if on]  # fmt: skip
    if m.moe_router_score_function != "softmax":
        out += ["--moe-router-score-function", m.moe_router_score_function]
    if m.moe_router_num_groups:
        out += ["--moe-router-num-groups", str(m.moe_router_num_groups), "--moe-router-group-topk",
                str(m.moe_router_group_topk)]  # fmt: skip
    if m.softmax_sinks:
        out += ["--softmax-type", "learnable"]
    if (
        m.family == "gpt_oss" and m.sliding_window
    ):  # every other layer, window - 1 back (gpt_oss_bridge.py:86-88)
        out += ["--window-size", f"{m.sliding_window - 1},0", "--window-attn-skip-freq", "2"]
    return out


def unwritten_features(m: ModelSpec) -> list[str]:
    """What of the model architecture_flags does not write (the model's own launch script must)."""
    out = []
    if m.sliding_window and m.family != "gpt_oss":
        out.append(f"its sliding-window layers (window {m.sliding_window})")
    if m.has_linear_attention:
        out.append("its Gated DeltaNet layers")
    if m.attention_output_gate:
        out.append("its attention output gate")
    if m.final_logit_softcapping:
        out.append("its logit soft-capping")
    return out


def flag_groups(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """Launch tokens as (flag, its values), in order; tokens before the first flag are dropped."""
    groups: list[tuple[str, list[str]]] = []
    for token in tokens:
        if token.startswith("--"):
            groups.append((token, []))
        elif groups:
            groups[-1][1].append(token)
    return groups


def drop_flags(tokens: list[str], flags: set[str]) -> list[str]:
    """``tokens`` without the given flags and their values."""
    return [t for flag, values in flag_groups(tokens) if flag not in flags for t in (flag, *values)]


def merge_flags(first: list[str], then: list[str]) -> list[str]:
    """``first`` followed by ``then``, without the flags of ``first`` that ``then`` writes again (``then`` wins)."""
    return drop_flags(first, {t for t in then if t.startswith("--")}) + then


def megatron_args_for(
    cfg: TrainingConfig, model: ModelSpec | None = None, mtp_layers: int | None = None
) -> list[str]:
    """Megatron-LM tokens for every engine setting that differs from Megatron-LM's own default.

    Flags marked ``required`` (no usable default in Megatron-LM, e.g. --micro-batch-size) are always written;
    ``mtp_layers`` writes --mtp-num-layers without the architecture flags (Megatron-LM has no MTP layer
    without it, whatever the model's own count).
    """
    defaults = megatron_defaults()
    tokens: list[str] = []
    if mtp_layers and model is None:
        tokens += ["--mtp-num-layers", str(mtp_layers)]
    for name, spec in dialect_table()["fields"].items():
        if not _written(name, cfg):
            continue
        value = getattr(cfg, name)
        if name == "vpp" and cfg.pipeline_layout is not None:
            continue  # Megatron-LM derives VPP from the layout and refuses both
        if name == "sequence_parallel" and value is None:
            value = cfg.tp > 1  # what the engine assumed (SP_ASSUMED); Megatron-LM's own default is off
        required = spec.get("megatron", {}).get("required", False)
        if name == "precision" or required or value != defaults.get(name, _missing):
            tokens += megatron_tokens(name, value)
    # LM arguments.py:1146: Megatron-FSDP needs its checkpoint format (LM_MEGATRON_FSDP)
    if cfg.use_megatron_fsdp:
        tokens += ["--ckpt-format", "fsdp_dtensor"]
    if model is not None:
        return merge_flags(architecture_flags(model, cfg.mtp_num_layers, cfg.seq_len), tokens)
    return tokens


def bridge_overrides_for(cfg: TrainingConfig) -> dict[str, Any]:
    """Bridge override keys for every engine setting that differs from Bridge's MoE recipe defaults."""
    items: dict[str, Any] = {}
    for name, spec in dialect_table()["fields"].items():
        if not _written(name, cfg):
            continue
        value = getattr(cfg, name)
        required = name == "precision" or spec.get("bridge", {}).get("required", False)
        if value != TrainingConfig.model_fields[name].default or required:
            items.update(bridge_items(name, value))
    if cfg.mtp_num_layers is not None:
        items["model.mtp_num_layers"] = cfg.mtp_num_layers
    return items


def bridge_translation(cfg: TrainingConfig, fields: set[str]) -> dict[str, Any]:
    """Bridge override keys for the fields a launch sets (its values in ``cfg``); what it leaves to its
    front end's defaults is not written."""
    names = set(fields) | ({"vpp"} if "_layers_per_virtual_stage" in fields else set())
    items: dict[str, Any] = {}
    for name in dialect_table()["fields"]:
        if name in names and _written(name, cfg):
            items.update(bridge_items(name, getattr(cfg, name)))
    if "mtp_num_layers" in names and cfg.mtp_num_layers is not None:
        items["model.mtp_num_layers"] = cfg.mtp_num_layers
    return items


def bridge_python_snippet(cfg: TrainingConfig, recipe: str = "<your recipe>_config()") -> str:
    """A short Python snippet applying the overrides to a Megatron Bridge recipe's ConfigContainer."""
    lines = ["# apply to a Megatron Bridge ConfigContainer, e.g. cfg = " + recipe]
    lora_made = False
    for key, value in bridge_overrides_for(cfg).items():
        if key.startswith("peft.") and not lora_made:
            # a full-training recipe's peft is None: make the object; a PEFT recipe's is kept
            lines += ["from megatron.bridge.peft.lora import LoRA", "cfg.peft = cfg.peft or LoRA()"]
            lora_made = True
        lines.append(f"cfg.{key} = {list(value) if isinstance(value, tuple) else value!r}")
    return "\n".join(lines)


def bridge_override_list(cfg: TrainingConfig) -> list[str]:
    return render_bridge(bridge_overrides_for(cfg))


class _Missing:
    pass


_missing = _Missing()
