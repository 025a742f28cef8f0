"""Short text summaries of tool results, for the MCP text content an agent reads and quotes.

The MCP server returns every result twice: the complete result as ``structuredContent`` and, as text, by
default (``detail='summary'``) the summary made here: the verdict, the key numbers, every error finding
with its fix, warnings in one line each, and info findings by code only. ``detail='full'`` puts the
complete result in the text instead. Pure functions of the result's JSON (what ``structuredContent``
holds), so a summary never says something the full result does not.

A tool without a summary of its own here (a tool added to the registry later) gets the generic one: its
top-level numbers, flags and short strings, then its findings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..dialects.shell import shell_join

FOOTER = "(Complete result in structuredContent; call with detail='full' to get it as text.)"
MAX_LIST = 5  # list items shown in a summary before "... and N more"


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return str(value)


def _v(value: Any) -> str:
    return "-" if value is None else str(value)


def _gib(value: Any) -> str:
    return "-" if value is None else f"{value:.1f} GiB"


def _items(values: list[Any], fmt: Callable[[Any], str] = str, limit: int = MAX_LIST) -> list[str]:
    lines = [f"- {fmt(v)}" for v in values[:limit]]
    if len(values) > limit:
        lines.append(f"- ... and {len(values) - limit} more")
    return lines


def findings_lines(findings: list[dict[str, Any]]) -> list[str]:
    """Errors with message and fix, warnings in one line with their fix, info by code."""
    errors = [f for f in findings if f["severity"] == "error"]
    warnings = [f for f in findings if f["severity"] == "warning"]
    infos = [f for f in findings if f["severity"] == "info"]
    lines: list[str] = []
    if errors:
        lines.append(f"Errors ({len(errors)}; Megatron would refuse the configuration):")
        for f in errors:
            lines.append(f"- {f['code']}: {f['message']}")
            if f.get("fix"):
                lines.append(f"  fix: {f['fix']}")
    if warnings:
        lines.append(f"Warnings ({len(warnings)}):")
        for f in warnings:
            fix = f" Fix: {f['fix']}" if f.get("fix") else ""
            lines.append(f"- {f['code']}: {f['message']}{fix}")
    if infos:
        lines.append("Info: " + ", ".join(f["code"] for f in infos))
    if not findings:
        lines.append("Findings: none.")
    return lines


def _verdict(data: dict[str, Any]) -> str:
    if "valid" not in data:
        return ""
    return "valid" if data["valid"] else "NOT valid (error findings below)"


# --------------------------------------------------------------------------- per tool


def _size_cp(d: dict[str, Any]) -> list[str]:
    comm = d["cp_comm_type"] or "-"
    if d.get("hierarchical_cp_sizes"):
        comm += f" (hierarchical_cp_sizes {d['hierarchical_cp_sizes']})"
    lines = [
        f"size_cp: CP {d['cp']} with cp_comm_type {comm} at TP {d['tp']} for {d['seq_len']} tokens",
        f"tokens per TP x CP shard {d['tokens_per_shard']} (target {d['target_tokens_per_shard']}); "
        f"per CP rank {d['tokens_per_rank']}",
        f"why: {d['reason']}",
    ]
    if d["constraints"]:
        lines += ["constraints:", *_items(d["constraints"])]
    if d["alternatives"]:
        lines.append("alternatives:")
        lines += _items(
            d["alternatives"],
            lambda a: (
                f"TP{a['tp']} CP{a['cp']} {a['cp_comm_type']}, {a['tokens_per_shard']} tokens/shard: "
                f"{a['why']}"
            ),
        )
    return lines


def _check_dp_budget(d: dict[str, Any]) -> list[str]:
    pipeline = d.get("pipeline") or {}
    lines = [
        f"check_dp_budget: {_verdict(d)}: {d['layout']}",
        f"DP {_v(d['dp'])}, EDP {_v(d['edp'])}, min_gpus {_v(d['min_gpus'])}, GBS {_v(d['gbs'])}, "
        f"microbatches {_v(d['num_microbatches'])}, sequence_parallel {d['sequence_parallel']}",
    ]
    if pipeline.get("decoders_per_rank"):
        lines.append(
            f"pipeline ({pipeline.get('method')}): decoder layers per rank {pipeline['decoders_per_rank']}"
        )
    if d["alternatives"]:
        lines.append("nearest accepted layouts:")
        lines += _items(d["alternatives"], _alternative)
    return lines


def _alternative(a: dict[str, Any]) -> str:
    return f"{a['layout']} (DP {a['dp']}, EDP {a['edp']}, {a['num_microbatches']} microbatches): {a['why']}"


def _validate_cuda_graph_shapes(d: dict[str, Any]) -> list[str]:
    modules = ", ".join(d["cuda_graph_modules"] or []) or "whole layer"
    lines = [
        f"validate_cuda_graph_shapes: {_verdict(d)}: cuda_graph_impl {d['cuda_graph_impl']}, modules {modules}",
        f"microbatches captured: {d['microbatches_captured']}",
    ]
    if d["captured_shapes"]:
        lines.append(
            "captured shapes: "
            + "; ".join(f"{t['name']} {t['shape']} {t['dtype']}" for t in d["captured_shapes"])
        )
    if d["static_requirements"]:
        lines += ["must stay fixed:", *_items(d["static_requirements"], limit=8)]
    return lines


def _stage_line(stage: dict[str, Any]) -> str:
    parts = sorted(stage["components"], key=lambda c: -c["gib"])[:3]
    top = ", ".join(f"{c['component']} {c['gib']:.1f}" for c in parts)
    return f"PP rank {stage['pp_rank']} ({stage['role']}): {stage['total_gib']:.1f} GiB; largest: {top}"


def _estimate_memory(d: dict[str, Any]) -> list[str]:
    if d["peak_gib"] is None:
        return [
            f"estimate_memory: no estimate; {_verdict(d)}",
            f"usable {_gib(d['usable_gib'])}; fix the errors below for a memory estimate",
        ]
    fits = {True: "fits", False: "does NOT fit", None: "fit unknown (no GPU given)"}[d["fits"]]
    lines = [
        f"estimate_memory: {fits}; {_verdict(d)}",
        f"peak {_gib(d['peak_gib'])} on PP rank {d['peak_pp_rank']}, usable {_gib(d['usable_gib'])}, "
        f"headroom {_gib(d['headroom_gib'])} (includes {d['overhead_gib']:g} GiB beyond the tensors)",
    ]
    lines += _items(d["breakdown"], _stage_line)
    if d["assumptions"]:
        lines.append(f"{len(d['assumptions'])} assumptions in structuredContent.assumptions.")
    return lines


def _pick_recompute(d: dict[str, Any]) -> list[str]:
    granularity = d["recompute_granularity"] or "none"
    if granularity == "selective":
        granularity += " " + ", ".join(d["recompute_modules"] or [])
    elif granularity == "full":
        granularity += f" ({d['recompute_method']}, {d['recompute_num_layers']} layers)"
    fits = "fits" if d["fits"] else "does NOT fit even with recompute"
    lines = [
        f"pick_recompute: {fits}: recompute {granularity}; {_verdict(d)}",
        f"peak {_gib(d['peak_gib_before'])} -> {_gib(d['peak_gib_after'])} (usable {_gib(d['usable_gib'])})",
    ]
    if d["gains"]:
        lines.append(
            "saved per label: " + ", ".join(f"{g['label']} {g['gib_saved']:.1f} GiB" for g in d["gains"])
        )
    if d["other_settings"]:
        lines.append("also set: " + ", ".join(f"{k}={v}" for k, v in d["other_settings"].items()))
    if d["bridge_overrides"]:
        lines.append("Bridge overrides (shell words): " + shell_join(d["bridge_overrides"]))
    if d["megatron_lm_flags"]:
        lines.append("Megatron-LM flags: " + " ".join(d["megatron_lm_flags"]))
    if d["next_steps"]:
        lines.append("next steps:")
        lines += _items(d["next_steps"], _next_step)
    return lines


def _next_step(step: dict[str, Any]) -> str:
    settings = ", ".join(f"{k}={v}" for k, v in step["settings"].items())
    fits = "fits" if step["fits"] else "still does not fit"
    note = f"; {step['note']}" if step.get("note") else ""
    return (
        f"{step['action']} ({settings}): saves {step['gib_saved']:.1f} GiB, peak {_gib(step['peak_gib'])}, "
        f"{fits}{note}"
    )


def _lint_config(d: dict[str, Any]) -> list[str]:
    errors = sum(f["severity"] == "error" for f in d["findings"])
    lines = [
        f"lint_config: {_verdict(d)}: {d['dialect']} configuration of {d['model']} on {d['num_gpus']} GPUs, "
        f"{errors} error(s), {len(d['findings'])} finding(s)",
    ]
    if d["fixes"]:
        lines.append(
            "corrected configuration (same dialect; the other dialect is in corrected_other_dialect):"
        )
        corrected = d["corrected"]
        if isinstance(corrected, str):
            corrected = corrected.splitlines()
        elif isinstance(corrected, dict):  # a ConfigContainer-shaped object: its sections, one a line
            corrected = [f"{key}: {json.dumps(value)}" for key, value in corrected.items()]
        lines += [f"  {item}" for item in corrected]
    if d["remaining_errors"]:
        lines += ["still wrong after the fixes:", *_items(d["remaining_errors"], str)]
    return lines


def _recompute(settings: dict[str, Any]) -> str:
    kind = settings.get("recompute_granularity") or "none"
    if kind == "selective":
        return ",".join(settings.get("recompute_modules") or [])
    if kind == "full":
        return f"full {settings.get('recompute_method')} x{settings.get('recompute_num_layers')}"
    return kind


def _plan_layout(d: dict[str, Any]) -> list[str]:
    lines = [
        f"plan_layout: {len(d['plans'])} plan(s); {d['candidates']} candidates, {d['evaluated']} evaluated in "
        f"full; {d['feasible']} feasible of those{' and the published layout' if d['references'] else ''}; "
        f"GBS {d['gbs']} for every plan, {d['headroom']:.0%} headroom"
    ]
    if not d["plans"]:  # a job with no plan always says why
        lines.append(f"no plan: {d['no_plan_reason']}")
        if d["excluded"]:
            lines.append("excluded: " + ", ".join(f"{why} x{n}" for why, n in d["excluded"].items()))
    brief: list[str] = []
    for p in d["plans"][MAX_LIST:]:  # beyond the first few: one short line each
        m, t = p["memory"], p["throughput"]
        brief.append(
            f"#{p['rank']} {p['layout']}: peak {m['peak_gib']:.1f} GiB, {t['tflops_per_gpu']:.0f} TFLOP/s/GPU"
        )
    for p in d["plans"][:MAX_LIST]:
        s, t, m = p["settings"], p["throughput"], p["memory"]
        offload = s.get("optimizer_cpu_offload_fraction") or 0
        lines.append(
            f"#{p['rank']} {p['layout']} cp_comm={s.get('cp_comm_type') or '-'} recompute={_recompute(s)} "
            f"offload={offload:.0%} dispatcher={s.get('dispatcher')} precision={s.get('precision')}: "
            f"peak {m['peak_gib']:.1f}/{m['usable_gib']:g} GiB, {t['tflops_per_gpu']:.0f} TFLOP/s/GPU, "
            f"MFU {t['mfu']:.1%}, {t['step_s']:.2f} s/step"
        )
        if p["why"]:
            lines.append(f"   why: {p['why'][0]}")
        if any(f["severity"] != "info" for f in p["findings"]):
            lines.append(
                "   "
                + "; ".join(f"{f['severity']} {f['code']}" for f in p["findings"] if f["severity"] != "info")
            )
    lines += brief
    for ref in d["references"]:
        place = f"rank {ref['rank']}" if ref["rank"] else "not feasible"
        lines.append(
            f"published layout {ref['title']} ({ref['layout']}): valid={ref['valid']} fits={ref['fits']}, "
            f"{_num(ref['tflops_per_gpu'])} TFLOP/s/GPU, {place}; {ref['verdict']}"
        )
    if d["plans"]:
        top = d["plans"][0]
        lines.append(f"#1 Bridge overrides (shell words): {shell_join(top['bridge_overrides'])}")
        if top["megatron_args"]:
            lines.append(f"#1 Megatron-LM args (shell words): {shell_join(top['megatron_args'])}")
        else:
            lines.append("#1 Megatron-LM args: none, the plan trains LoRA and Megatron-LM has no LoRA")
    return lines


def _generic(name: str, d: dict[str, Any]) -> list[str]:
    head = f"{name}: {_verdict(d)}".rstrip(": ")
    fields = [
        f"{k}={_num(v)}"
        for k, v in d.items()
        if k != "findings" and (isinstance(v, int | float | bool) or (isinstance(v, str) and len(v) <= 120))
    ]
    return [head, ", ".join(fields)] if fields else [head]


SUMMARIES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "size_cp": _size_cp,
    "check_dp_budget": _check_dp_budget,
    "validate_cuda_graph_shapes": _validate_cuda_graph_shapes,
    "estimate_memory": _estimate_memory,
    "pick_recompute": _pick_recompute,
    "lint_config": _lint_config,
    "plan_layout": _plan_layout,
}


def not_checked_lines(d: dict[str, Any]) -> list[str]:
    """What a judging result covers, the upstream checks it reaches that no rule models (each with its line and
    what it requires: unverified, not approved), and the flags or keys the engine does not read."""
    checked = d.get("checked")
    if not checked:
        return []
    items = d.get("not_checked") or []
    upstream = [n for n in items if n.get("source")]
    unread = [n for n in items if not n.get("source")]
    lines = [f"Checked: {checked['rules']} rules, modelling {checked['upstream']} of the {checked['applicable']} "
             "applicable upstream checks."]  # fmt: skip
    if upstream:
        lines.append(
            f"Not checked ({len(upstream)} upstream checks no rule models; unverified, not approved):"
        )
        lines += _items(upstream, lambda n: f"{n['source']} ({', '.join(n['keys'])}): {n['requires']}")
    if unread:
        lines.append("Not checked (not read by the engine): " + ", ".join(
            n["keys"][0] + ("" if n["requires"].startswith("not read") else f" ({n['requires']})")
            for n in unread[:12]) + (f", ... and {len(unread) - 12} more" if len(unread) > 12 else ""))  # fmt: skip
    return lines


def summarize(name: str, data: dict[str, Any]) -> str:
    """The text an agent reads by default: headline, key numbers, findings, what it did not check, and where
    the rest is."""
    make = SUMMARIES.get(name)
    lines = make(data) if make else _generic(name, data)
    if "findings" in data:
        lines += findings_lines(data["findings"])
    lines += not_checked_lines(data)
    lines.append(FOOTER)
    return "\n".join(lines)
