"""BENCHMARK.md from a benchmark.json: a pure function, so the page can always be checked against its data."""

from __future__ import annotations

from typing import Any

from .tasks import SKILL_NAME

REFERENCE_AGENT = "moe-lc eval reference-agent"

CATEGORY_TITLES = {
    "cp-sizing": "CP sizing (incl. lengths that are not powers of two)",
    "dp-budget": "DP budget under MoE parallel folding",
    "pipeline": "Pipeline splits for uneven layer counts",
    "recompute": "Recompute labels and choices",
    "cuda-graphs": "CUDA graphs (dropless MoE, packed sequences)",
    "dispatcher-precision": "Dispatcher and precision by GPU",
    "optimizer-offload": "Optimizer CPU offload prerequisites",
    "mcore-0.19": "Megatron Core 0.19 changes",
    "memory": "Memory (numbers within 10%)",
    "planning": "Planning from scratch (every catalog model)",
    "lint": "Lint: launch scripts and override lists",
    "runs-as-written": "Looks wrong, runs (no error to invent)",
    "fails-as-written": "Looks right, fails (the error to find)",
    "public-scripts": "Public launch scripts (ModelZoo, slime, Bridge recipes)",
    "planning-headroom": "Planning with more memory headroom",
    "throughput": "Throughput: step time, tokens/s and TFLOP/s of a given layout",
    "not-checked": "Not checked: the answer depends on a check no rule models",
    "negative": "Negative: must not trigger the skill",
}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _delta(a: float, b: float) -> str:
    return f"{100 * (a - b):+.0f} pts"


def _pct_or_dash(x: float | None) -> str:
    return "-" if x is None else _pct(x)


def _results(summary: dict[str, Any], br: dict[str, Any], configs: list[str]) -> list[str]:
    """The headline (outcome: what the answers say), process (tool use) apart, and the table by category."""
    both = "with_skill" in configs and "without_skill" in configs
    lines = []
    if both:
        w, wo = summary["with_skill"], summary["without_skill"]
        lines += [
            "**Outcome** (what the answer says: every content expectation; the headline): with the skill "
            f"{_pct(w['outcome_pass_rate']['mean'])}, without {_pct(wo['outcome_pass_rate']['mean'])}, uplift "
            f"{_delta(w['outcome_pass_rate']['mean'], wo['outcome_pass_rate']['mean'])}.",
            "",
            "**Process** (tool use: the expected tools called, the skill left alone on negative tasks): with the "
            f"skill {_pct(w['process_pass_rate']['mean'])}, without {_pct(wo['process_pass_rate']['mean'])}. An "
            "agent without the tools fails these by construction, so they are reported apart.",
            "",
            "All expectations together (skill-creator's pass_rate): "
            f"with the skill {_pct(w['pass_rate']['mean'])}, without {_pct(wo['pass_rate']['mean'])}, "
            f"delta {summary['delta']['pass_rate']}.",
            "",
            "| Category | Tasks | Outcome with skill | Outcome without | Outcome delta | Process (with / without) "
            "| Tasks passed (with / without) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
    else:
        c = configs[0]
        x = summary[c]
        lines += [
            f"**Outcome** (content expectations): {_pct(x['outcome_pass_rate']['mean'])}; **process** (tool use): "
            f"{_pct(x['process_pass_rate']['mean'])}; all expectations: {_pct(x['pass_rate']['mean'])}.",
            "",
            f"| Category | Tasks | Outcome ({c}) | Process ({c}) | Tasks passed |",
            "|---|---:|---:|---:|---:|",
        ]
    order = [c for c in CATEGORY_TITLES if c in br["categories"]] + sorted(
        c for c in br["categories"] if c not in CATEGORY_TITLES
    )
    for name in order:
        row = br["categories"][name]
        title = CATEGORY_TITLES.get(name, name)
        if both:
            w, wo = row["with_skill"], row["without_skill"]
            lines.append(
                f"| {title} | {row['tasks']} | {_pct(w['outcome_pass_rate'])} | {_pct(wo['outcome_pass_rate'])} | "
                f"{_delta(w['outcome_pass_rate'], wo['outcome_pass_rate'])} | "
                f"{_pct_or_dash(w['process_pass_rate'])} / {_pct_or_dash(wo['process_pass_rate'])} | "
                f"{w['runs_passed']} / {wo['runs_passed']} of {w['runs']} |"
            )
        else:
            x = row[configs[0]]
            lines.append(
                f"| {title} | {row['tasks']} | {_pct(x['outcome_pass_rate'])} | "
                f"{_pct_or_dash(x['process_pass_rate'])} | {x['runs_passed']} of {x['runs']} |"
            )
    return lines


def _recorded(rec: dict[str, Any]) -> list[str]:
    """A recorded run of another agent, graded by the same grader, next to the live one."""
    files = ", ".join(f"`{p}` ({c})" for c, p in rec["files"].items())
    lines = [
        "",
        f"## Recorded run: {rec['name']} ({rec['date']})",
        "",
        f"Answers recorded from {rec['name']} on {rec['date']} ({files}), graded by the same grader. It covers "
        f"{rec['tasks_covered']} tasks of the {rec['tasks_in_evals']} in the evals file; the scores below are over "
        "those tasks only.",
        "",
    ]
    s = rec["run_summary"]
    if "delta" in s:
        w, wo = s["with_skill"], s["without_skill"]
        lines += [
            f"Outcome: with the skill {_pct(w['outcome_pass_rate']['mean'])}, without "
            f"{_pct(wo['outcome_pass_rate']['mean'])}, uplift "
            f"{_delta(w['outcome_pass_rate']['mean'], wo['outcome_pass_rate']['mean'])}.",
            "",
        ]
    lines += [
        "| Configuration | Tasks | Outcome pass rate | Process pass rate | All expectations | Outcome checks all pass "
        "| All checks pass |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in rec["configurations"]:
        runs = [r for r in rec["runs"] if r["configuration"] == c]
        x = s[c]
        lines.append(
            f"| {c} | {len(runs)} | {_pct(x['outcome_pass_rate']['mean'])} | {_pct(x['process_pass_rate']['mean'])} "
            f"| {_pct(x['pass_rate']['mean'])} | {sum(r['outcome_passed'] for r in runs)} of {len(runs)} | "
            f"{sum(r['task_passed'] for r in runs)} of {len(runs)} |"
        )
    br = rec["breakdown"]["categories"]
    lines += [
        "",
        "| Category | Tasks | " + " | ".join(f"Outcome ({c})" for c in rec["configurations"]) + " |",
    ]
    lines += ["|---|---:|" + "---:|" * len(rec["configurations"])]
    order = [c for c in CATEGORY_TITLES if c in br] + sorted(c for c in br if c not in CATEGORY_TITLES)
    for name in order:
        row = br[name]
        cells = " | ".join(_pct(row[c]["outcome_pass_rate"]) for c in rec["configurations"])
        lines.append(f"| {CATEGORY_TITLES.get(name, name)} | {row['tasks']} | {cells} |")
    return lines


def render_benchmark(b: dict[str, Any]) -> str:
    m = b["metadata"]
    br = b["breakdown"]
    configs = m["configurations"]
    tasks = len(m["evals_run"])
    pos = br["positive"].get("with_skill") or next(iter(br["positive"].values()), {"tasks": 0})
    neg = br["negative"].get("with_skill") or next(iter(br["negative"].values()), {"tasks": 0})
    lines = [
        f"<!-- Generated by `moe-lc eval run` from {m['evals_file']} and the run's benchmark.json; do not edit by hand. -->",
        "",
        "# Evaluation Report",
        "",
        "## Evaluation Summary",
        "",
        f"- Skill: `{SKILL_NAME}` {m['skill_version']}",
        f"- Evaluation date: {m['timestamp'][:10]} ({m['timestamp']})",
        f"- Agent: `{m['agent']}` (command `{m['agent_command']}`)",
        f"- Dataset: `{m['evals_file']}`, {tasks} tasks ({pos['tasks']} positive, {neg['tasks']} negative), "
        f"sha256 `{m['evals_sha256'][:16]}`",
        f"- Runs per task and configuration: {m['runs_per_configuration']}; configurations: {', '.join(configs)}",
        f"- Grader: {m['grader']}: every expectation is a machine check (patterns, numbers with tolerance, layouts "
        "checked by the engine, tool calls); a task passes when all its expectations pass.",
    ]
    if m.get("command"):
        lines.append(f"- Produced by: `{m['command']}`")
    if m["agent"] == REFERENCE_AGENT:
        lines += [
            "",
            "The reference agent is a deterministic program, not a language model: it reads the question, calls the "
            "MCP server's tools over stdio and writes up what they return, and without the skill it gives the usual "
            "rules of thumb with no tools. Its scores show that the tools answer every task and that the grader "
            "credits such answers; they do not measure an LLM agent. Score one with `moe-lc eval run --agent-cmd`.",
        ]
    lines += ["", "## Results", ""]
    lines += _results(b["run_summary"], br, configs)
    lines += ["", "## Positive and negative tasks", ""]
    lines += [
        "| Configuration | Positive: all checks pass | Positive: outcome checks pass | Positive: outcome pass rate "
        "| Positive: mean pass rate | Negative: skill not used |"
    ]
    lines += ["|---|---:|---:|---:|---:|---:|"]
    for c in configs:
        p, n = br["positive"].get(c), br["negative"].get(c)
        lines.append(
            f"| {c} | {p['tasks_passed']} of {p['runs']} | {p['outcome_tasks_passed']} of {p['runs']} | "
            f"{_pct(p['outcome_pass_rate'])} | {_pct(p['pass_rate'])} | {n['declined']} of {n['runs']} |"
            if p and n
            else f"| {c} | - | - | - | - | - |"
        )
    for rec in b.get("recorded_runs", []):
        lines += _recorded(rec)
    if br["lint"]:
        lines += [
            "",
            "## Lint tasks: recall and precision",
            "",
            "Recall: errors the engine reports that the answer names (by rule code, or by flag in a sentence that "
            "says what is wrong). Precision: of the errors the answer claims, the share the engine reports (false "
            "claims: rule codes it does not report, flags it finds nothing wrong with called wrong, known inventions "
            "such as calling `--cuda-graph-modules` an unknown flag).",
            "",
            "| Configuration | Errors in the configs | Found | Recall | False claims | Precision |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for c in configs:
            x = br["lint"].get(c)
            if x:
                lines.append(
                    f"| {c} | {x['errors']} | {x['found']} | {_pct(x['recall'])} | {x['false_claims']} | "
                    f"{_pct(x['precision']) if x['found'] + x['false_claims'] else 'n/a (no claims)'} |"
                )
    failing = [r for r in b["runs"] if r["configuration"] == "with_skill" and not r["task_passed"]]
    lines += ["", "## Tasks the agent does not pass with the skill", ""]
    if failing:
        for r in failing:
            missed = "; ".join(e["text"] for e in r["expectations"] if not e["passed"])
            lines.append(f"- `{r['eval_id']}` (run {r['run_number']}): {missed}")
    else:
        lines.append("None.")
    lines += [
        "",
        "## Reproduce",
        "",
        "`make evals` runs the same command and rewrites this page and `evals/benchmark.json`; CI runs it with "
        "`--check-against evals/benchmark.json`, which fails when the scores differ from the committed ones. "
        "Any agent can be scored the same way: `moe-lc eval run --agent-cmd '<command>'` (question on stdin, "
        "answer on stdout, `MOE_LC_EVAL_WITH_SKILL` and `MOE_LC_EVAL_TRANSCRIPT` in its environment), or "
        "`moe-lc eval grade answers.jsonl` for recorded answers.",
        "",
    ]
    return "\n".join(lines)
