"""lint_config: a launch configuration as users have it, checked by every rule, with a corrected copy.

Input is one of: Megatron-LM arguments (a launch script or a list), Megatron Bridge overrides, or a
ConfigContainer-shaped object. Findings name the flag or key they come from; flags the engine does not
model are listed as not checked (never as errors); the corrected configuration applies each repair and
changes nothing else, in the same dialect and in the other one. The correction is checked as it is handed
back: the corrected text is read again and every rule and the memory model run on it and on its
translation, so ``remaining_errors`` and ``corrected_memory`` describe exactly what the user gets.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from ..dialects.conflicts import bridge_conflicts, megatron_conflicts
from ..dialects.launch import Understood
from ..dialects.lm_args import Conflict, max_connections, runs_pretrain, virtual_stages
from ..dialects.overrides import (
    architecture_flags,
    bridge_translation,
    megatron_args_for,
    megatron_defaults,
    merge_flags,
)
from ..dialects.tables import (
    ParsedScript,
    bridge_items,
    flags_for,
    flatten_config,
    keys_for,
    megatron_flags,
    render_bridge,
    render_megatron,
    unflatten,
)
from ..engine.config import MAX_GPUS, TrainingConfig, _Args
from ..engine.context import Context
from ..engine.findings import Checked, Finding, NotChecked, errors, has_errors, sort_findings
from ..engine.rules import finding, run
from ..engine.rules.bridge_state_checks import bridge_launch_checks, megatron_launch_checks
from ..engine.rules.lm_args_features import gtp_node_priority, lm_launch_repairs
from ..engine.rules.upstream import checked
from ..errors import InputError, check_nesting, describe_validation_error
from ..memory.rank_memory import memory_model
from ..memory.terms import GIB
from ..model.catalog import load_gpu, model_ids
from ..model.specs import ModelSpec
from .estimate_memory import memory_findings
from .lint_edit import edit_bridge, edit_megatron
from .lint_model import resolve_model
from .lint_read import bridge_key_findings, gpu_skipped, lint_not_checked, understand_launch
from .repair_choice import AppliedFix, MemoryVerdict, memory_verdict, repair_config

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
        if not isinstance(text, str):
            check_nesting(text, given[0])  # before str() walks it
        size = len(text) if isinstance(text, str) else len(str(text))
        if size > MAX_TEXT:
            raise ValueError(f"{given[0]} is {size} characters; at most {MAX_TEXT}")
        return self


class LintConfigResult(BaseModel):
    valid: bool = Field(description="True when no finding is an error.")
    dialect: Literal["megatron-lm", "bridge", "config"]
    model: str = Field(description="The model checked (catalog id, or 'custom').")
    num_gpus: int
    findings: list[Finding] = Field(description="Every rule's verdict; keys are the flags/keys as written.")
    effective_config: dict[str, Any] = Field(
        description="Engine fields as understood (after dialect defaults)."
    )
    not_checked: list[NotChecked] = Field(
        description="What no rule decides (not errors): the not-modelled upstream checks the launch reaches (file:line "
        "and what each requires), then the flags or keys the engine does not read."
    )
    checked: Checked = Field(
        description="Rules run and the upstream checks they model: what a clean result covers."
    )
    fixes: list[AppliedFix] = Field(description="The repairs the corrected configuration applies, in order.")
    corrected: str | list[str] | dict[str, Any] = Field(
        description="The corrected configuration, same dialect."
    )
    corrected_other_dialect: str | list[str] | None = Field(
        description="The corrected configuration in the other dialect (Bridge overrides for Megatron-LM input, "
        "Megatron-LM flags otherwise); None for a LoRA launch, which Megatron-LM cannot express (it has no LoRA: "
        "its translation would train every weight)."
    )
    remaining_errors: list[str] = Field(
        description="Errors left in the corrected configuration, found by checking the corrected text itself and "
        "its translation (empty when both pass every rule; MEMORY_OVER_BUDGET when it does not fit the GPU)."
    )
    corrected_memory: MemoryVerdict | None = Field(
        description="The memory model on the corrected configuration: peak, usable, headroom, and pick_recompute's "
        "next steps when it does not fit. None when no sequence length is known."
    )


@dataclass
class _Analysis:
    """One launch checked: what it says, the configuration it means, and every finding on it."""

    dialect: str
    source: Any
    parsed: Any  # ParsedScript, override dict or config object
    u: Understood
    model: ModelSpec
    gpu: Any
    num_gpus: int
    cfg: TrainingConfig
    ctx: Context
    findings: list[Finding]
    renames: dict[str, str | None]
    rename_codes: dict[str, str]  # the rule a rename repairs, where it is not an unknown flag or key

    @property
    def error_codes(self) -> set[str]:
        return {f.code for f in errors(self.findings)}


def _analyse(
    dialect: str, source: Any, model_arg: Any, gpu_id: str | None, num_gpus: int | None
) -> _Analysis:
    u, parsed = understand_launch(dialect, source)
    model, model_notes = resolve_model(u, model_arg)
    gpu = load_gpu(gpu_id) if gpu_id else None
    world = num_gpus or u.num_gpus
    if world is None:
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
    cfg = _build_config(fields, u, model, gpu_id, world)
    ctx = Context(cfg=cfg, model=model, gpu=gpu)
    found = run(ctx) + u.notes + model_notes
    if num_gpus and u.num_gpus and num_gpus != u.num_gpus:
        found.append(finding("NUM_GPUS_DIFFERS", f"num_gpus={num_gpus} is checked, not the launch's own world size "
                             f"of {u.num_gpus} GPUs.", "Drop num_gpus to check the launch as written, or change the "
                             "launch's node count.", ["num_gpus"]))  # fmt: skip
    found += [
        finding("VALUE_NOT_READ", p, "Give a value of the right type.", [p.split()[0]]) for p in u.problems
    ]
    renames: dict[str, str | None] = {}
    if dialect == "megatron-lm":
        renames = _unknown_flag_fixes(parsed)
        values = {item.flag: item.values for item in parsed.items}
        pretrain = runs_pretrain(parsed.launcher_tokens)
        sm = gpu.compute_capability[0] if gpu else None
        launch = [*virtual_stages(values, model.num_layers), *max_connections(values, parsed.env, sm),
                  *(Conflict(f) for f in gtp_node_priority(values, parsed.env, sm, megatron_flags()))]  # fmt: skip
        found += [c.finding for c in launch] + megatron_launch_checks(values, parsed.env, ctx)
        repairs = [Conflict(f, r) for f, r in lm_launch_repairs(values, parsed.env, megatron_flags())]
        conflicts = megatron_conflicts(values, pretrain) + launch + repairs
    else:
        keys = parsed if dialect == "bridge" else flatten_config(parsed)
        key_findings, renames = bridge_key_findings(keys)
        found += key_findings + bridge_launch_checks(keys, ctx)
        conflicts = bridge_conflicts(keys)
    codes = {name: c.finding.code for c in conflicts for name in c.repair}
    renames.update({name: new for c in conflicts for name, new in c.repair.items()})
    if gpu is None:
        found.append(gpu_skipped(ctx))
    findings = sort_findings([_dialect_keys(f, u, dialect) for f in found])
    return _Analysis(dialect, source, parsed, u, model, gpu, world, cfg, ctx, findings, renames, codes)


# --------------------------------------------------------------------------- lint


def _base_fields(u: Understood) -> tuple[dict[str, Any], int | None]:
    """The launch's fields on top of the dialect's defaults (Megatron-LM argparse or Bridge recipe)."""
    base = megatron_defaults() if u.dialect == "megatron-lm" else {}
    fields = {**base, **u.fields}
    layers_per_vstage = fields.pop("_layers_per_virtual_stage", None)
    return fields, layers_per_vstage


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


def _build_config(fields: dict[str, Any], u: Understood, model: ModelSpec, gpu_id: str | None,
                  num_gpus: int) -> TrainingConfig:  # fmt: skip
    data = {k: v for k, v in fields.items() if k in TrainingConfig.model_fields}
    data.update(
        model=model.id, num_gpus=num_gpus, launcher="megatron-lm" if u.dialect == "megatron-lm" else "bridge"
    )
    if gpu_id is not None:
        data["gpu"] = gpu_id
    try:
        return TrainingConfig(**data)
    except ValidationError as exc:  # a value of the launch is out of range or of the wrong type
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first.get("loc") else ""
        written = ", ".join(u.origin.get(name, [])) or name
        value = fields.get(name)
        raise InputError.plain(
            f"{written}={value!r} cannot be used: {first['msg']}"
            if written
            else "the launch sets a value the engine cannot use: " + describe_validation_error(exc)
        ) from None


def lint_config(req: LintConfigRequest) -> LintConfigResult:
    dialect, source = _input_of(req)
    first = _analyse(dialect, source, req.model, req.gpu, req.num_gpus)
    final, fixes, other_text, other = _correct(first, req)
    memory = memory_verdict(final.ctx)
    remaining = sorted(final.error_codes | (other.error_codes if other is not None else set()))
    if memory is not None and memory.fits is False:  # what is handed back does not fit the GPU: not finished
        remaining.append("MEMORY_OVER_BUDGET")
    cfg, ctx = first.cfg, first.ctx
    findings = first.findings + _memory_notes(first, memory)
    effective = {k: v for k, v in cfg.model_dump(mode="json").items() if k not in ("model",)}
    effective["model"] = first.model.id
    # values in effect after the framework's own resolution
    effective.update(vpp=ctx.vpp, etp=ctx.etp, sequence_parallel=ctx.sequence_parallel)
    if first.u.derived:  # flags the launch leaves out and Megatron-LM's validate_args fills in
        effective["derived"] = first.u.derived
    if dialect == "config":
        corrected: Any = final.parsed
    elif dialect == "bridge":
        corrected = render_bridge(final.parsed)
    else:
        corrected = final.parsed.source
    return LintConfigResult(
        valid=not has_errors(first.findings),
        dialect=dialect,
        model=first.model.id,
        num_gpus=first.num_gpus,
        findings=findings,
        effective_config=effective,
        not_checked=lint_not_checked(first.u, first.parsed, dialect, first.model),
        checked=checked(),
        fixes=fixes,
        corrected=corrected,
        corrected_other_dialect=other_text,
        remaining_errors=remaining,
        corrected_memory=memory,
    )


def _memory_notes(first: _Analysis, memory: MemoryVerdict | None) -> list[Finding]:
    """What the memory model says of the launch itself: that it does not fit (as estimate_memory warns), or that
    it could not run without a sequence length."""
    if first.cfg.seq_len is None:
        return [finding("MEMORY_NEEDS_SEQ_LEN", "No sequence length in the launch: memory was not estimated.",
                        "Give the sequence length (--seq-length, model.seq_length) to check the fit.", ["seq_len"])]  # fmt: skip
    if memory is None or memory.fits is not False:
        return []
    return [f for f in memory_findings(first.ctx, memory_model(first.ctx)) if f.code == "MEMORY_OVER_BUDGET"]


def _input_of(req: LintConfigRequest) -> tuple[str, Any]:
    if req.megatron_args is not None:
        return "megatron-lm", req.megatron_args
    if req.bridge_overrides is not None:
        return "bridge", req.bridge_overrides
    return "config", req.config


# --------------------------------------------------------------------------- the round trip


def _correct(first: _Analysis, req: LintConfigRequest) -> tuple[_Analysis, list[AppliedFix], Any, _Analysis]:
    """Repair, write the repairs into the launch, and check the written launch again, until it is clean.

    What is handed back is what was checked last: every rule and the memory model ran on the corrected text
    itself (and on its translation), never on the engine's idea of it.
    """
    current = first
    fixes: list[AppliedFix] = []
    for _ in range(6):
        renames = current.renames
        # A misspelt flag or key means the launch was not read as written: rename first and read it again, so
        # no repair is made to a configuration the user did not write.
        changed: dict[str, Any] = {}
        new_fixes: list[AppliedFix] = []
        if not renames:
            repaired, new_fixes = repair_config(current.ctx)
            changed = {k: getattr(repaired, k) for k in TrainingConfig.model_fields
                       if getattr(repaired, k) != getattr(current.cfg, k)}  # fmt: skip
        requote = current.dialect == "megatron-lm" and bool(current.parsed.bash_breaks)
        if not changed and not renames and not requote:
            break
        fixes += new_fixes
        fixes += [AppliedFix(code=current.rename_codes.get(name) or _rename_code(current.dialect, name),
                             settings={name: new or "removed"})
                  for name, new in renames.items()]  # fmt: skip
        text = _written_launch(current, changed, renames)
        try:
            nxt = _analyse(current.dialect, text, req.model, req.gpu, current.num_gpus)
        except InputError:
            break  # the edit cannot be read back: keep the last launch that can (its errors are reported)
        if _same_launch(nxt, current):
            current = nxt
            break
        current = nxt
        if not current.error_codes:
            break
    other_text, other = _translate(current, req)
    return current, fixes, other_text, other


def _same_launch(a: _Analysis, b: _Analysis) -> bool:
    if a.dialect == "megatron-lm":
        return a.parsed.source == b.parsed.source
    return a.parsed == b.parsed


def _written_launch(a: _Analysis, changed: dict[str, Any], renames: dict[str, str | None]) -> Any:
    if a.dialect == "megatron-lm":
        return edit_megatron(a.parsed, changed, renames)
    if a.dialect == "bridge":
        return render_bridge(edit_bridge(a.parsed, changed, renames))
    return unflatten(edit_bridge(flatten_config(a.parsed), changed, renames))


def _explicit(a: _Analysis) -> set[str]:
    return set(a.u.origin)


def _translate(a: _Analysis, req: LintConfigRequest) -> tuple[Any, _Analysis | None]:
    """The corrected launch in the other dialect, checked as that dialect reads it (none for LoRA: Megatron-LM
    has no LoRA, and a translation that trains every weight is another job that need not fit)."""
    cfg = a.cfg
    if cfg.peft == "lora":
        return None, None
    if a.dialect == "megatron-lm":
        items = bridge_translation(cfg, _explicit(a))
        items = _with_differing_defaults(a, items, req)
        text = render_bridge(items)
        return text, _analyse("bridge", text, _model_ref(a, req), req.gpu, a.num_gpus)
    resolved = resolved_config(a)
    tokens = merge_flags(
        architecture_flags(a.model, cfg.mtp_num_layers, cfg.seq_len), megatron_args_for(resolved)
    )
    text = render_megatron(tokens)
    return text, _analyse("megatron-lm", text, _model_ref(a, req), req.gpu, a.num_gpus)


def _model_ref(a: _Analysis, req: LintConfigRequest) -> Any:
    """How to name the checked model to the other dialect (which may not declare the architecture)."""
    if req.model is not None:
        return req.model
    return a.model.id if a.model.id in model_ids() else a.model


def resolved_config(a: _Analysis) -> TrainingConfig:
    """The configuration with the values the launcher derives by itself written out (ETP, SP, VPP)."""
    ctx = a.ctx
    vpp = ctx.vpp if a.cfg.pipeline_layout is None else a.cfg.vpp
    return TrainingConfig(**{**a.cfg.model_dump(), "etp": ctx.etp, "sequence_parallel": ctx.sequence_parallel,
                             "vpp": vpp})  # fmt: skip


def _with_differing_defaults(a: _Analysis, items: dict[str, Any], req: LintConfigRequest) -> dict[str, Any]:
    """Add the fields the Megatron-LM launch leaves to its defaults where Bridge's recipe default differs and
    the difference changes the run (an error appears or goes, or the memory peak moves)."""
    model = _model_ref(a, req)
    base = _analyse("bridge", render_bridge(items), model, req.gpu, a.num_gpus)
    want, have = resolved_config(a), resolved_config(base)
    base_peak = _peak(base.ctx)
    out = dict(items)

    def given(names: list[str]) -> tuple[bool | None, dict[str, Any]]:
        """The overrides with ``names`` at their Megatron-LM values, and whether that changes the errors or the
        peak (None when the overrides are refused)."""
        trial = dict(out)
        for name in names:
            trial.update(bridge_items(name, getattr(want, name)))
        try:
            t = _analyse("bridge", render_bridge(trial), model, req.gpu, a.num_gpus)
        except InputError:
            return None, trial
        return t.error_codes != base.error_codes or _peak(t.ctx) != base_peak, trial

    differing = [
        n for n in TrainingConfig.model_fields if _is_setting(n) and getattr(want, n) != getattr(have, n)
    ]
    # Fields Bridge leaves unset (None: the recipe's value, not judged) only add checks when given, so one trial
    # with all of them settles every one when it changes nothing; otherwise each is tried alone.
    unset = [n for n in differing if getattr(have, n) is None and n not in _ALWAYS_CARRIED]
    if len(unset) > 1 and given(unset)[0] is False:
        differing = [n for n in differing if n not in unset]
    for name in differing:
        changed, trial = given([name])
        if changed or (changed is not None and name in _ALWAYS_CARRIED):
            out = trial
    return out


# Defaults the launchers resolve differently that change what runs even where no check or the memory model
# sees it: the experts' tensor-parallel layout (Megatron-LM's ETP is TP when not given, Bridge's is 1) and the
# token exchange (Megatron-LM's dispatcher is allgather when not given, Bridge's recipes use alltoall).
_ALWAYS_CARRIED = {"etp", "dispatcher", "mtp_num_layers"}


def _is_setting(name: str) -> bool:
    from ..dialects.tables import dialect_table

    return name in dialect_table()["fields"]


def _peak(ctx: Context) -> float | None:
    try:
        mm = memory_model(ctx)
    except Exception:
        return None
    return round(mm.peak_rank.total / GIB, 2) if mm is not None else None


def _rename_code(dialect: str, name: str) -> str:
    """The rule a rename or removal of a flag (key) repairs."""
    if dialect != "megatron-lm":
        return "BRIDGE_UNKNOWN_KEY"
    return _RENAME_CODES.get(name, "LM_UNKNOWN_FLAG")


_VSTAGE = "--num-layers-per-virtual-pipeline-stage"
_UNEVEN = {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"}
_VPP_GIVEN = {"--num-virtual-stages-per-pipeline-rank", "--pipeline-model-parallel-layout"}
_RENAME_CODES = {
    "--cuda-graph-scope": "LM_CUDA_GRAPH_SCOPE_AND_MODULES",
    _VSTAGE: "LM_LAYERS_PER_VIRTUAL_STAGE",
}


def _unknown_flag_fixes(parsed: ParsedScript) -> dict[str, str | None]:
    """Unknown flags -> their close known spelling (when not already given), or None to drop them; and the
    deprecated --cuda-graph-scope dropped where --cuda-graph-modules is also given (arguments.py:615-618); and
    --num-layers-per-virtual-pipeline-stage dropped beside an uneven split (arguments.py:919-922), which leaves
    the pipeline without interleaving (the VPP degree it meant is not in the launch)."""
    given = {item.flag for item in parsed.items}
    out: dict[str, str | None] = {}
    if {"--cuda-graph-scope", "--cuda-graph-modules"} <= given:
        out["--cuda-graph-scope"] = None
    if (
        _VSTAGE in given and given & _UNEVEN and not given & _VPP_GIVEN
    ):  # arguments.py:919-922: no interleaving
        out[_VSTAGE] = None
    for flag in parsed.unknown:
        close = difflib.get_close_matches(flag, list(megatron_flags()), n=1, cutoff=0.75)
        out[flag] = close[0] if close and close[0] not in given else None
    return out
