"""Compact JSON Schemas for tools/list: the same arguments and result shapes in far fewer bytes.

Every MCP session loads the whole tools/list, so each byte here is paid by every agent on every session.
The request and result models stay as they are (the CLI, the tests and the evals use them directly); the
MCP face sends a rewritten copy of their schemas:

- pydantic's generated ``title`` of every property and definition goes (the name already says it);
- an optional argument ``anyOf: [X, {type: null}]`` with ``default: null`` becomes ``X``: leaving it out
  means "unset", which the tool descriptions and the argument descriptions say; the request models
  still accept an explicit null;
- every argument gets a description of a few words (``WIRE_DESCRIPTIONS``, else the first sentence of
  the model's); the model argument points to the catalog resource instead of listing every id (the
  catalog grows; the description does not); an argument with an ``enum`` is described by its values; the
  long forms stay in ``references/tools.md`` and the CLI's ``--help``;
- on/off switches, the parallel sizes and optional counts share one ``$defs`` entry per kind
  (``SHARED_DEFS``), used when a tool has two or more of a kind;
- maxima that are only sanity caps (65536 GPUs) are not sent; the server still enforces them;
- output schemas give each top-level result field its JSON type(s), so a client can still validate
  ``structuredContent``; nested objects are not spelled out (the tool description, the summary text and
  ``references/tools.md`` say what they hold).

Measured through an in-process client (tests/test_server_lean.py holds the budget): 77 KB for seven tools
before, 30.8 KB now for eight (estimate_throughput takes the whole training config, as estimate_memory does;
LoRA's two arguments on the four estimating and planning tools cost 0.9 KB).
"""

from __future__ import annotations

import copy
import re
from typing import Any

# The description each argument has on the wire: a few words, in the agent's terms. A field missing here
# (a tool added later) keeps the first sentence of its request model's description.
WIRE_DESCRIPTIONS = {
    "model": "Catalog id (moe-lc://catalog/models) or config.json.",
    "gpu": "h100, h200, b200, b300, gb200, gb300.",
    "num_gpus": "GPUs in the job.",
    "seq_len": "Tokens per sequence.",
    "mtp_num_layers": "Unset: the model's.",
    "sequence_parallel": "Unset: on when TP > 1.",
    "target_tokens_per_shard": "Unset: 4096 (8192 on NVL72).",
    "pipeline_layout": "Layout string, e.g. 'Et|(tt|)*30mL'.",
    "hierarchical_cp_sizes": "a2a+p2p sizes, e.g. [8, 4].",
    "moe_capacity_factor": "Unset: dropless.",
    "recompute_modules": "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts, gdn_norm_out",
    "activation_offload": "Modules to offload.",
    "cuda_graph_modules": "attn, mlp, moe, moe_router, moe_preprocess, mamba; none: whole layer",
    "optimizer_cpu_offload_fraction": "Share on the CPU.",
    "overhead_gib": "GiB outside tensors.",
    "megatron_args": "Megatron-LM flags: script text or token list.",
    "bridge_overrides": "Bridge key=value overrides (dotted keys): text or list.",
    "config": "A ConfigContainer-shaped object, or its JSON/YAML text.",
    "top_n": "How many plans to return.",
    "nvte_cpu_offload_v1": "NVTE_CPU_OFFLOAD_V1=1 exported.",
    "lora_dim": "LoRA rank. Unset: full training.",
    "lora_target_modules": "Unset: linear_qkv, linear_proj, linear_fc1, linear_fc2.",
}

# Arguments that share one definition per tool, named by a ``$ref``, instead of a description each:
# on/off switches (named after the Megatron-LM flag, environment or dataset setting they stand for; which
# one is in references/tools.md and the CLI's --help) and the parallel and micro-batch sizes.
SHARED_DEFS = {
    "f": {"type": "boolean", "default": False, "description": "Switch, off unless set."},
    "t": {"type": "boolean", "default": True, "description": "Switch, on unless set."},
    "n": {"type": "integer", "minimum": 1, "default": 1, "description": "Parallel or batch size."},
    "c": {"type": "integer", "minimum": 1, "description": "Unset: derived."},
}
SIZES = ("tp", "cp", "pp", "ep", "mbs")


def _shared_def(name: str, prop: dict[str, Any]) -> str | None:
    """The shared definition an argument's schema is, apart from its description, if any."""
    bare = {k: v for k, v in prop.items() if k != "description"}
    if bare == {"type": "boolean", "default": False}:
        return "f"
    if bare == {"type": "boolean", "default": True}:
        return "t"
    for ref in ("n", "c"):
        if bare == {k: v for k, v in SHARED_DEFS[ref].items() if k != "description"}:
            return ref if ref == "c" or name in SIZES else None
    return None


# Bounds at or above this are sanity caps of the request models (65536 GPUs, 2^24 tokens, 16 MTP layers): the
# server still enforces them, but they tell an agent nothing, so they are not sent.
SANITY_CAP = 16

_SENTENCE_END = re.compile(r"(?<=[a-z0-9)\]'])\.\s")


def first_sentence(text: str) -> str:
    match = _SENTENCE_END.search(text)
    return text[: match.start() + 1] if match else text


def _type_list(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf`` of bare types (``[{type: string}, {type: object}]``) as one ``type`` list."""
    options = node.get("anyOf")
    bare = isinstance(options, list) and all(set(o) <= {"type", "additionalProperties"} for o in options)
    if bare and all(o.get("additionalProperties", True) is True for o in options):
        node = {k: v for k, v in node.items() if k != "anyOf"}
        node["type"] = [o["type"] for o in options]
    return node


def _strip(node: Any, *, descriptions: bool, collapse: bool = False) -> Any:
    """Drop titles (and, if asked, descriptions) and collapse optional-null unions, recursively."""
    if isinstance(node, list):
        return [_strip(item, descriptions=descriptions, collapse=collapse) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "description" and not descriptions:
            continue
        if key in ("properties", "$defs"):
            out[key] = {
                name: _strip(sub, descriptions=descriptions, collapse=collapse) for name, sub in value.items()
            }
        else:
            out[key] = _strip(value, descriptions=descriptions, collapse=collapse)
    options = out.get("anyOf")
    if collapse and isinstance(options, list) and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        if len(rest) == 1 and "default" in out and out["default"] is None:
            out.pop("anyOf")
            out.pop("default", None)
            out = {**rest[0], **out}
    return _type_list(out)


def _drop_caps(node: dict[str, Any]) -> None:
    if node.get("maximum", 0) >= SANITY_CAP:
        node.pop("maximum")
    if node.get("maxLength", 0) >= SANITY_CAP:
        node.pop("maxLength")
    if "maxItems" in node and len(node.get("items", {}).get("enum", ())) <= node["maxItems"]:
        node.pop("maxItems")  # a list of distinct labels; the enum or the description bounds it
    for key in ("items", "anyOf"):
        sub = node.get(key)
        for item in sub if isinstance(sub, list) else [sub] if isinstance(sub, dict) else []:
            _drop_caps(item)


def compact_input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The request model's schema for tools/list: same properties, defaults, enums and required list."""
    out = _strip(copy.deepcopy(schema), descriptions=True, collapse=True)
    out.pop("description", None)  # the tool's own description says it
    props = out["properties"]
    shared = {}
    for name, prop in props.items():
        _drop_caps(prop)
        if "enum" in prop:
            prop.pop("description", None)  # the values say it: bf16, fp8-blockwise, ...
        elif name in WIRE_DESCRIPTIONS:
            prop["description"] = WIRE_DESCRIPTIONS[name]
        elif prop.get("description"):
            prop["description"] = first_sentence(prop["description"])
        # a required argument, or one with a description of its own, keeps its own schema
        own = name in out.get("required", ()) or name in WIRE_DESCRIPTIONS
        shared[name] = None if own else _shared_def(name, prop)
    counts = {ref: list(shared.values()).count(ref) for ref in SHARED_DEFS}
    for name, ref in shared.items():
        if ref and counts[ref] > 1:  # a definition used once costs more than it saves
            props[name] = {"$ref": f"#/$defs/{ref}"}
    used = {ref: SHARED_DEFS[ref] for ref in SHARED_DEFS if counts[ref] > 1}
    if used:
        out.setdefault("$defs", {}).update(used)
    return out


FINDINGS = "[{severity, code, message, fix, keys, source}]"


def _shallow(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A result field's schema down to its JSON type(s): nested models are objects, lists are arrays, a
    field of any type stays unconstrained."""
    if "$ref" in node:
        return _shallow(defs.get(node["$ref"].rsplit("/", 1)[-1], {}), defs)
    if "anyOf" in node:
        types: list[Any] = []
        for option in node["anyOf"]:
            kind = _shallow(option, defs).get("type")
            if kind is None:
                return {}
            types += kind if isinstance(kind, list) else [kind]
        return {"type": list(dict.fromkeys(types))}
    if "type" in node:
        return {"type": node["type"]}
    return {"type": "object"} if "properties" in node else {}


def compact_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The result model's schema for tools/list: every top-level field with its JSON type(s), so a client
    can still validate ``structuredContent`` (every field is always present); nested models are plain
    objects, and ``findings`` says the shape of a finding. What each field means is in the tool
    description, the summary text and references/tools.md."""
    stripped = _strip(copy.deepcopy(schema), descriptions=False)
    defs = stripped.get("$defs", {})
    properties = {name: _shallow(prop, defs) for name, prop in stripped["properties"].items()}
    if "findings" in properties:
        properties["findings"]["description"] = FINDINGS
    return {"type": "object", "properties": properties}
