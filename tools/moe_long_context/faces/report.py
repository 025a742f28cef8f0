"""A self-contained HTML report of a plan_layout result: the plans table, stacked memory bars per plan
(first and last pipeline stage, plus the most loaded one), and the throughput estimate.

Pure: returns the HTML text; the CLI writes it (``moe-lc plan --report plan.html``). No scripts, no
external assets, so it opens anywhere and renders the same in a headless browser.
"""

from __future__ import annotations

import html
from typing import Any

from ..tools.plan_layout import PlanLayoutRequest, PlanLayoutResult

PALETTE = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
    "#86bcb6", "#d37295",
]  # fmt: skip

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table.plans { border-collapse: collapse; } table.plans th, table.plans td { border-bottom: 1px solid #ddd;
  padding: 4px 10px; text-align: left; vertical-align: top; } table.plans th { background: #f4f4f4; }
.stage { display: flex; align-items: center; margin: 3px 0; } .stage .label { width: 190px; font-size: 12px; }
.track { position: relative; width: 640px; height: 18px; background: #f2f2f2; border: 1px solid #ccc; }
.segment { position: absolute; top: 0; height: 18px; }
.limit { position: absolute; top: -3px; width: 2px; height: 24px; background: #000; }
.legend span { display: inline-block; margin: 2px 10px 2px 0; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
.throughput .bar { height: 16px; background: #4e79a7; margin: 2px 0; }
.small { color: #666; font-size: 12px; } ul { margin: 4px 0 4px 18px; padding: 0; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _colors(result: PlanLayoutResult) -> dict[str, str]:
    names: list[str] = []
    for plan in result.plans:
        for stage in plan.memory.stages:
            for name in stage["components"]:
                if name not in names:
                    names.append(name)
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _memory_bars(plan, colors: dict[str, str], scale_gib: float) -> str:
    rows = []
    usable = plan.memory.usable_gib
    for stage in plan.memory.stages:
        left = 0.0
        segments = []
        for name, gib in stage["components"].items():
            if gib <= 0:
                continue
            width = 100 * gib / scale_gib
            segments.append(
                f'<div class="segment" title="{_e(name)}: {gib:.2f} GiB" '
                f'style="left:{left:.3f}%;width:{width:.3f}%;background:{colors[name]}"></div>'
            )
            left += width
        limit = 100 * usable / scale_gib
        rows.append(
            f'<div class="stage"><div class="label">PP rank {stage["pp_rank"]} ({_e(stage["role"])}): '
            f'{stage["total_gib"]:.1f} GiB</div><div class="track" data-total-gib="{stage["total_gib"]}">'
            + "".join(segments)
            + f'<div class="limit" title="usable {usable} GiB" style="left:{limit:.3f}%"></div></div></div>'
        )
    return "\n".join(rows)


def render_plan_report(req: PlanLayoutRequest, result: PlanLayoutResult) -> str:
    colors = _colors(result)
    scale = max(
        [p.memory.usable_gib for p in result.plans]
        + [s["total_gib"] for p in result.plans for s in p.memory.stages]
        + [1.0]
    )
    scale *= 1.05
    best = max((p.throughput.tflops_per_gpu for p in result.plans), default=1.0)
    model = req.model if isinstance(req.model, str) else "custom model"
    title = f"Plans for {model} on {req.num_gpus} x {req.gpu} at {req.seq_len} tokens"
    head = ["#", "layout", "recompute", "offload", "cp_comm_type", "peak GiB", "TFLOP/s/GPU", "MFU", "step s"]
    rows = []
    for p in result.plans:
        s = p.settings
        recompute = s.get("recompute_granularity") or "none"
        if recompute == "selective":
            recompute += ": " + ", ".join(s.get("recompute_modules") or [])
        elif recompute == "full":
            recompute += f" ({s.get('recompute_method')} x {s.get('recompute_num_layers')})"
        cells = [p.rank, p.layout, recompute, f"{s.get('optimizer_cpu_offload_fraction', 0) or 0:.0%}",
                 s.get("cp_comm_type") or "-", f"{p.memory.peak_gib:.1f} / {p.memory.usable_gib:g}",
                 f"{p.throughput.tflops_per_gpu:.0f}", f"{p.throughput.mfu:.1%}", f"{p.throughput.step_s:.2f}"]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    table = (
        '<table class="plans"><thead><tr>'
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "\n".join(rows)
        + "</tbody></table>"
    )
    legend = (
        '<div class="legend">'
        + "".join(f'<span><i style="background:{c}"></i>{_e(n)}</span>' for n, c in colors.items())
        + "</div>"
    )
    memory = []
    for p in result.plans:
        memory.append(f"<h3>#{p.rank} {_e(p.layout)}</h3>\n{_memory_bars(p, colors, scale)}")
        memory.append("<ul>" + "".join(f"<li>{_e(w)}</li>" for w in p.why) + "</ul>")
    throughput = "".join(
        f'<div class="row">#{p.rank} {p.throughput.tflops_per_gpu:.0f} TFLOP/s/GPU, '
        f'{p.throughput.tokens_per_s:,.0f} tokens/s<div class="bar" '
        f'style="width:{600 * p.throughput.tflops_per_gpu / best:.1f}px"></div></div>'
        for p in result.plans
    )
    overrides = "".join(
        f"<h3>#{p.rank} {_e(p.layout)}</h3><pre>{_e(chr(10).join(p.bridge_overrides))}</pre>"
        for p in result.plans
    )
    assumptions = "<ul>" + "".join(f"<li>{_e(a)}</li>" for a in result.assumptions) + "</ul>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{_e(title)}</h1>
<p class="small">{result.candidates} candidate layouts, {result.evaluated} evaluated in full, {result.feasible}
feasible (every rule of Megatron Bridge 0.6 / Megatron Core 0.19 passes and memory fits).</p>
<h2>Plans</h2>
{table}
<h2>Memory per rank (stacked by component; the black line is the usable memory)</h2>
{legend}
{"".join(memory)}
<h2>Throughput estimate</h2>
<div class="throughput">{throughput}</div>
<h2>Megatron Bridge overrides</h2>
{overrides}
<h2>Assumptions</h2>
{assumptions}
</body></html>
"""
