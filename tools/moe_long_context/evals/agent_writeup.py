"""The reference agent, part 2: writing up each tool's result as an answer an expert would give."""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..faces.summary import not_checked_lines


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
    verdict = "Megatron refuses it (see the errors)" if not r["valid"] else (
        "Megatron accepts it" if not open_points(r) else "no error on what the engine checks (unverified points below)")  # fmt: skip
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


def unseen_codes(r: dict[str, Any]) -> list[str]:
    """Warnings on an upstream assert whose value the launch leaves to the recipe or environment (``*_UNSEEN``):
    the run may still be refused, so the answer must not call it accepted."""
    return list(dict.fromkeys(f["code"] for f in r.get("findings") or [] if f["code"].endswith("_UNSEEN")))


def open_points(r: dict[str, Any]) -> bool:
    """Whether a clean result still leaves points open: unmodelled upstream checks or asserts left to the recipe."""
    return bool(unverified_lines(r) or unseen_codes(r))


def unverified_lines(r: dict[str, Any]) -> list[str]:
    """The upstream checks a result reaches that no rule models: each with its line and what it requires."""
    items = [n for n in r.get("not_checked") or [] if n.get("source")]
    if not items:
        return []
    return [f"- Not checked ({len(items)} upstream checks this configuration reaches that no rule models; "
            "unverified, not approved):", *(f"  - {n['source']} ({', '.join(n['keys'])}): {n['requires']}"
                                           for n in items)]  # fmt: skip


def write_lint(r: dict[str, Any]) -> list[str]:
    errors = [f for f in r["findings"] if f["severity"] == "error"]
    lines = [
        f"- Model {r['model']}, {r['num_gpus']} GPUs, {r['dialect']} dialect: "
        + (
            f"{len(errors)} errors Megatron would refuse:"
            if errors
            else "no errors; Megatron accepts it."
            if not open_points(r)
            else "no error on what the engine checks; the points below are unverified."
        )
    ]
    lines += findings_lines(errors)
    rest = [f for f in r["findings"] if f["severity"] != "error"]
    if rest:
        lines.append("- Not errors (warnings and notes the engine reports):")
        lines += ["  " + line for line in findings_lines(rest)]
    lines += [f"- {line}" for line in not_checked_lines(r) if line.startswith("Not checked (not read")]
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
        if top["megatron_args"]:
            lines += ["Megatron-LM flags for plan #1:", "```", shlex.join(top["megatron_args"]), "```"]
        else:
            lines.append(
                "No Megatron-LM launch for plan #1: it trains LoRA, which Megatron-LM does not have."
            )
    return lines + findings_lines(r["findings"])


def write_throughput(r: dict[str, Any]) -> list[str]:
    if not r["valid"]:
        return ["- Not valid: Megatron would refuse this configuration.", *findings_lines(r["findings"])]
    lo, hi = r["tokens_per_s_range"]
    lines = [
        f"- Step time {r['step_s']} s, {r['tokens_per_step']} tokens per step, {r['microbatches']} microbatches per "
        f"DP rank, pipeline bubble {r['bubble_fraction']:.1%}.",
        f"- {r['tokens_per_s']} tokens/s (range {lo} to {hi}), {r['tflops_per_gpu']} TFLOP/s per GPU (model FLOPs), "
        f"MFU {r['mfu']:.1%} against a peak of {r['mfu_denominator_tflops']}.",
        "- Seconds per step by term on the busiest stage: "
        + ", ".join(f"{k} {v}" for k, v in r["terms_s"].items()) + ".",
    ]  # fmt: skip
    return lines + findings_lines(r["findings"], ("error", "warning"))


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
    "estimate_throughput": write_throughput,
}


def _describe(arguments: dict[str, Any]) -> str:
    shown = {k: v for k, v in arguments.items() if k not in ("megatron_args", "bridge_overrides", "config")}
    return ", ".join(f"{k}={_fmt(v)}" for k, v in shown.items())
