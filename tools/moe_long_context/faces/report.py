"""A self-contained HTML report of a plan_layout result: what the JSON carries, for people.

Sections: the ranked plans; the comparison with the published layout for the job; the findings with their
fixes; per-stage memory bars (stacked by component, on a GiB axis, with the usable-HBM line and the budget
line every plan fits: usable HBM less the headroom); the throughput estimate; each plan's overrides in both
dialects (Megatron Bridge and Megatron-LM) as a launch script passes them, quoted for bash; the assumptions.
Widths are relative, so the page reads in a narrow window too (labels go above the bars). Components are coloured from one fixed table (``COMPONENT_COLOURS``, the Okabe-Ito
colour-blind-safe palette), so a component has the same colour in every report.

Pure: returns the HTML text; the CLI writes it (``moe-lc plan --report plan.html``). No scripts, no
external assets, so it opens anywhere and renders the same in a headless browser.
"""

from __future__ import annotations

import html
import math
from typing import Any

from ..dialects.shell import quote
from ..engine.findings import Finding
from ..tools.plan_layout import PlanLayoutRequest, PlanLayoutResult

# Okabe & Ito, "Color Universal Design" (2008): eight colours told apart with every common colour-vision
# deficiency. Each memory component belongs to one group, matched by name in this order; a group keeps
# its colour in every report. Grey (not one of the eight) is the memory beyond the tensors, hatched grey anything new.
COMPONENT_COLOURS: tuple[tuple[str, str, str], ...] = (
    # (group, colour, how a component name matches: "=name", "^prefix" or "~substring")
    ("parameters", "#0072B2", "=parameters"),  # blue
    ("gradients", "#56B4E9", "=gradients"),  # sky blue
    ("optimizer states", "#009E73", "=optimizer states"),  # bluish green
    ("FP8 weight cache", "#F0E442", "=FP8 weight cache"),  # yellow
    ("activations: decoder layers", "#E69F00", "^activations: decoder layers"),  # orange
    ("other activations", "#D55E00", "^activations: "),  # vermillion
    ("transients", "#CC79A7", "~transient"),  # reddish purple
    ("dispatcher and CUDA-graph buffers", "#000000", "~buffers"),  # black
    ("dispatcher and CUDA-graph buffers", "#000000", "^CUDA-graph"),
    ("overhead", "#999999", "=fixed overhead"),
    ("overhead", "#999999", "^allocator cache"),
    ("overhead", "#999999", "^memory outside PyTorch"),
)
UNKNOWN = ("other", "repeating-linear-gradient(45deg, #bbbbbb 0 4px, #ffffff 4px 8px)")

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 16px; color: #222; max-width: 1150px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; } h3 { font-size: 14px; margin: 14px 0 4px; }
.scroll { overflow-x: auto; } table { border-collapse: collapse; } th, td { border-bottom: 1px solid #ddd; padding: 4px 10px;
  text-align: left; vertical-align: top; } th { background: #f4f4f4; }
.chart { margin: 4px 0 10px; } .stage { display: flex; align-items: center; margin: 3px 0; }
.label { flex: 0 0 15em; font-size: 12px; padding-right: 6px; }
.track { position: relative; flex: 1; min-width: 0; height: 18px; background: #f2f2f2; border: 1px solid #ccc; }
.segment { position: absolute; top: 0; height: 18px; }
.limit { position: absolute; top: -4px; width: 0; height: 26px; border-left: 2px dashed #D55E00; }
.budget { position: absolute; top: -4px; width: 0; height: 26px; border-left: 2px solid #222; }
.axis { display: flex; height: 46px; } .scale { position: relative; flex: 1; min-width: 0; border-top: 1px solid #444; }
.tick { position: absolute; top: 0; font-size: 11px; transform: translateX(-50%); padding-top: 4px; }
.tick::before { content: ""; position: absolute; left: 50%; top: 0; height: 4px; border-left: 1px solid #444; }
.usable-tag, .budget-tag { position: absolute; top: 15px; font-size: 11px; color: #a33a00; white-space: nowrap;
  transform: translateX(-100%); } .budget-tag { top: 29px; color: #222; }
.legend span { display: inline-block; margin: 2px 12px 2px 0; font-size: 12px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px;
  border: 1px solid #555; }
.throughput .bar { height: 14px; background: #0072B2; margin: 2px 0 6px; }
.throughput .bar.published { background: #E69F00; }
.finding { margin: 4px 0 8px; } .finding .code { font-weight: 600; }
.finding.error .code { color: #b00020; } .finding.warning .code { color: #8a5a00; }
.fix, .source { margin-left: 18px; font-size: 12px; } .source { color: #666; }
.dialects { display: flex; flex-wrap: wrap; gap: 16px; } .dialects div { flex: 1 1 320px; min-width: 0; }
pre { background: #f6f6f6; padding: 6px 8px; font-size: 12px; white-space: pre-wrap; word-break: break-all; }
.small { color: #666; font-size: 12px; } ul { margin: 4px 0 4px 18px; padding: 0; }
@media (max-width: 720px) { .stage, .axis { flex-wrap: wrap; } .label { flex: 1 0 100%; } .axis { height: 60px; } }
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def component_style(name: str) -> tuple[str, str]:
    """(group, CSS background) of a memory component, from the fixed table."""
    for group, colour, rule in COMPONENT_COLOURS:
        kind, text = rule[0], rule[1:]
        if (
            (kind == "=" and name == text)
            or (kind == "^" and name.startswith(text))
            or (kind == "~" and text in name)
        ):
            return group, colour
    return UNKNOWN


def _recompute(settings: dict[str, Any]) -> str:
    recompute = settings.get("recompute_granularity") or "none"
    if recompute == "selective":
        recompute += ": " + ", ".join(settings.get("recompute_modules") or [])
    elif recompute == "full":
        recompute += f" ({settings.get('recompute_method')} x {settings.get('recompute_num_layers')})"
    return recompute


def _plans_table(result: PlanLayoutResult) -> str:
    head = ["#", "layout", "recompute", "offload", "cp_comm_type", "dispatcher", "precision", "peak / usable GiB",
            "TFLOP/s/GPU", "MFU", "step s", "tokens/s"]  # fmt: skip
    rows = []
    for p in result.plans:
        s = p.settings
        cells = [p.rank, p.layout, _recompute(s), f"{s.get('optimizer_cpu_offload_fraction', 0) or 0:.0%}",
                 s.get("cp_comm_type") or "-", s.get("dispatcher") or "-", s.get("precision") or "-",
                 f"{p.memory.peak_gib:.1f} / {p.memory.usable_gib:g}", f"{p.throughput.tflops_per_gpu:.0f}",
                 f"{p.throughput.mfu:.1%}", f"{p.throughput.step_s:.2f}", f"{p.throughput.tokens_per_s:,.0f}"]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    return _table("plans", head, rows)


def _table(cls: str, head: list[str], rows: list[str]) -> str:
    return (
        f'<div class="scroll"><table class="{cls}"><thead><tr>'
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "\n".join(rows)
        + "</tbody></table></div>"
    )


def _comparison(result: PlanLayoutResult) -> str:
    if not result.references:
        return '<p class="none">No published layout for this model, GPU, GPU count and sequence length.</p>'
    head = [
        "published layout",
        "layout",
        "valid",
        "fits",
        "peak GiB",
        "TFLOP/s/GPU",
        "place among plans",
        "verdict",
    ]
    rows = []
    for ref in result.references:
        place = f"#{ref.rank}" if ref.rank else "not feasible"
        peak = "-" if ref.peak_gib is None else f"{ref.peak_gib:.1f}"
        tflops = "-" if ref.tflops_per_gpu is None else f"{ref.tflops_per_gpu:.0f}"
        cells = [f"{_e(ref.title)}<div class='small'>{_e(ref.source)}</div>", _e(ref.layout), _e(ref.valid),
                 _e(ref.fits), peak, tflops, place, _e(ref.verdict)]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return _table("comparison", head, rows)


def _finding(f: Finding, where: str) -> str:
    fix = f'<div class="fix">Fix: {_e(f.fix)}</div>' if f.fix else ""
    return (
        f'<li class="finding {f.severity.value}"><span class="code">{f.severity.value.upper()} {_e(f.code)}</span>'
        f" ({_e(where)}): {_e(f.message)}{fix}<div class='source'>{_e(f.source)}</div></li>"
    )


def _findings(result: PlanLayoutResult) -> str:
    items = [_finding(f, "the search") for f in result.findings]
    for p in result.plans:
        items += [_finding(f, f"plan #{p.rank}") for f in p.findings]
    if not items:
        return '<p class="none">No findings: every plan passes every rule without a warning.</p>'
    return '<ul class="findings">' + "\n".join(items) + "</ul>"


def _tick_step(scale_gib: float) -> float:
    """A round GiB step giving at most ten ticks."""
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000):
        if scale_gib / step <= 10:
            return step
    return 10 ** math.ceil(math.log10(scale_gib / 10))


def _axis(scale_gib: float, usable_gib: float, budget_gib: float, headroom: float) -> str:
    step = _tick_step(scale_gib)
    ticks = []
    value = 0.0
    while value <= scale_gib:
        ticks.append(
            f'<span class="tick" data-gib="{value:g}" style="left:{100 * value / scale_gib:.3f}%">{value:g}</span>'
        )
        value += step
    tag = (
        f'<span class="usable-tag" style="left:{100 * usable_gib / scale_gib:.3f}%">usable HBM {usable_gib:g} GiB'
        f'</span><span class="budget-tag" style="left:{100 * budget_gib / scale_gib:.3f}%">budget '
        f"{budget_gib:.1f} GiB ({headroom:.0%} headroom)</span>"
    )
    return f'<div class="axis"><div class="label">GiB per GPU</div><div class="scale">{"".join(ticks)}{tag}</div></div>'


def _memory_chart(plan, scale_gib: float, headroom: float) -> str:
    rows = []
    usable = plan.memory.usable_gib
    budget = usable * (1 - headroom)  # what every plan's peak must stay under
    for stage in plan.memory.stages:
        left = 0.0
        segments = []
        for name, gib in stage["components"].items():
            if gib <= 0:
                continue
            group, colour = component_style(name)
            width = 100 * gib / scale_gib
            segments.append(
                f'<div class="segment" data-component="{_e(name)}" title="{_e(name)} ({_e(group)}): {gib:.2f} GiB" '
                f'style="left:{left:.3f}%;width:{width:.3f}%;background:{colour}"></div>'
            )
            left += width
        rows.append(
            f'<div class="stage"><div class="label">PP rank {stage["pp_rank"]} ({_e(stage["role"])}): '
            f'{stage["total_gib"]:.1f} GiB</div><div class="track" data-total-gib="{stage["total_gib"]}">'
            + "".join(segments)
            + f'<div class="limit" title="usable HBM {usable:g} GiB" style="left:{100 * usable / scale_gib:.3f}%">'
            f'</div><div class="budget" title="budget {budget:.1f} GiB: usable HBM less {headroom:.0%} headroom" '
            f'style="left:{100 * budget / scale_gib:.3f}%"></div></div></div>'
        )
    return f'<div class="chart">{"".join(rows)}{_axis(scale_gib, usable, budget, headroom)}</div>'


def _legend(result: PlanLayoutResult) -> str:
    groups: dict[str, tuple[str, list[str]]] = {}
    for plan in result.plans:
        for stage in plan.memory.stages:
            for name, gib in stage["components"].items():
                if gib <= 0:  # not drawn, so not in the legend
                    continue
                group, colour = component_style(name)
                members = groups.setdefault(group, (colour, []))[1]
                if name not in members:
                    members.append(name)
    entries = []
    for group, (colour, members) in groups.items():
        detail = "" if members == [group] else " (" + ", ".join(members) + ")"
        entries.append(f'<span><i style="background:{colour}"></i>{_e(group)}{_e(detail)}</span>')
    return '<div class="legend">' + "".join(entries) + "</div>"


def _throughput(result: PlanLayoutResult) -> str:
    rows = [
        (f"#{p.rank} {p.layout}", p.throughput.tflops_per_gpu, p.throughput.tokens_per_s, "")
        for p in result.plans
    ]
    rows += [(f"published: {r.layout}", r.tflops_per_gpu, None, " published") for r in result.references
             if r.tflops_per_gpu]  # fmt: skip
    best = max((r[1] for r in rows), default=1.0) or 1.0
    out = []
    for label, tflops, tokens, cls in rows:
        tokens_text = f", {tokens:,.0f} tokens/s" if tokens else ""
        out.append(
            f'<div class="row">{_e(label)}: {tflops:.0f} TFLOP/s/GPU{tokens_text}'
            f'<div class="bar{cls}" style="width:{100 * tflops / best:.1f}%"></div></div>'
        )
    return "".join(out)


def shell_lines(groups: list[list[str]]) -> str:
    """Arguments as a launch script writes them: one group a line, each word quoted for bash, lines joined by
    continuations, so the block pastes after a command (Bridge overrides keep Hydra's quotes inside)."""
    return " \\\n".join(" ".join(quote(word) for word in group) for group in groups)


def _flag_groups(tokens: list[str]) -> list[list[str]]:
    groups: list[list[str]] = []
    for token in tokens:
        if token.startswith("--") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


def _overrides(result: PlanLayoutResult) -> str:
    out = [
        "<p class='small'>As a launch script passes them: each value quoted for bash (a Bridge override keeps "
        "Hydra's own quotes inside), one flag or override a line with continuations.</p>"
    ]
    for p in result.plans:
        bridge = shell_lines([[o] for o in p.bridge_overrides])
        megatron = (
            shell_lines(_flag_groups(p.megatron_args))
            if p.megatron_args
            else "# none: this plan trains LoRA, which Megatron-LM does not have"
        )
        out.append(
            f"<h3>#{p.rank} {_e(p.layout)}</h3><div class='dialects'>"
            f"<div><b>Megatron Bridge overrides</b><pre class='bridge'>{_e(bridge)}</pre></div>"
            f"<div><b>Megatron-LM arguments</b><pre class='megatron'>{_e(megatron)}</pre></div></div>"
        )
    return "".join(out)


def render_plan_report(req: PlanLayoutRequest, result: PlanLayoutResult) -> str:
    scale = max(
        [p.memory.usable_gib for p in result.plans]
        + [s["total_gib"] for p in result.plans for s in p.memory.stages]
        + [1.0]
    )
    scale = _tick_step(scale * 1.05) * math.ceil(scale * 1.05 / _tick_step(scale * 1.05))
    model = req.model if isinstance(req.model, str) else "custom model"
    title = f"Plans for {model} on {req.num_gpus} x {req.gpu} at {req.seq_len} tokens"
    memory = []
    for p in result.plans:
        memory.append(f"<h3>#{p.rank} {_e(p.layout)}</h3>\n{_memory_chart(p, scale, result.headroom)}")
        memory.append("<ul>" + "".join(f"<li>{_e(w)}</li>" for w in p.why) + "</ul>")
    assumptions = "<ul>" + "".join(f"<li>{_e(a)}</li>" for a in result.assumptions) + "</ul>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{_e(title)}</h1>
<p class="small">{_e(result.counts())}: every rule of Megatron Bridge 0.6 / Megatron Core 0.19 passes and
memory fits.</p>
<section id="plans"><h2>Ranked plans</h2>
{_plans_table(result)}</section>
<section id="comparison"><h2>Compared with the published layout</h2>
{_comparison(result)}</section>
<section id="findings"><h2>Findings and fixes</h2>
{_findings(result)}</section>
<section id="memory"><h2>Memory per GPU by pipeline stage (stacked by component; dashed: usable HBM; solid: the
budget every plan fits, usable HBM less {result.headroom:.0%} headroom)</h2>
{_legend(result)}
{"".join(memory)}</section>
<section id="throughput"><h2>Throughput estimate</h2>
<div class="throughput">{_throughput(result)}</div></section>
<section id="overrides"><h2>Overrides in both dialects</h2>
{_overrides(result)}</section>
<section id="assumptions"><h2>Assumptions</h2>
{assumptions}</section>
</body></html>
"""
