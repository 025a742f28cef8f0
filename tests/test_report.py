"""The HTML report of plan_layout carries what the JSON carries, and renders in headless Chromium."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from functools import cache

import pytest

from moe_long_context.faces.report import COMPONENT_COLOURS, component_style, render_plan_report
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout
from paste import bash_words, hydra_values

DSV3 = dict(model="deepseek-v3", gpu="h100", num_gpus=256, seq_len=131072, top_n=3)  # has a published layout
QWEN3 = dict(model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072, top_n=2)
SEGMENT = re.compile(r'class="segment" data-component="([^"]+)"[^>]*background:([^"]+)"')


@cache
def report(job: str):
    req = PlanLayoutRequest(**{"dsv3": DSV3, "qwen3": QWEN3}[job])
    result = plan_layout(req)
    return result, render_plan_report(req, result)


def section(text: str, name: str) -> str:
    return text.split(f'<section id="{name}">', 1)[1].split("</section>", 1)[0]


@pytest.mark.parametrize("job", ["dsv3", "qwen3"])
def test_report_has_every_part_of_the_result(job):
    result, text = report(job)
    plans = section(text, "plans")
    assert plans.count("<tr>") == len(result.plans) + 1
    blocks = [
        html.unescape(b) for b in re.findall(r"<pre class='(?:bridge|megatron)'>(.*?)</pre>", text, re.S)
    ]
    assert len(blocks) == 2 * len(result.plans)
    for p, bridge, megatron in zip(result.plans, blocks[::2], blocks[1::2], strict=True):
        assert f"<td>{p.layout}</td>" in plans
        # pasted into bash, each block passes exactly the plan's words; the overrides then read as Hydra reads
        assert bash_words(megatron) == p.megatron_args and bash_words(bridge) == p.bridge_overrides
        assert hydra_values(bash_words(bridge)) == hydra_values(p.bridge_overrides)
    findings = html.unescape(section(text, "findings"))
    for f in [*result.findings, *(f for p in result.plans for f in p.findings)]:
        assert f"{f.severity.value.upper()} {f.code}" in findings and f.message in findings
        assert f.fix is None or f"Fix: {f.fix}" in findings
    comparison = html.unescape(section(text, "comparison"))
    for ref in result.references:
        assert ref.layout in comparison and ref.verdict in comparison
    assert "#76b7b2" not in text and "#86bcb6" not in text  # the two legend colours no one could tell apart


@pytest.mark.parametrize("job", ["dsv3", "qwen3"])
def test_published_layout_comparison_is_there(job):
    result, text = report(job)
    assert result.references, "both jobs have a published layout (engine/layouts.yaml)"
    assert '<table class="comparison">' in section(text, "comparison")


@pytest.mark.parametrize("job", ["dsv3", "qwen3"])
def test_memory_bars_mark_the_budget_plans_fit(job):
    """Besides usable HBM, each bar marks the budget: usable less the headroom, what every plan stays under."""
    result, text = report(job)
    memory = section(text, "memory")
    for plan in result.plans:
        budget = plan.memory.usable_gib * (1 - result.headroom)
        assert f"budget {budget:.1f} GiB ({result.headroom:.0%} headroom)" in memory
        assert plan.memory.peak_gib <= budget + 0.05
    assert (
        memory.count('class="budget"')
        == memory.count('class="limit"')
        == sum(len(p.memory.stages) for p in result.plans)
    )


def test_report_reads_in_a_narrow_window():
    """No fixed width wider than a phone: bars, axes and columns size to the window, tables scroll, and on a
    narrow screen the stage labels go above the bars."""
    _, text = report("dsv3")
    widths = [int(w) for w in re.findall(r"(?<![-\w])width:\s*(\d+)px", text)]  # max-width may be wide
    assert not [w for w in widths if w > 320], widths
    assert 'name="viewport"' in text and "@media (max-width:" in text
    assert text.count('<div class="scroll"><table') == text.count("<table")


@pytest.mark.parametrize("job", ["dsv3", "qwen3"])
def test_memory_bars_have_a_gib_axis_and_the_usable_line(job):
    result, text = report(job)
    memory = section(text, "memory")
    charts = memory.split('<div class="chart">')[1:]
    assert len(charts) == len(result.plans)
    for chart, plan in zip(charts, result.plans, strict=True):
        assert chart.count('class="track"') == len(plan.memory.stages)
        ticks = [float(v) for v in re.findall(r'class="tick" data-gib="([0-9.]+)"', chart)]
        assert ticks[0] == 0 and len(ticks) >= 3 and ticks == sorted(ticks)
        assert ticks[-1] >= max(plan.memory.usable_gib, max(s["total_gib"] for s in plan.memory.stages))
        assert f"usable HBM {plan.memory.usable_gib:g} GiB" in chart
        assert chart.count('class="limit"') == len(plan.memory.stages)


def test_each_component_has_the_same_colour_in_every_report():
    seen: dict[str, str] = {}
    for job in ("dsv3", "qwen3"):
        for name, colour in SEGMENT.findall(report(job)[1]):
            name = html.unescape(name)
            assert colour == component_style(name)[1], name
            assert seen.setdefault(name, colour) == colour, name
    assert {"parameters", "gradients", "allocator cache (reserved, not allocated)"} <= set(seen)
    assert all(component_style(name)[0] != "other" for name in seen), "a component missing from the table"


def test_colour_table_is_okabe_ito_and_one_colour_per_group():
    okabe_ito = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}
    colours = {group: colour for group, colour, _ in COMPONENT_COLOURS}
    assert set(colours.values()) - {"#999999"} <= okabe_ito
    assert len(set(colours.values())) == len(colours)  # no two groups share a colour
    assert component_style("activations: decoder layers (full recompute: layer inputs)")[1] == "#E69F00"
    assert component_style("HybridEP buffers") == component_style("CUDA-graph pool (full iteration)")
    assert component_style("something new")[0] == "other"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_html_report_renders_in_headless_chromium(tmp_path):
    result, text = report("dsv3")
    page = tmp_path / "plan.html"
    page.write_text(text)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'u'}"]  # fmt: skip
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = dom.stdout
    assert '<table class="plans">' in rendered and rendered.count('class="segment"') >= 8
    assert '<table class="comparison">' in rendered and result.references[0].layout in rendered
    assert rendered.count('class="finding ') == len(result.findings) + sum(
        len(p.findings) for p in result.plans
    )
    assert rendered.count('class="tick"') >= 3 * len(result.plans) and "usable HBM" in rendered
    assert '<pre class="bridge">' in rendered.replace("'", '"') and 'class="megatron"' in rendered.replace(
        "'", '"'
    )
    shot = tmp_path / "plan.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1200,2200", page.as_uri()],
                   capture_output=True, timeout=120, check=True)  # fmt: skip
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
