"""lint_config: a launch configuration as users have it, checked by every rule, with a corrected copy.

Input is one of: Megatron-LM arguments (a launch script or a list), Megatron Bridge overrides, or a
ConfigContainer-shaped object. Findings name the flag or key they come from; flags the engine does not
model are listed as not checked (never as errors); the corrected configuration applies each repair and
changes nothing else, in the same dialect and in the other one.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from ..dialects.launch import Understood, understand_bridge, understand_megatron
from ..dialects.overrides import (
    architecture_flags,
    bridge_overrides_for,
    megatron_args_for,
    megatron_defaults,
)
from ..dialects.tables import (
    ParsedScript,
    bridge_items,
    flags_for,
    flatten_config,
    keys_for,
    load_config_object,
    megatron_flags,
    megatron_tokens,
    parse_bridge_overrides,
    parse_megatron_args,
    render_bridge,
    render_megatron,
    unflatten,
)
from ..engine.config import MAX_GPUS, TrainingConfig, _Args
from ..engine.context import Context
from ..engine.findings import Finding, errors, has_errors, sort_findings
from ..engine.rules import finding, run
from ..errors import InputError, describe_validation_error
from ..model.catalog import load_gpu, load_model, models
from ..model.hf import spec_from_hf_config
from ..model.specs import ModelSpec
from .repairs import repair_patch

MAX_TEXT = 200_000


class LintConfigRequest(_Args):
    megatron_args: str | list[str] | None = Field(
        default=None,
        description="Megatron-LM arguments as written in a launch script (a string with '\\' continuations, "
        "comments and VAR=value assignments, or a list of tokens). torchrun --nnodes/--nproc-per-node count.",
    )
    bridge_overrides: str | list[str] | None = Field(
        default=None,
        description="Megatron Bridge overrides: 'key=value' items with dotted ConfigContainer keys "
        "(model.context_parallel_size=8), lists as [a,b]; a string or a list.",
    )
    config: str | dict[str, Any] | None = Field(
        default=None,
        description="A ConfigContainer-shaped object (JSON/YAML text or an object) with sections such as model, "
        "train, optimizer, ddp, dataset, mixed_precision.",
    )
    model: str | dict[str, Any] | None = Field(
        default=None,
        description="Catalog model id or config.json object, when the launch does not give the architecture flags.",
    )
    gpu: str | None = Field(
        default=None, description="GPU catalog id (h100, h200, b200, b300, gb200, gb300)."
    )
    num_gpus: int | None = Field(
        default=None, ge=1, le=MAX_GPUS, description="World size, when the launch does not say it (--nnodes)."
    )

    @model_validator(mode="after")
    def _exactly_one_input(self) -> LintConfigRequest:
        given = [n for n in ("megatron_args", "bridge_overrides", "config") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of megatron_args, bridge_overrides or config"
                + (f" (got {given})" if given else "")
            )
        text = getattr(self, given[0])
        size = len(text) if isinstance(text, str) else len(str(text))
        if size > MAX_TEXT:
            raise ValueError(f"{given[0]} is {size} characters; at most {MAX_TEXT}")
        return self


class AppliedFix(BaseModel):
    code: str = Field(description="The error the change resolves.")
    settings: dict[str, Any] = Field(description="Engine fields changed to resolve it.")


class LintConfigResult(BaseModel):
    valid: bool = Field(description="True when no finding is an error.")
    dialect: Literal["megatron-lm", "bridge", "config"]
    model: str = Field(description="The model checked (catalog id, or 'custom').")
    num_gpus: int
    findings: list[Finding] = Field(description="Every rule's verdict; keys are the flags/keys as written.")
    effective_config: dict[str, Any] = Field(
        description="Engine fields as understood (after dialect defaults)."
    )
    not_checked: list[str] = Field(description="Flags or keys the engine does not model (not errors).")
    fixes: list[AppliedFix] = Field(description="The repairs the corrected configuration applies, in order.")
    corrected: str | list[str] | dict[str, Any] = Field(
        description="The corrected configuration, same dialect."
    )
    corrected_other_dialect: str | list[str] = Field(
        description="The corrected configuration in the other dialect (Bridge overrides for Megatron-LM input, "
        "Megatron-LM flags otherwise)."
    )
    remaining_errors: list[str] = Field(description="Error codes no automatic repair resolves (fix by hand).")


# --------------------------------------------------------------------------- model


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


def _resolve_model(u: Understood, given: str | dict | None) -> tuple[ModelSpec, list[Finding]]:
    arch = u.architecture
    notes: list[Finding] = []
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
    if len(matches) == 1 and len(present) >= 3:
        spec = matches[0]
        notes.append(finding("MODEL_RECOGNISED", f"The architecture flags match {spec.name} ({spec.id}).", None,
                             ["model"]))  # fmt: skip
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
        cfg["model_type"] = "qwen3_moe"
        if "--group-query-attention" not in arch:
            cfg["num_key_value_heads"] = heads
    cfg.setdefault("tie_word_embeddings", "--untie-embeddings-and-output-weights" not in arch)
    cfg.setdefault("vocab_size", 128256)
    dense = cfg.pop("first_k_dense_replace", 0)
    if cfg["model_type"] == "deepseek_v3":
        cfg["first_k_dense_replace"] = dense
    elif dense:
        raise InputError("--moe-layer-freq", dense, "every layer MoE for a GQA model built from flags")
    missing = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "moe_intermediate_size")
               if not cfg.get(k)]  # fmt: skip
    if missing:
        raise InputError("model", None, f"model= or the flags for {missing} (the launch does not set them)")
    cfg.setdefault("intermediate_size", cfg["moe_intermediate_size"])
    return spec_from_hf_config(cfg, name="custom model from launch flags")


# --------------------------------------------------------------------------- lint


def _base_fields(u: Understood) -> tuple[dict[str, Any], int | None]:
    """The launch's fields on top of the dialect's defaults (Megatron-LM argparse or Bridge recipe)."""
    base = megatron_defaults() if u.dialect == "megatron-lm" else {}
    fields = {**base, **u.fields}
    layers_per_vstage = fields.pop("_layers_per_virtual_stage", None)
    return fields, layers_per_vstage


def _understand(req: LintConfigRequest) -> tuple[Understood, str, Any]:
    if req.megatron_args is not None:
        parsed = parse_megatron_args(req.megatron_args)
        return understand_megatron(parsed), "megatron-lm", parsed
    if req.bridge_overrides is not None:
        keys = parse_bridge_overrides(req.bridge_overrides)
        return understand_bridge(keys), "bridge", keys
    obj = load_config_object(req.config)
    keys = flatten_config(obj)
    return understand_bridge(keys), "config", obj


def _dialect_keys(f: Finding, u: Understood, dialect: str) -> Finding:
    """Translate a finding's engine field names into the flags/keys of the input."""
    names: list[str] = []
    for key in f.keys:
        if key.startswith("-") or "." in key:
            names.append(key)
        elif key in u.origin:
            names.extend(u.origin[key])
        else:
            candidates = flags_for(key) if dialect == "megatron-lm" else keys_for(key)
            names.append(candidates[0] if candidates else key)
    return f.model_copy(update={"keys": list(dict.fromkeys(names))})


def _build_config(fields: dict[str, Any], u: Understood, model: ModelSpec, req: LintConfigRequest,
                  num_gpus: int) -> TrainingConfig:  # fmt: skip
    data = {k: v for k, v in fields.items() if k in TrainingConfig.model_fields}
    data.update(
        model=model.id, num_gpus=num_gpus, launcher="megatron-lm" if u.dialect == "megatron-lm" else "bridge"
    )
    if req.gpu is not None:
        data["gpu"] = req.gpu
    try:
        return TrainingConfig(**data)
    except ValidationError as exc:  # a value of the launch is out of range or of the wrong type
        raise InputError.plain(
            "the launch sets a value the engine cannot use: " + describe_validation_error(exc)
        ) from None


def lint_config(req: LintConfigRequest) -> LintConfigResult:
    u, dialect, original = _understand(req)
    model, model_notes = _resolve_model(u, req.model)
    gpu = load_gpu(req.gpu) if req.gpu else None
    num_gpus = req.num_gpus or u.num_gpus
    if num_gpus is None:
        raise InputError(
            "num_gpus", None, "a world size: pass num_gpus, or --nnodes and --nproc-per-node in the script"
        )
    fields, layers_per_vstage = _base_fields(u)
    if layers_per_vstage:
        pp = fields.get("pp", 1)
        total = (
            model.num_layers
            + int(bool(fields.get("account_for_embedding_in_pipeline_split")))
            + int(bool(fields.get("account_for_loss_in_pipeline_split")))
        )
        if pp and total % pp == 0 and (total // pp) % layers_per_vstage == 0:
            fields["vpp"] = total // pp // layers_per_vstage or None
    cfg = _build_config(fields, u, model, req, num_gpus)
    ctx = Context(cfg=cfg, model=model, gpu=gpu)
    found = run(ctx) + u.notes + model_notes
    found += [
        finding("VALUE_NOT_READ", p, "Give a value of the right type.", [p.split()[0]]) for p in u.problems
    ]
    findings = sort_findings([_dialect_keys(f, u, dialect) for f in found])

    corrected_cfg, fixes, remaining = _repair(cfg, model, gpu)
    changed = {k: getattr(corrected_cfg, k) for k in TrainingConfig.model_fields
               if getattr(corrected_cfg, k) != getattr(cfg, k)}  # fmt: skip
    effective = {k: v for k, v in cfg.model_dump(mode="json").items() if k not in ("model",)}
    effective["model"] = model.id
    # values in effect after the framework's own resolution
    effective.update(vpp=ctx.vpp, etp=ctx.etp, sequence_parallel=ctx.sequence_parallel)
    if dialect == "megatron-lm":
        renames = _unknown_flag_fixes(original)
        fixes += [
            AppliedFix(code="LM_UNKNOWN_FLAG", settings={flag: new or "removed"})
            for flag, new in renames.items()
        ]
        corrected = _edit_megatron(original, changed, renames)
        other = render_bridge(bridge_overrides_for(corrected_cfg))
    else:
        edited = _edit_bridge(flatten_config(original) if dialect == "config" else original, changed)
        corrected = unflatten(edited) if dialect == "config" else render_bridge(edited)
        other = render_megatron(architecture_flags(model, corrected_cfg.mtp_num_layers)
                                + megatron_args_for(corrected_cfg))  # fmt: skip
    return LintConfigResult(
        valid=not has_errors(findings),
        dialect=dialect,
        model=model.id,
        num_gpus=num_gpus,
        findings=findings,
        effective_config=effective,
        not_checked=u.not_checked,
        fixes=fixes,
        corrected=corrected,
        corrected_other_dialect=other,
        remaining_errors=remaining,
    )


def _repair(cfg: TrainingConfig, model: ModelSpec, gpu) -> tuple[TrainingConfig, list[AppliedFix], list[str]]:
    """Apply repairs for the engine's error findings until none is left (or none can be repaired)."""
    fixes: list[AppliedFix] = []
    for _ in range(16):
        ctx = Context(cfg=cfg, model=model, gpu=gpu)
        errs = errors(run(ctx))
        if not errs:
            return cfg, fixes, []
        patch: dict[str, Any] = {}
        for f in errs:
            if f.code in {fix.code for fix in fixes}:
                continue
            p = repair_patch(f.code, ctx)
            p = {k: v for k, v in (p or {}).items() if getattr(cfg, k) != v}
            if p:
                fixes.append(AppliedFix(code=f.code, settings=p))
                patch.update(p)
                break  # one repair at a time: later errors may disappear with it
        if not patch:
            break
        cfg = TrainingConfig(**{**cfg.model_dump(), **patch})
    ctx = Context(cfg=cfg, model=model, gpu=gpu)
    remaining = sorted({f.code for f in errors(run(ctx))})
    return cfg, fixes, remaining


def _unknown_flag_fixes(parsed: ParsedScript) -> dict[str, str | None]:
    """Unknown flags -> their close known spelling (when not already given), or None to drop them."""
    given = {item.flag for item in parsed.items}
    out: dict[str, str | None] = {}
    for flag in parsed.unknown:
        close = difflib.get_close_matches(flag, list(megatron_flags()), n=1, cutoff=0.75)
        out[flag] = close[0] if close and close[0] not in given else None
    return out


def _edit_megatron(parsed: ParsedScript, changed: dict[str, Any], renames: dict[str, str | None]) -> str:
    """The original script with the changed fields' flags replaced, everything else as written."""
    tokens: list[str] = list(parsed.launcher_tokens)
    pending = dict(changed)
    env_lines = []
    if pending.pop("nccl_graph_register", True) is False:
        env_lines.append("export NCCL_GRAPH_REGISTER=0")
    if pending.pop("expandable_segments", None) is False:
        env_lines.append("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False")
    groups = {name: set(flags_for(name)) for name in pending}
    for item in parsed.items:
        if item.flag in renames:
            if renames[item.flag]:
                tokens += [renames[item.flag], *item.values]
            continue
        owner = next((n for n, fl in groups.items() if item.flag in fl), None)
        if owner is None:
            tokens += [item.flag, *item.values]
            continue
        if owner in pending:
            tokens += megatron_tokens(owner, pending.pop(owner))
    for name, value in pending.items():
        tokens += megatron_tokens(name, value)
    text = render_megatron(tokens)
    return "\n".join([*env_lines, text]) if env_lines else text


def _edit_bridge(keys: dict[str, Any], changed: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pending = dict(changed)
    owners = {}
    for name in pending:
        for key in keys_for(name):
            owners[key] = name
    for key, value in keys.items():
        name = owners.get(key)
        if name is None:
            out[key] = value
        elif name in pending:
            out.update(bridge_items(name, pending.pop(name)))
    for name, value in pending.items():
        out.update(bridge_items(name, value))
    return out
