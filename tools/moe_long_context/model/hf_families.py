"""The table-driven config.json converter for the families of ``hf_families.yaml``.

One reader serves every family of the table: the table says which config.json key feeds which ModelSpec field,
what transformers' config class uses for a missing key, what Bridge hard-codes, how the shared expert and the
dense layers are written, and where the per-layer attention kinds come from. Values the arithmetic depends on
are checked against each other by key name before ModelSpec sees them.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, Protocol

from ..errors import InputError
from .yaml_data import load_data_yaml

_LAYER_KINDS = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear"}
_MAX_INT = 1 << 24


class Reader(Protocol):
    cfg: Mapping[str, Any]
    origin: str
    values: dict[str, Any]

    def set(self, field: str, value: Any, why: str) -> None: ...


@cache
def family_table() -> dict[str, dict[str, Any]]:
    """model_type -> the family's entry of hf_families.yaml."""
    text = resources.files(__package__).joinpath("hf_families.yaml").read_text()
    return load_data_yaml(text)["families"]


def language_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language-model keys: ``text_config`` merged over the top level (a VLM's tie flag sits on top)."""
    text = cfg.get("text_config")
    if not isinstance(text, Mapping):
        return cfg
    return {**{k: v for k, v in cfg.items() if k != "text_config"}, **text}


class _Keys:
    """Looks up config.json keys with the family's defaults and remembers where each value came from."""

    def __init__(self, r: Reader, entry: Mapping[str, Any], model_type: str):
        self.r, self.entry, self.model_type = r, entry, model_type
        self.defaults = entry.get("defaults", {})
        self.assumed = entry.get("assumed", {})

    def raw(self, key: str) -> Any:
        """The config.json value of ``key``; a dotted key reads a nested object (attention_other_setting.head_dim)."""
        value: Any = self.r.cfg
        for part in key.split("."):
            if not isinstance(value, Mapping):
                return None
            value = value.get(part)
        return value

    def has(self, key: str) -> bool:
        return self.raw(key) is not None

    def get(self, key: str) -> tuple[Any, str]:
        """(value, source) of ``key``: config.json, else the config class default, else an assumed value."""
        if self.has(key):
            return self.raw(key), f"{self.r.origin}: {key}"
        if key in self.defaults:
            value = self.defaults[key]
            owner = self.entry.get("defaults_from") or f"transformers {self.entry['transformers']}"
            why = f"{owner} default (config.json has no {key!r})"
        elif key in self.assumed:
            value, reason = self.assumed[key]
            why = f"assumed ({reason}; config.json has no {key!r})"
        else:
            raise InputError(f"model.{key}", None, f"config.json must set {key!r} for {self.model_type}")
        if value == "hidden_size / num_attention_heads":
            value = self.ratio("hidden_size", "num_attention_heads", key)
        elif value == "4 x hidden_size":
            value = 4 * self.int("hidden_size")
        elif isinstance(value, str) and value in self.defaults:  # a default naming another key
            value = self.get(value)[0]
        return value, why

    def int(self, key: str, low: int = 1) -> int:
        value = self.get(key)[0]
        if isinstance(value, list) and value and len(set(value)) == 1:
            value = value[0]  # ERNIE and Hunyuan may write one value per layer
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _MAX_INT:
            raise InputError(f"model.{key}", value, f"an integer from {low} to {_MAX_INT}")
        return value

    def ratio(self, num: str, den: str, key: str) -> int:
        a, b = self.int(num), self.int(den)
        if a % b:
            unset = [k for k in (num, den) if not self.has(k)]
            owner = self.entry.get("defaults_from") or f"transformers {self.entry['transformers']}"
            why = (
                f" (the config.json lacks {' and '.join(unset)}: {'these are' if len(unset) > 1 else 'it is'} "
                f"the {owner} default{'s' if len(unset) > 1 else ''})"
                if unset
                else ""
            )
            raise InputError(
                f"model.{key}",
                None,
                f"set {key} in the config.json: {num}={a} is not a multiple of {den}={b}{why}",
            )
        return a // b


def _first_key(keys: _Keys, spec: str | list[str]) -> str:
    names = [spec] if isinstance(spec, str) else spec
    for name in names:
        if keys.has(name):
            return name
    return next((n for n in names if n in keys.defaults or n in keys.assumed), names[0])


def _layer_types(keys: _Keys, layers: Any, num_layers: int) -> tuple[tuple[str, ...], str]:
    if layers == "full":
        return ("full",) * num_layers, "every layer uses full attention"
    if "pattern" in layers:  # MiMo-V2-Flash hybrid_layer_pattern: 1 sliding window, 0 full attention
        key = layers["pattern"]
        marks = keys.get(key)[0]
        if not isinstance(marks, list) or len(marks) != num_layers or any(m not in (0, 1) for m in marks):
            raise InputError(
                f"model.{key}", marks, f"a list of {num_layers} entries, 0 (full) or 1 (sliding)"
            )
        return tuple(
            "sliding" if m else "full" for m in marks
        ), f"{keys.r.origin}: {key} (1 = sliding window)"
    listed = layers.get("layer_types")
    if listed and keys.has(listed):
        names = keys.r.cfg[listed]
        mtp_key = layers.get("with_mtp")  # Step-3.5 lists its MTP layers' types after the decoder's
        extra = keys.int(mtp_key, low=0) if mtp_key else 0
        if isinstance(names, list) and extra and len(names) == num_layers + extra:
            names = names[:num_layers]
        if not isinstance(names, list) or len(names) != num_layers:
            allowed = f"{num_layers} or {num_layers + extra}" if extra else f"{num_layers}"
            raise InputError(f"model.{listed}", names, f"a list of {allowed} layer types (num_hidden_layers)")
        unknown = sorted({n for n in names if n not in _LAYER_KINDS})
        if unknown:
            raise InputError(f"model.{listed}", unknown, "layer types among " + ", ".join(_LAYER_KINDS))
        return tuple(_LAYER_KINDS[n] for n in names), f"{keys.r.origin}: {listed}"
    if layers.get("otherwise") == "full":
        return ("full",) * num_layers, f"config.json has no {listed}: every layer uses full attention"
    if "interval" in layers:
        period, why = keys.int(layers["interval"]), keys.get(layers["interval"])[1]
        kinds = tuple("full" if (i + 1) % period == 0 else "linear" for i in range(num_layers))
        return kinds, f"full attention every {period}th layer, Gated DeltaNet otherwise ({why})"
    period, why = keys.int(layers["sliding_pattern"], low=0), keys.get(layers["sliding_pattern"])[1]
    if not period or not keys.get("sliding_window")[0]:
        return ("full",) * num_layers, f"no sliding window ({why})"
    kinds = tuple("full" if (i + 1) % period == 0 else "sliding" for i in range(num_layers))
    return kinds, f"sliding window with full attention every {period}th layer ({why})"


def _leading_dense(key: str, value: Any, moe: list[bool], num_layers: int) -> int:
    """The count of leading dense layers of a per-layer MoE list (``value`` as config.json writes it); refused
    unless the rest are all MoE."""
    dense = next((i for i, m in enumerate(moe) if m), num_layers)
    if len(moe) != num_layers or not all(moe[dense:]) or dense >= num_layers:
        raise InputError(
            f"model.{key}", value, f"{num_layers} layers: leading dense layers, then MoE up to the last layer"
        )
    return dense


def _dense_layers(keys: _Keys, rule: Any, num_layers: int) -> tuple[int, str]:
    r = keys.r
    listed = (
        isinstance(rule, Mapping)
        and "moe_list" in rule
        and ("first_k" not in rule or keys.has(rule["moe_list"]))
    )
    if listed:  # MiMo-V2-Flash moe_layer_freq (0 dense, 1 MoE), K-EXAONE is_moe_layer (false / true)
        key = rule["moe_list"]
        marks = keys.get(key)[0]
        if not isinstance(marks, list) or any(m not in (0, 1) for m in marks):
            raise InputError(f"model.{key}", marks, f"a list of {num_layers} entries, 0 (dense) or 1 (MoE)")
        return _leading_dense(key, marks, [m == 1 for m in marks], num_layers), f"{r.origin}: {key}"
    if isinstance(rule, Mapping) and "moe_enum" in rule:  # Step-3.5 moe_layers_enum: "3,4,...,44" or a list
        key = rule["moe_enum"]
        listed = keys.get(key)[0]
        try:
            indices = {
                int(x) for x in (listed.split(",") if isinstance(listed, str) else listed) if str(x).strip()
            }
        except (TypeError, ValueError):
            raise InputError(
                f"model.{key}", listed, "layer indices, as a list or a comma-separated string"
            ) from None
        moe = [i in indices for i in range(num_layers)]
        return _leading_dense(key, listed, moe, num_layers), keys.get(key)[1]
    if (
        "mlp_layer_types" in r.cfg and r.cfg["mlp_layer_types"] is not None
    ):  # transformers' dense / sparse list
        kinds = r.cfg["mlp_layer_types"]
        if not isinstance(kinds, list) or any(k not in ("dense", "sparse") for k in kinds):
            raise InputError(
                "model.mlp_layer_types", kinds, f"a list of {num_layers} entries, 'dense' or 'sparse'"
            )
        dense = _leading_dense("mlp_layer_types", kinds, [k == "sparse" for k in kinds], num_layers)
        return dense, f"{r.origin}: mlp_layer_types"
    if rule == "none":
        return 0, "every layer is MoE"
    if "sparse_step" in rule:
        step, only = r.cfg.get(rule["sparse_step"], 1), r.cfg.get(rule["only"]) or []
        if step != 1 or only:
            raise InputError(
                f"model.{rule['only'] if only else rule['sparse_step']}",
                only or step,
                f"every layer MoE ({rule['sparse_step']} 1, {rule['only']} []): other patterns are not modelled",
            )
        return 0, f"{r.origin}: {rule['sparse_step']} 1 and no {rule['only']}"
    key = rule["first_k"]
    dense, why = keys.int(key, low=0), keys.get(key)[1]
    if dense >= num_layers:
        raise InputError(f"model.{key}", dense, f"fewer than num_hidden_layers={num_layers}")
    last = rule.get("last")
    if last:
        end = keys.int(last, low=-1)
        if end not in (-1, num_layers - 1):
            raise InputError(
                f"model.{last}",
                end,
                f"-1 or {num_layers - 1} (MoE up to the last layer; others are not modelled)",
            )
    return dense, why


def _check_consistent(keys: _Keys, entry: Mapping[str, Any], v: Mapping[str, Any]) -> None:
    fields = entry["fields"]
    heads = v["num_attention_heads"]
    if entry["attention"] == "gqa":
        groups = v["num_query_groups"]
        if groups > heads or heads % groups:
            raise InputError(
                f"model.{_first_key(keys, fields['num_query_groups'])}",
                groups,
                f"a divisor of num_attention_heads={heads} (every query head needs one key/value head)",
            )
    if v.get("linear_num_key_heads") and v["linear_num_value_heads"] % v["linear_num_key_heads"]:
        raise InputError(
            "model.linear_num_value_heads",
            v["linear_num_value_heads"],
            f"a multiple of linear_num_key_heads={v['linear_num_key_heads']}",
        )
    experts, topk = v["num_experts"], v["moe_router_topk"]
    if not 0 < topk <= experts:
        raise InputError(
            f"model.{_first_key(keys, fields['moe_router_topk'])}",
            topk,
            f"between 1 and the {experts} experts of {_first_key(keys, fields['num_experts'])}",
        )
    groups, group_topk = v.get("moe_router_num_groups"), v.get("moe_router_group_topk")
    if groups and (experts % groups or not group_topk or group_topk > groups):
        raise InputError(
            f"model.{fields['moe_router_num_groups']}",
            groups,
            f"a divisor of the {experts} experts, with 1 <= {fields['moe_router_group_topk']} <= it",
        )


_BOOL_FIELDS = {"tie_embeddings", "qk_layernorm", "add_qkv_bias", "add_bias_linear", "attention_output_gate",
                "attention_output_gate_head_wise", "softmax_sinks"}  # fmt: skip
_SHAPE_BOOLS = {"softmax_sinks", "k_eq_v"}


def _shapes(keys: _Keys, entry: Mapping[str, Any], kinds: tuple[str, ...]) -> None:
    """The per-layer-type head shapes of the entry's ``shapes`` (config.json keys, or fixed values)."""
    shapes: dict[str, dict[str, Any]] = {}
    whys = []
    for kind, fields in entry.get("shapes", {}).items():
        if kind not in kinds:
            continue
        shape: dict[str, Any] = {}
        for field, key in fields.items():
            if not isinstance(key, str):
                shape[field] = key
                continue
            value, why = keys.get(key)
            shape[field] = bool(value) if field in _SHAPE_BOOLS else keys.int(key)
            whys.append(f"{kind}.{field} from {why}")
        heads, groups = shape["num_attention_heads"], shape["num_query_groups"]
        if heads % groups:
            key = fields["num_query_groups"]
            raise InputError(
                f"model.{key}", groups, f"a divisor of the {heads} query heads of the {kind} layers"
            )
        shapes[kind] = shape
    if shapes:
        keys.r.set("attention_shapes", shapes, "; ".join(whys))


_TEXT_FIELDS = {"moe_router_score_function"}
_FLOAT_FIELDS = {"final_logit_softcapping"}
_OPTIONAL_FIELDS = {"q_lora_rank", "sliding_window", "moe_router_num_groups", "moe_router_group_topk",
                    "final_logit_softcapping"}  # fmt: skip


def convert_table_family(r: Reader, model_type: str) -> None:
    """Fill ``r`` from config.json by the family's entry of hf_families.yaml."""
    entry = family_table()[model_type]
    keys = _Keys(r, entry, model_type)
    for key, expected in entry.get("refuse", {}).items():
        if keys.has(key) and r.cfg[key] != expected:
            raise InputError(f"model.{key}", r.cfg[key], f"{expected!r} (other values are not modelled)")
    for key, (expected, why) in entry.get("require", {}).items():
        value = keys.get(key)[0]
        if value != expected:
            raise InputError(f"model.{key}", value, f"{expected!r}", why)
    for key, other in entry.get("same_as", {}).items():
        if keys.has(key) and keys.raw(key) != keys.get(other)[0]:
            owner = entry["bridge"].rsplit("/", 1)[-1]
            raise InputError(
                f"model.{key}",
                keys.raw(key),
                f"{other}={keys.get(other)[0]!r}",
                f"{owner} builds these layers with {other}",
            )
    common = {"num_layers": "num_hidden_layers", "hidden_size": "hidden_size", "vocab_size": "vocab_size",
              "tie_embeddings": "tie_word_embeddings", "num_attention_heads": "num_attention_heads"}  # fmt: skip
    fields = {**common, **entry["fields"]}
    if entry["attention"] == "mla":
        fields.setdefault("num_query_groups", "num_attention_heads")
    for field, spec in fields.items():
        key = _first_key(keys, spec)
        if field in _OPTIONAL_FIELDS and not keys.has(key) and key not in keys.defaults:
            continue
        value, why = keys.get(key)
        if field in _BOOL_FIELDS:
            value = bool(value)
        elif field in _OPTIONAL_FIELDS and (not value or (field.startswith("moe_router_") and value == 1)):
            continue  # q_lora_rank null: no query compression; n_group 1: no group-limited routing
        elif field in _FLOAT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise InputError(f"model.{key}", value, "a positive number, or null")
            value = float(value)
        elif field not in _TEXT_FIELDS:
            value = keys.int(key, low=0 if field == "mtp_num_layers" else 1)
        r.set(field, value, why)
    if keys.has("max_position_embeddings") or "max_position_embeddings" in keys.defaults:
        value, why = keys.get("max_position_embeddings")
        r.set("max_position_embeddings", keys.int("max_position_embeddings"), why)
    owner = entry["bridge"] if entry["bridge"] != "none" else f"transformers {entry['transformers']}"
    r.set("attention", entry["attention"], f"{owner}: {entry['attention']} attention")
    for field, value in entry.get("fixed", {}).items():
        r.set(field, value, f"{owner} sets {field}={value}")
    num_layers = r.values["num_layers"]
    kinds, why = _layer_types(keys, entry["layers"], num_layers)
    r.set("attention_layer_types", kinds, why)
    _shapes(keys, entry, kinds)
    dense, why = _dense_layers(keys, entry["dense_layers"], num_layers)
    r.set("num_dense_layers", dense, why)
    shared = entry.get("shared_expert")
    if shared:
        width = keys.int(_first_key(keys, shared["width"]))
        count = shared["count"] if isinstance(shared["count"], int) else keys.int(shared["count"], low=0)
        if count:
            count_why = (
                shared["count"] if isinstance(shared["count"], str) else f"{count} (as Bridge maps it)"
            )
            r.set(
                "moe_shared_expert_intermediate_size",
                count * width,
                f"{r.origin}: {count_why} x {_first_key(keys, shared['width'])}",
            )
            if shared.get("gate"):
                r.set("moe_shared_expert_gate", True, f"{owner}: sigmoid-gated shared expert")
    _check_consistent(keys, entry, r.values)
