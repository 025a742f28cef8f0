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
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .agent_question import COUNT, DIM, HEADROOM, KTOKENS, TOKENS, Catalog, Facts, _int, applies, parse
from .agent_writeup import (
    SPLIT_KEYS,
    WRITERS,
    _describe,
    _fmt,
    _settings_text,
    unseen_codes,
    unverified_lines,
)

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
    report.add(f"{tool} ({title or _describe(arguments)})", WRITERS[tool](result) + unverified_lines(result))
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
ASKS_THROUGHPUT = re.compile(
    r"step\s+time|tokens?\s*(?:/|per)\s*s(?:ec(?:ond)?)?\b|throughput|TFLOP/?s|\bMFU\b", re.I
)
# two layouts the user compares: 'Layout A: TP=.. CP=..; layout B: ...' (each part overrides the sizes)
LAYOUT_MARK = re.compile(r"\b(?:layout|option)\s+([AB12])\s*[:(]", re.I)


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
        if not re.search(r"--num-layers(?![\w-])", text) and facts.model:
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
            summary.append(_lint_summary(r))
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
        args.update(
            {k: facts.fields[k] for k in ("gbs", "lora_dim", "lora_target_modules") if k in facts.fields}
        )
        if m := HEADROOM.search(question):
            args["overhead_gib"] = float(m.group(1) or m.group(2))
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
    if ASKS_THROUGHPUT.search(question) and facts.layout_given:
        await _throughput(question, facts, session, report, summary)
        return _compose(summary, report), True
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


async def _throughput(
    question: str, facts: Facts, session: Session, report: Report, summary: list[str]
) -> None:
    """estimate_throughput on the layout as given, or on each of two layouts the question compares."""
    marks = list(LAYOUT_MARK.finditer(question))
    variants = [("The configuration as given", facts.request())]
    if len(marks) >= 2:
        variants = []
        for i, m in enumerate(marks):
            part = question[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(question)]
            sizes = {d.group(1).lower(): int(d.group(2)) for d in DIM.finditer(part)}
            variants.append((f"Layout {m.group(1)}", {**facts.request(), **sizes}))
    done = []
    for title, args in variants:
        r = await _run(session, report, "estimate_throughput", args, title.lower())
        if r and r["valid"]:
            done.append((title, r))
            lo, hi = r["tokens_per_s_range"]
            summary.append(
                f"{title}: step time {r['step_s']} s for {r['tokens_per_step']} tokens, {r['tokens_per_s']} tokens/s "
                f"(range {lo} to {hi} tokens/s within the model's stated error of +/-{r['stated_error']:.0%}), "
                f"{r['tflops_per_gpu']} TFLOP/s per GPU (model FLOPs), MFU {r['mfu']:.1%} against a dense FP8 peak "
                f"of {r['mfu_denominator_tflops']} per GPU."
            )
        elif r:
            summary.append(_verdict(r, title))
    if len(done) >= 2:
        (fa, a), (_, b) = sorted(done, key=lambda d: -d[1]["tokens_per_s"])[:2]
        gain = a["tokens_per_s"] / b["tokens_per_s"] - 1
        close = gain < a["stated_error"]
        summary.append(
            f"{fa} is faster: {a['tokens_per_s']} vs {b['tokens_per_s']} tokens/s ({gain:.1%} more)"
            + ("; that is within the stated error, so measure both before choosing." if close else ".")
        )


def _verdict(r: dict[str, Any], what: str) -> str:
    errors = list(dict.fromkeys(f["code"] for f in r["findings"] if f["severity"] == "error"))
    if errors:
        return f"{what} is refused by Megatron: {', '.join(errors)} (details and fixes below)."
    if r.get("fits") is False:
        return f"{what} passes every rule but does not fit in GPU memory (peak {r.get('peak_gib')} GiB)."
    unverified = (f"; {_unchecked(r)} upstream checks it reaches are not modelled and stay unverified (under "
                  "Not checked)" if _unchecked(r) else "")  # fmt: skip
    if r.get("fits"):
        return f"{what} passes every rule and fits (peak {r.get('peak_gib')} GiB){unverified}."
    return f"{what} passes every rule the engine checks{unverified}."


def _lint_summary(r: dict[str, Any]) -> str:
    """The one-line verdict on a pasted configuration: refused, open (asserts left to the recipe, or upstream checks
    not modelled), or accepted."""
    errors = list(dict.fromkeys(f["code"] for f in r["findings"] if f["severity"] == "error"))
    if errors:
        return f"lint_config reports {len(errors)} errors Megatron would refuse: {', '.join(errors)}."
    if unseen := unseen_codes(r):
        return (
            f"lint_config reports no error on what the launch shows, but {', '.join(unseen)} depend on values it "
            "leaves to the recipe or environment, which upstream asserts: set them as the warnings below say."
        )
    if _unchecked(r):
        return (
            f"lint_config reports no error on what it checks, but {_unchecked(r)} upstream checks this "
            "configuration reaches are not modelled (under Not checked): those points are unverified."
        )
    return "lint_config reports no error: Megatron accepts this configuration."


def _unchecked(r: dict[str, Any]) -> int:
    """How many upstream checks the result lists as reached but not modelled."""
    return sum(1 for n in r.get("not_checked") or [] if n.get("source"))


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
