"""The reference agent: answers a question by calling the MCP server, and only that.

``moe-lc eval reference-agent`` reads a question on stdin and prints an answer on stdout. With the skill
(``MOE_LC_EVAL_WITH_SKILL=1``, the default) it decides whether the question is about long-context MoE
training; if not, it declines. If so, it reads what the question gives (model, GPU, GPU count, sequence
length, parallel sizes, precision, dispatcher, recompute, CUDA graphs, optimizer offload, a pasted launch
script or override list), picks the tools that answer what is asked, calls them on the MCP server over stdio
(``python -m moe_long_context.server``) with a real ``mcp.Client``, and writes up what they returned: numbers,
layouts, findings with their codes and fixes, overrides. It knows nothing the tools do not say, and it never
reads the eval tasks. Without the skill (``MOE_LC_EVAL_WITH_SKILL=0``) it answers as a tool-less baseline: a
short generic paragraph with the usual rules of thumb.

The tool calls go to ``MOE_LC_EVAL_TRANSCRIPT`` (when set) as ``{"tool_calls": [...], "used_skill": ...}``.
This module is a face: the MCP SDK is imported only when a session is opened.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

SKILL_ENV = "MOE_LC_EVAL_WITH_SKILL"
TRANSCRIPT_ENV = "MOE_LC_EVAL_TRANSCRIPT"
SKILL = "nemo-mbridge-perf-moe-long-context"
URI = "moe-lc://"


class ToolFailed(Exception):
    """The server answered a tool call with an error (isError)."""


CallFn = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
ReadFn = Callable[[str], Awaitable[str]]


@dataclass
class Session:
    """Tool calls and resource reads through one MCP client session, with the calls recorded.

    ``tool_fields`` holds each tool's argument names from the server's tool list: a call sends only the
    facts the tool takes."""

    call_tool: CallFn
    read_resource: ReadFn
    tool_fields: dict[str, set[str]]
    calls: list[dict[str, Any]] = field(default_factory=list)

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        accepted = self.tool_fields[name]
        arguments = {k: v for k, v in arguments.items() if k in accepted and v is not None}
        self.calls.append({"name": name, "arguments": arguments})
        return await self.call_tool(name, arguments)

    async def read_json(self, uri: str) -> Any:
        return json.loads(await self.read_resource(uri))


# --------------------------------------------------------------------------- reading the question

NEGATIVE = re.compile(
    r"\b(?:vllm|tensorrt[- ]llm|sglang|serv(?:e|ing)|inference|quantiz\w*|awq|gptq|deepspeed|zero-3|fsdp|"
    r"jax|maxtext|tpu|peft|lora|hugging\s*face|transformers\b|pip\s+install|docker|bert)\b",
    re.I,
)
DENSE = re.compile(r"\bdense\b|\bno\s+MoE\b", re.I)
MOE = re.compile(r"\bMoE\b|mixture[- ]of[- ]experts|\bexperts?\b", re.I)
TRAINING = re.compile(
    r"\b(?:train\w*|pretrain\w*|fine-?tun\w*|SFT|megatron|bridge|launch|layout|recompute|pipeline|parallel\w*|"
    r"global\s+batch|dispatcher|cuda\s+graphs?|cp_comm_type|CP)\b|--[a-z]|\b(?:TP|CP|EP|PP)\s*=",
    re.I,
)

GPU = re.compile(r"(?<![\w-])(GB300|GB200|B300|B200|H200|H100)(?![\w-])", re.I)
NODES = re.compile(r"(\d+)\s+nodes?\s+(?:of|x|×)\s+(\d+)", re.I)
COUNT = re.compile(
    r"(?<![\w.])(\d{1,5})\s*(?:x\s*)?(?:GB300|GB200|B300|B200|H200|H100)(?:\s*\(NVL72\))?(?:\s+GPUs?)?"
    r"|(?<![\w.])(\d{1,5})\s+GPUs?\b(?!\s+per)",
    re.I,
)
TOKENS = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d{3,8})(?:-|\s*)tokens?\b", re.I)
KTOKENS = re.compile(r"(?<![\w.])(\d{1,4})K\b")
DIM = re.compile(r"(?<![\w-])(TP|CP|PP|VPP|EP|ETP)\s*=\s*(\d+)")
GBS = re.compile(r"global[- ]batch(?:[- ]size)?\s*(?:of\s*)?(\d+)|\bGBS\s*=?\s*(\d+)", re.I)
MBS = re.compile(r"micro[- ]batch(?:[- ]size)?\s*(?:of\s*)?(\d+)|\bMBS\s*=?\s*(\d+)", re.I)
HIERARCHY = re.compile(r"\[(\d+),\s*(\d+)\]")
LABEL_SEP = re.compile(r"[\s,`()\[\]'\"]+|\band\b")
FENCED = re.compile(r"```[\w-]*\n(.*?)```", re.S)
INFORMAL_LABELS = ("up_proj", "norm")
GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")


@dataclass
class Facts:
    """What the question gives, as engine fields (only what it states)."""

    model: str | None = None
    gpu: str | None = None
    num_gpus: int | None = None
    seq_len: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    config_text: str | None = None  # a pasted launch script, override list or config object
    labels_mentioned: list[str] = field(default_factory=list)

    @property
    def layout_given(self) -> bool:
        return sum(k in self.fields for k in ("tp", "cp", "pp", "ep")) >= 3

    def request(self, *drop: str) -> dict[str, Any]:
        """Arguments for a config-taking tool: model, GPU, world, sequence and every stated field."""
        out: dict[str, Any] = {"model": self.model}
        for key in ("gpu", "num_gpus", "seq_len"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out.update(self.fields)
        return {k: v for k, v in out.items() if k not in drop}


@dataclass
class Catalog:
    models: list[dict[str, Any]]
    labels: list[str]  # recompute labels Megatron Core accepts (from the rule table)

    def find_model(self, text: str) -> str | None:
        names = []
        for spec in self.models:
            for name in (spec["id"], spec["name"], *spec.get("aliases", [])):
                if "/" not in name:
                    names.append((name, spec["id"]))
        for name, model_id in sorted(names, key=lambda n: -len(n[0])):
            if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text, re.I):
                return model_id
        return None


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _labels_after(text: str, start: int, vocabulary: set[str]) -> list[str]:
    """Recompute labels listed right after a position (separated by spaces, commas, 'and', backticks)."""
    out: list[str] = []
    for token in LABEL_SEP.split(text[start : start + 120]):
        if not token:
            continue
        if token.lower() in vocabulary:
            out.append(token.lower())
        elif out or token.lower() not in ("of", "modules", "with", "selective"):
            break
    return out


def parse(question: str, catalog: Catalog) -> Facts:
    facts = Facts()
    fenced = FENCED.search(question)
    if fenced:
        facts.config_text = fenced.group(1).strip()
    prose = FENCED.sub(" ", question)
    facts.model = catalog.find_model(question)
    if m := GPU.search(prose):
        facts.gpu = m.group(1).lower()
    if m := NODES.search(prose):
        facts.num_gpus = int(m.group(1)) * int(m.group(2))
    elif m := COUNT.search(prose):
        facts.num_gpus = int(m.group(1) or m.group(2))
    lengths = [_int(m.group(1)) for m in TOKENS.finditer(prose)]
    lengths += [int(m.group(1)) * 1024 for m in KTOKENS.finditer(prose)]
    if lengths:
        facts.seq_len = max(lengths)
    f = facts.fields
    for m in DIM.finditer(prose):
        if not re.search(r"[x×*]\s*$", prose[: m.start()]):  # 'PP x VPP = 48' is a product, not a size
            f[m.group(1).lower()] = int(m.group(2))
    if m := GBS.search(prose):
        f["gbs"] = int(m.group(1) or m.group(2))
    if m := MBS.search(prose):
        f["mbs"] = int(m.group(1) or m.group(2))
    _parse_settings(prose, f, catalog, facts)
    return facts


def _parse_settings(q: str, f: dict[str, Any], catalog: Catalog, facts: Facts) -> None:
    low = q.lower()
    # pipeline split
    if m := re.search(r"layout\s+'([^']+)'|pipeline[- ]layout\s+'([^']+)'", q):
        f["pipeline_layout"] = m.group(1) or m.group(2)
    if re.search(r"account[-_ ]for[-_ ]embedding", low):
        f["account_for_embedding_in_pipeline_split"] = True
    if re.search(r"account[-_ ]for[-_ ]loss", low):
        f["account_for_loss_in_pipeline_split"] = True
    if re.search(r"sequence[- ]parallel", low):
        f["sequence_parallel"] = True
    # precision
    if "mxfp8" in low:
        f["precision"] = "mxfp8"
    elif re.search(r"fp8[^.\n]{0,20}blockwise|blockwise[^.\n]{0,10}fp8", low):
        f["precision"] = "fp8-blockwise"
    elif re.search(r"fp8[^.\n]{0,20}delayed|delayed\s+scaling", low):
        f["precision"] = "fp8-delayed"
    elif re.search(r"fp8[^.\n]{0,20}(?:tensorwise|current)", low):
        f["precision"] = "fp8-tensorwise"
    elif re.search(r"\bbf16\b(?!\s+grad)", low):
        f["precision"] = "bf16"
    # dispatcher
    if re.search(r"hybrid[-_ ]?ep", low):
        f["dispatcher"] = "flex-hybridep"
    elif re.search(r"deep[-_ ]?ep", low):
        f["dispatcher"] = "flex-deepep"
    elif re.search(r"\balltoall\b", low):
        f["dispatcher"] = "alltoall"
    # context parallel comm type
    if m := re.search(r"cp[-_ ]comm[-_ ]type\s*=?\s*(a2a\+p2p|a2a|p2p|all_gather)", low):
        f["cp_comm_type"] = m.group(1)
        if m.group(1) == "a2a+p2p" and (h := HIERARCHY.search(q[m.end() : m.end() + 120])):
            f["hierarchical_cp_sizes"] = [int(h.group(1)), int(h.group(2))]
    # recompute
    vocabulary = {*catalog.labels, *INFORMAL_LABELS}
    facts.labels_mentioned = [
        label for label in sorted(vocabulary) if re.search(rf"(?<![\w-]){label}(?![\w-])", q)
    ]
    if re.search(r"\bfull\s+(?:activation\s+)?recompute", low):
        f["recompute_granularity"] = "full"
        f["recompute_method"] = "block" if "block" in low else "uniform"
        m = re.search(r"(\d+)\s+layers?\s+per\s+group|recompute[-_ ]num[-_ ]layers\s*=?\s*(\d+)", low)
        f["recompute_num_layers"] = int(m.group(1) or m.group(2)) if m else 1
    else:
        for m in re.finditer(r"--recompute-modules|recompute(?:\s+list)?", q):
            labels = _labels_after(q, m.end(), vocabulary)
            if labels:
                f["recompute_granularity"] = "selective"
                f["recompute_modules"] = labels
                break
    # CUDA graphs
    if re.search(r"cuda[-_ ]graphs?|\bgraphs\b", low):
        impl = re.search(
            r"(?:cuda[-_]graph[-_]impl\s*=?\s*|\b)(transformer_engine|full_iteration|local)\b", low
        )
        if impl:
            f["cuda_graph_impl"] = impl.group(1)
        elif re.search(r"\bTE\s+(?:CUDA\s+)?graphs", q):
            f["cuda_graph_impl"] = "transformer_engine"
        mods = re.search(
            r"(?:cuda[-_]graph[-_](?:modules|scope)\s*=?\s*\[?|graphs?\s+on\s+)((?:(?:attn|mlp|moe_router|moe_preprocess|"
            r"moe|mamba)[\s,\]`]*(?:and\s+)?)+)",
            low,
        )
        if mods:
            f["cuda_graph_modules"] = [m for m in re.findall(r"[a-z_]+", mods.group(1)) if m in GRAPH_MODULES]
    if "expandable_segments:true" in low:
        f["expandable_segments"] = True
    if re.search(r"packed\s+sequences|\bTHD\b", q):
        f["packed_sequences"] = True
    # optimizer
    if re.search(r"without\s+--use-precision-aware-optimizer", low):
        f["use_precision_aware_optimizer"] = False
    elif re.search(r"precision[-_ ]aware[-_ ]optimizer", low):
        f["use_precision_aware_optimizer"] = True
    if re.search(r"--use-distributed-optimizer|distributed\s+(?:and\s+\S+\s+)?optimizer", low):
        f["use_distributed_optimizer"] = True
    if re.search(r"no\s+optimizer\s+offload", low):
        f["optimizer_cpu_offload_fraction"] = 0.0
    elif m := re.search(r"(\d+)%\s+optimizer\s+cpu\s+offload", low):
        f["optimizer_cpu_offload_fraction"] = int(m.group(1)) / 100
    elif "--optimizer-cpu-offload" in low:
        f["optimizer_cpu_offload_fraction"] = 1.0
    if "--fp8-param-gather" in low:
        f["fp8_param_gather"] = True
    if re.search(r"grad_reduce_in_fp32\s+off|bf16\s+gradients", low):
        f["grad_reduce_in_fp32"] = False
    if re.search(r"te\s+cross[- ]entropy", low):
        f["cross_entropy_fusion"] = "te"
    if re.search(r"megatron-lm|pretrain_gpt", low):
        f["launcher"] = "megatron-lm"


def applies(question: str, facts: Facts) -> tuple[bool, str]:
    """Whether the skill applies: long-context MoE training on Megatron (not serving, not other frameworks)."""
    if m := NEGATIVE.search(FENCED.sub(" ", question)):
        return (
            False,
            f"the question is about '{m.group(0)}' (serving, another framework or tooling), not Megatron training",
        )
    if DENSE.search(question) and not facts.model:
        return False, "it is about a dense model, not a Mixture-of-Experts model"
    if not (facts.model or MOE.search(question)):
        return False, "it names no Mixture-of-Experts model"
    if not TRAINING.search(question):
        return False, "it is not about training"
    return True, ""


# --------------------------------------------------------------------------- writing up


def _fmt(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def findings_lines(findings: list[dict[str, Any]], severities=("error", "warning", "info")) -> list[str]:
    out = []
    for f in findings:
        if f["severity"] not in severities:
            continue
        keys = f" (on {', '.join(f'`{k}`' for k in f['keys'])})" if f.get("keys") else ""
        fix = f" Fix: {f['fix']}" if f.get("fix") else ""
        out.append(f"- {f['severity']} **{f['code']}**{keys}: {f['message']}{fix}")
    return out


def _settings_text(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in settings.items())


def write_size_cp(r: dict[str, Any]) -> list[str]:
    lines = [
        f"- CP = {r['cp']}, cp_comm_type: {r['cp_comm_type'] or 'none (CP = 1)'}"
        + (
            f", hierarchical_cp_sizes {_fmt(r['hierarchical_cp_sizes'])}"
            if r["hierarchical_cp_sizes"]
            else ""
        ),
        f"- {r['tokens_per_rank']} tokens per CP rank; {r['tokens_per_shard']} tokens per TP x CP shard "
        f"(TP = {r['tp']}); target {r['target_tokens_per_shard']} tokens per shard",
        f"- How it was chosen: {r['reason']}",
    ]
    lines += [f"- Ruled out: {c}" for c in r["constraints"]]
    for alt in r["alternatives"]:
        comm = alt["cp_comm_type"] or "no CP"
        if alt["hierarchical_cp_sizes"]:
            comm += f" {_fmt(alt['hierarchical_cp_sizes'])}"
        lines.append(
            f"- Alternative: TP={alt['tp']} with CP={alt['cp']} ({comm}, {alt['tokens_per_shard']} tokens per "
            f"shard): {alt['why']}"
        )
    return lines + findings_lines(r["findings"])


def write_budget(r: dict[str, Any]) -> list[str]:
    verdict = "Megatron accepts it" if r["valid"] else "Megatron refuses it (see the errors)"
    lines = [
        f"- Layout {r['layout']}: {verdict}.",
        f"- DP = {_fmt(r['dp'])}, EDP = {_fmt(r['edp'])}, ETP = {r['etp']}, min_gpus = {r['min_gpus']} "
        "(PP x max(TP x CP, EP x ETP)), "
        f"num_microbatches = {_fmt(r['num_microbatches'])} (GBS {_fmt(r['gbs'])})",
    ]
    p = r["pipeline"]
    if p["method"]:
        lines.append(
            f"- Pipeline split ({p['method']}): decoder layers per PP rank {_fmt(p['decoders_per_rank'])}, "
            f"layout string {p['layout_string']}"
        )
    lines += findings_lines(r["findings"])
    for alt in r["alternatives"]:
        lines.append(
            f"- Nearest accepted: {alt['layout']} with {_settings_text(alt['settings'])} ({alt['why']})"
        )
    return lines


def write_memory(r: dict[str, Any]) -> list[str]:
    if r["peak_gib"] is None:
        return ["- Memory not estimated (the configuration has errors).", *findings_lines(r["findings"])]
    if r["fits"]:
        verdict = f"fits, with {r['headroom_gib']} GiB headroom"
    elif r["fits"] is False:
        verdict = f"does not fit: {-r['headroom_gib']:.3f} GiB over"
    else:
        verdict = "fit not checked (no GPU)"
    lines = [
        f"- Peak {r['peak_gib']} GiB on PP rank {r['peak_pp_rank']}, against {r['usable_gib']} GiB usable: {verdict}."
    ]
    for stage in r["breakdown"]:
        if stage["pp_rank"] == r["peak_pp_rank"]:
            parts = ", ".join(f"{c['component']} {c['gib']}" for c in stage["components"] if c["gib"])
            lines.append(f"- PP rank {stage['pp_rank']} ({stage['role']}) in GiB: {parts}")
    return lines + findings_lines(r["findings"])


def write_pick(r: dict[str, Any]) -> list[str]:
    if r["recompute_granularity"] == "selective":
        choice = f"selective recompute, recompute_modules {_fmt(r['recompute_modules'])}"
    elif r["recompute_granularity"] == "full":
        choice = f"full recompute ({r['recompute_method']}, {r['recompute_num_layers']} layer per group)"
    else:
        choice = "no recompute needed"
    lines = [f"- Choice: {choice}; fits: {_fmt(r['fits'])}."]
    for g in r["gains"]:
        lines.append(f"- Adding {g['label']} saves {g['gib_saved']} GiB (peak then {g['peak_gib']} GiB)")
    lines.append(
        f"- Peak before: {r['peak_gib_before']} GiB; after: {r['peak_gib_after']} GiB; usable {r['usable_gib']} GiB"
    )
    if r["other_settings"]:
        lines.append(f"- Also set: {_settings_text(r['other_settings'])}")
    if r["bridge_overrides"]:
        lines.append("- Bridge overrides: " + " ".join(f"`{o}`" for o in r["bridge_overrides"]))
        lines.append("- Megatron-LM flags: " + " ".join(f"`{o}`" for o in r["megatron_lm_flags"]))
    for step in r["next_steps"]:
        lines.append(
            f"- Next step: {step['action']} ({_settings_text(step['settings'])}): saves {step['gib_saved']} GiB, "
            f"peak {step['peak_gib']} GiB, fits: {_fmt(step['fits'])}. {step['note']}"
        )
    return lines + findings_lines(r["findings"])


def write_graphs(r: dict[str, Any]) -> list[str]:
    verdict = "can capture" if r["valid"] else "cannot capture (see the errors)"
    lines = [
        f"- cuda_graph_impl {r['cuda_graph_impl']} with cuda_graph_modules {_fmt(r['cuda_graph_modules'])}: {verdict}."
    ]
    for t in r["captured_shapes"]:
        lines.append(f"- Captured: {t['name']} of shape {_fmt(t['shape'])} ({t['dtype']}): {t['note']}")
    if r["microbatches_captured"] is not None:
        lines.append(f"- {r['microbatches_captured']} microbatches captured per layer and model chunk")
    lines += [f"- Must stay fixed: {s}" for s in r["static_requirements"]]
    return lines + findings_lines(r["findings"])


def write_lint(r: dict[str, Any]) -> list[str]:
    errors = [f for f in r["findings"] if f["severity"] == "error"]
    lines = [
        f"- Model {r['model']}, {r['num_gpus']} GPUs, {r['dialect']} dialect: "
        + (f"{len(errors)} errors Megatron would refuse:" if errors else "no errors; Megatron accepts it.")
    ]
    lines += findings_lines(errors)
    rest = [f for f in r["findings"] if f["severity"] != "error"]
    if rest:
        lines.append("- Not errors (warnings and notes the engine reports):")
        lines += ["  " + line for line in findings_lines(rest)]
    if r["not_checked"]:
        lines.append(
            "- Not checked (the engine does not model them): " + ", ".join(f"`{n}`" for n in r["not_checked"])
        )
    if r["fixes"]:
        lines.append(
            "- Repairs: " + "; ".join(f"{x['code']}: {_settings_text(x['settings'])}" for x in r["fixes"])
        )
    corrected = r["corrected"]
    text = (
        corrected
        if isinstance(corrected, str)
        else ("\n".join(corrected) if isinstance(corrected, list) else json.dumps(corrected, indent=1))
    )
    lines += ["", "Corrected configuration:", "```", text, "```"]
    return lines


def write_plan(r: dict[str, Any]) -> list[str]:
    lines = [
        f"- {r['candidates']} candidate layouts, {r['evaluated']} evaluated in full, {r['feasible']} feasible."
    ]
    for p in r["plans"]:
        s = p["settings"]
        if s.get("recompute_granularity") == "selective":
            recompute = "selective " + _fmt(s.get("recompute_modules"))
        elif s.get("recompute_granularity") == "full":
            recompute = f"full {s.get('recompute_method')} x{s.get('recompute_num_layers')}"
        else:
            recompute = "none"
        split = {k: s[k] for k in s if k in SPLIT_KEYS}
        comm = s.get("cp_comm_type") or "none"
        if s.get("hierarchical_cp_sizes"):
            comm += f", hierarchical_cp_sizes {_fmt(s['hierarchical_cp_sizes'])}"
        lines.append(
            f"- Plan #{p['rank']}: {p['layout']}, GBS {s.get('gbs')}, MBS {s.get('mbs', 1)}, cp_comm_type {comm}, "
            f"recompute {recompute}, optimizer CPU offload {s.get('optimizer_cpu_offload_fraction', 0):.0%}, "
            f"dispatcher {s.get('dispatcher')}, precision {s.get('precision')}, peak {p['memory']['peak_gib']} GiB "
            f"of {p['memory']['usable_gib']} GiB, {p['throughput']['tflops_per_gpu']} TFLOP/s per GPU"
            + (f", pipeline split {_settings_text(split)}" if split else "")
        )
        lines += [f"  - {why}" for why in p["why"]]
    if r["plans"]:
        top = r["plans"][0]
        lines += ["", "Megatron Bridge overrides for plan #1:", "```", *top["bridge_overrides"], "```"]
        lines += ["Megatron-LM flags for plan #1:", "```", shlex.join(top["megatron_args"]), "```"]
    return lines + findings_lines(r["findings"])


SPLIT_KEYS = (
    "pipeline_layout",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
)
WRITERS = {
    "size_cp": write_size_cp,
    "check_dp_budget": write_budget,
    "estimate_memory": write_memory,
    "pick_recompute": write_pick,
    "validate_cuda_graph_shapes": write_graphs,
    "lint_config": write_lint,
    "plan_layout": write_plan,
}


def _describe(arguments: dict[str, Any]) -> str:
    shown = {k: v for k, v in arguments.items() if k not in ("megatron_args", "bridge_overrides", "config")}
    return ", ".join(f"{k}={_fmt(v)}" for k, v in shown.items())


# --------------------------------------------------------------------------- answering


@dataclass
class Report:
    sections: list[tuple[str, list[str]]] = field(default_factory=list)

    def add(self, title: str, lines: list[str]) -> None:
        self.sections.append((title, lines))

    def text(self, summary: list[str]) -> str:
        out = [*summary, ""]
        for title, lines in self.sections:
            out += [f"### {title}", *lines, ""]
        return "\n".join(out).rstrip() + "\n"


async def _run(
    session: Session, report: Report, tool: str, arguments: dict[str, Any], title: str = ""
) -> dict | None:
    try:
        result = await session.call(tool, arguments)
    except ToolFailed as exc:
        report.add(f"{tool}: refused", [f"- The server refused the call: {exc}"])
        return None
    report.add(f"{tool} ({title or _describe(arguments)})", WRITERS[tool](result))
    return result


ASKS_PLAN = re.compile(r"\bplan\b|from\s+scratch|which\s+parallel\s+layout|what\s+layout", re.I)
ASKS_MEMORY = re.compile(r"\bmemory\b|\bGiB\b|\bpeak\b|\bfit\b", re.I)
ASKS_SAVING = re.compile(r"\bsav(?:e|es|ing)\b", re.I)
ASKS_PICK = re.compile(
    r"which\s+(?:selective\s+)?recompute|recompute\s+would|recompute\s+modules\s+should", re.I
)
ASKS_BUDGET = re.compile(
    r"\bDP\b|\bEDP\b|data[- ]parallel|micro-?batch(?:es)?\s+per|minimum|smallest|expert-parallel\s+sizes|"
    r"global\s+batch\s+that|how\s+(?:do\s+we\s+|to\s+)?split|which\s+(?:pipeline\s+)?split|layout\s+valid",
    re.I,
)
ASKS_CP = re.compile(r"\bCP\b|context[- ]parallel|cp_comm_type", re.I)
ASKS_LABELS = re.compile(r"labels?\s+does|which\s+[-\w]*\s*labels|real\s+labels", re.I)
ASKS_SCOPE = re.compile(r"cuda[-_]graph[-_]scope", re.I)


def _megatron_args(facts: Facts, graph_flag: str) -> str:
    """A minimal Megatron-LM argument list from what the question states (to check flag names)."""
    f = facts.fields
    names = {"tp": "--tensor-model-parallel-size", "cp": "--context-parallel-size", "pp": "--pipeline-model-parallel-size",
             "ep": "--expert-model-parallel-size", "mbs": "--micro-batch-size", "gbs": "--global-batch-size"}  # fmt: skip
    tokens = [f"{flag} {f[key]}" for key, flag in names.items() if key in f]
    if f.get("sequence_parallel") or f.get("tp", 1) > 1:
        tokens.append("--sequence-parallel")
    if facts.seq_len:
        tokens.append(f"--seq-length {facts.seq_len}")
    if f.get("cuda_graph_impl"):
        tokens.append(f"--cuda-graph-impl {f['cuda_graph_impl']}")
    if f.get("cuda_graph_modules"):
        tokens.append(f"{graph_flag} {' '.join(f['cuda_graph_modules'])}")
    return " ".join(tokens)


def _lint_arguments(facts: Facts) -> dict[str, Any]:
    text = facts.config_text or ""
    if re.search(r"(?m)(?:^|\s)--[a-z]", text):
        args: dict[str, Any] = {"megatron_args": text}
        if "--num-layers" not in text and facts.model:
            args["model"] = facts.model
    elif re.search(r"(?m)^\s*[\w.]+=", text):
        args = {"bridge_overrides": [line.strip() for line in text.splitlines() if line.strip()]}
        args["model"] = facts.model
    else:
        args = {"config": text, "model": facts.model}
    if facts.gpu:
        args["gpu"] = facts.gpu
    if facts.num_gpus and "megatron_args" not in args:
        args["num_gpus"] = facts.num_gpus
    return {k: v for k, v in args.items() if v is not None}


async def answer_with_skill(question: str, session: Session) -> tuple[str, bool]:
    """(answer, used_skill): decline questions the skill does not cover, else answer from the tools."""
    models = await session.read_json(f"{URI}catalog/models")
    rules = await session.read_json(f"{URI}rules")
    labels_rule = next(r for r in rules if r["code"] == "RECOMPUTE_UNKNOWN_MODULE")
    labels = re.findall(r"[a-z][a-z_]+", labels_rule["title"].split("(", 1)[1])
    catalog = Catalog(models, labels)
    facts = parse(question, catalog)
    ok, why = applies(question, facts)
    if not ok:
        return decline(why), False
    report = Report()
    summary: list[str] = []
    if facts.config_text:
        r = await _run(session, report, "lint_config", _lint_arguments(facts), "the configuration as pasted")
        if r:
            errors = list(dict.fromkeys(f["code"] for f in r["findings"] if f["severity"] == "error"))
            summary.append(
                f"lint_config reports {len(errors)} errors Megatron would refuse: {', '.join(errors)}."
                if errors
                else "lint_config reports no error: Megatron accepts this configuration."
            )
        return _compose(summary, report), True
    if facts.model is None:
        return decline("it names no catalog model the tools can check"), False
    if (
        ASKS_PLAN.search(question)
        and not facts.layout_given
        and facts.gpu
        and facts.num_gpus
        and facts.seq_len
    ):
        args = {
            "model": facts.model,
            "gpu": facts.gpu,
            "num_gpus": facts.num_gpus,
            "seq_len": facts.seq_len,
            "top_n": 3,
        }
        if "gbs" in facts.fields:
            args["gbs"] = facts.fields["gbs"]
        r = await _run(session, report, "plan_layout", args)
        if r and r["plans"]:
            summary.append(f"Recommended layout (plan_layout #1): {r['plans'][0]['layout']}.")
        return _compose(summary, report), True
    if not facts.layout_given and ASKS_CP.search(question) and facts.seq_len:
        args = {"model": facts.model, "seq_len": facts.seq_len}
        if facts.gpu:
            args["gpu"] = facts.gpu
        r = await _run(session, report, "size_cp", args)
        if r:
            summary.append(
                f"Use CP = {r['cp']} with cp_comm_type {r['cp_comm_type']}: {r['tokens_per_rank']} tokens per CP rank."
            )
    if ASKS_LABELS.search(question):
        summary.append(
            f"Megatron Core 0.19 accepts these recompute labels: {', '.join(labels)} ({labels_rule['source']})."
        )
        informal = [label for label in facts.labels_mentioned if label not in labels]
        if informal and facts.layout_given:
            args = {**facts.request(), "recompute_granularity": "selective", "recompute_modules": informal}
            await _run(session, report, "estimate_memory", args, f"the labels {', '.join(informal)}")
    elif facts.layout_given:
        await _answer_config(question, facts, session, report, summary)
    if ASKS_SCOPE.search(question) and facts.layout_given:
        await _run(session, report, "lint_config", {"megatron_args": _megatron_args(facts, "--cuda-graph-scope"),
                   "model": facts.model, "gpu": facts.gpu, "num_gpus": facts.num_gpus},
                   "the same launch written with --cuda-graph-scope")  # fmt: skip
    if not report.sections and not summary:
        return decline("the question gives nothing the tools can check"), False
    return _compose(summary, report), True


async def _answer_config(
    question: str, facts: Facts, session: Session, report: Report, summary: list[str]
) -> None:
    f = facts.fields
    checked = False
    if "cuda_graph_impl" in f or "cuda_graph_modules" in f:
        r = await _run(session, report, "validate_cuda_graph_shapes", facts.request())
        checked = r is not None
        if r:
            summary.append(_verdict(r, "This CUDA-graph setting"))
    if ASKS_PICK.search(question):
        args = facts.request(
            "recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers"
        )
        r = await _run(session, report, "pick_recompute", args, "the configuration without recompute")
        if r:
            summary.append(
                f"pick_recompute: {r['recompute_granularity'] or 'no'} recompute {_fmt(r['recompute_modules'])}, "
                f"peak {r['peak_gib_before']} -> {r['peak_gib_after']} GiB."
            )
    if ASKS_SAVING.search(question) and "optimizer_cpu_offload_fraction" not in f:
        without = await _run(session, report, "estimate_memory", {**facts.request(), "optimizer_cpu_offload_fraction": 0.0},
                             "without optimizer offload")  # fmt: skip
        with_ = await _run(session, report, "estimate_memory", {**facts.request(), "optimizer_cpu_offload_fraction": 1.0,
                           "use_precision_aware_optimizer": True}, "with 100% optimizer CPU offload")  # fmt: skip
        if without and with_ and without["peak_gib"] is not None and with_["peak_gib"] is not None:
            saved = round(without["peak_gib"] - with_["peak_gib"], 3)
            summary.append(
                f"Offloading 100% of the optimizer state saves {saved} GiB per GPU: the peak goes from "
                f"{without['peak_gib']} GiB to {with_['peak_gib']} GiB."
            )
        return
    budget = bool(ASKS_BUDGET.search(question))
    if budget:
        await _budget(facts, session, report, summary)
    if not (checked or budget) or ASKS_MEMORY.search(question):
        r = await _run(session, report, "estimate_memory", facts.request())
        if r:
            summary.append(_verdict(r, "This configuration"))


async def _budget(facts: Facts, session: Session, report: Report, summary: list[str]) -> None:
    args = {k: v for k, v in facts.request().items() if k in session.tool_fields["check_dp_budget"]}
    r = await _run(session, report, "check_dp_budget", args)
    if not r:
        return
    summary.append(_verdict(r, f"Layout {r['layout']}"))
    if not r["valid"] and r["alternatives"]:
        alt = r["alternatives"][0]
        fixed = {k: v for k, v in args.items() if not (k in SPLIT_KEYS and k not in alt["settings"])}
        fixed.update({k: v for k, v in alt["settings"].items() if v is not None})
        for k, v in alt["settings"].items():
            if v is None:
                fixed.pop(k, None)
        r2 = await _run(
            session,
            report,
            "check_dp_budget",
            fixed,
            f"with the first fix: {_settings_text(alt['settings'])}",
        )
        if r2 and r2["valid"]:
            summary.append(f"With {_settings_text(alt['settings'])} it is accepted: {r2['layout']}.")


def _verdict(r: dict[str, Any], what: str) -> str:
    errors = list(dict.fromkeys(f["code"] for f in r["findings"] if f["severity"] == "error"))
    if errors:
        return f"{what} is refused by Megatron: {', '.join(errors)} (details and fixes below)."
    if r.get("fits") is False:
        return f"{what} passes every rule but does not fit in GPU memory (peak {r.get('peak_gib')} GiB)."
    if r.get("fits"):
        return f"{what} passes every rule and fits (peak {r.get('peak_gib')} GiB)."
    return f"{what} passes every rule the engine checks."


def _compose(summary: list[str], report: Report) -> str:
    head = [f"Answer from the {SKILL} tools (MCP server, Megatron Core 0.19 / Bridge 0.6 rules):", *summary]
    return report.text(head)


def decline(why: str) -> str:
    return (
        f"The {SKILL} skill does not apply here: {why}. It plans long-context Mixture-of-Experts training on "
        "Megatron Bridge / Megatron Core, so I have not used it; this question needs other guidance.\n"
    )


# --------------------------------------------------------------------------- without the skill


def answer_without_skill(question: str) -> str:
    """A tool-less baseline: the usual rules of thumb, with the arithmetic anyone would do by hand. Questions
    that are not about MoE training get a note that this general advice does not apply."""
    known_moe = re.search(r"deepseek|qwen3|kimi|gpt-oss|mixtral|moonlight", question, re.I)
    ok, why = applies(question, Facts(model=known_moe.group(0) if known_moe else None))
    if not ok:
        return f"General long-context MoE training advice does not apply here: {why}.\n"
    lengths = [_int(m.group(1)) for m in TOKENS.finditer(question)]
    lengths += [int(m.group(1)) * 1024 for m in KTOKENS.finditer(question)]
    lines = [
        "General guidance (no tools used):",
        "- Context parallelism splits the sequence; a common starting point is CP = seq_len / 4096 rounded to a power "
        "of two, with the p2p ring across nodes.",
        "- Keep tensor parallelism inside a node, use expert parallelism for the experts, and check that the parallel "
        "sizes divide the number of GPUs.",
        "- Prefer selective activation recompute to full recompute at long context; use optimizer CPU offload when "
        "memory is tight; validate CUDA graphs with fixed sequence length and micro batch size.",
    ]
    if lengths:
        seq = max(lengths)
        cp = 1
        while cp * 4096 < seq:
            cp *= 2
        lines.append(f"- For {seq} tokens that rule gives CP = {cp}, about {seq // cp} tokens per rank.")
    dims = dict((k.lower(), int(v)) for k, v in DIM.findall(question))
    counts = [int(m.group(1) or m.group(2)) for m in COUNT.finditer(question)]
    if dims and counts:
        model = dims.get("tp", 1) * dims.get("cp", 1) * dims.get("pp", 1)
        if model and counts[0] % model == 0:
            lines.append(f"- DP = GPUs / (TP x CP x PP) = {counts[0] // model}.")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the MCP client


def server_command() -> tuple[str, list[str]]:
    return sys.executable, ["-m", "moe_long_context.server"]


async def _with_stdio_session(work: Callable[[Session], Awaitable[Any]]) -> Any:
    from mcp import Client, StdioServerParameters

    command, args = server_command()
    params = StdioServerParameters(command=command, args=args)
    async with Client(params, mode="legacy") as client:

        async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, arguments)
            if result.is_error:
                raise ToolFailed(result.content[0].text if result.content else "tool error")
            return result.structured_content

        async def read_resource(uri: str) -> str:
            result = await client.read_resource(uri)
            return result.contents[0].text

        return await work(await open_session(client.list_tools, call_tool, read_resource))


async def open_session(list_tools, call_tool: CallFn, read_resource: ReadFn) -> Session:
    """A Session whose tools and their arguments come from the server's tool list."""
    tools = (await list_tools()).tools
    fields = {t.name: set((t.input_schema or {}).get("properties", {})) for t in tools}
    return Session(call_tool, read_resource, fields)


async def answer_over_stdio(question: str) -> tuple[str, list[dict[str, Any]], bool]:
    async def work(session: Session):
        text, used = await answer_with_skill(question, session)
        return text, session.calls, used

    return await _with_stdio_session(work)


def run(question: str, with_skill: bool) -> dict[str, Any]:
    """The answer and the transcript for one question."""
    started = time.monotonic()
    if with_skill:
        import anyio

        text, calls, used = anyio.run(answer_over_stdio, question)
    else:
        text, calls, used = answer_without_skill(question), [], False
    return {
        "answer": text,
        "tool_calls": calls,
        "used_skill": used,
        "agent": "moe-lc eval reference-agent",
        "duration_ms": round((time.monotonic() - started) * 1000),
    }


def main(stdin=None, stdout=None, env=None) -> int:
    stdin, stdout, env = stdin or sys.stdin, stdout or sys.stdout, env if env is not None else os.environ
    question = stdin.read()
    if not question.strip():
        print("moe-lc eval reference-agent: no question on stdin", file=sys.stderr)
        return 2
    with_skill = env.get(SKILL_ENV, "1") not in ("0", "false", "no", "")
    record = run(question, with_skill)
    stdout.write(record["answer"])
    stdout.flush()
    if path := env.get(TRANSCRIPT_ENV):
        with open(path, "w") as out:
            json.dump({k: v for k, v in record.items() if k != "answer"}, out, indent=1)
    return 0
