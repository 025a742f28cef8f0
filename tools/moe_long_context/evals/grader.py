"""The grader: an answer to a task -> skill-creator's grading.json, by checks anyone can rerun.

An answer record is ``{"id", "answer", "tool_calls": [{"name", "arguments"}], "used_skill"}`` (the last two
optional). Each of the task's checks becomes one expectation ``{text, passed, evidence}``:

- ``required`` / ``forbidden``: a regular expression the answer must (must not) match.
- ``number``: the answer states a value within a tolerance, next to its label (``CP = 32``, ``52.9 GiB``).
- ``layouts``: every parallel layout the answer states (or at least N of them) passes check_dp_budget with
  the pipeline split, comm type and batch the answer gives, and, when asked, fits memory with some recompute
  and optimizer offload the engine accepts (pick_recompute).
- ``tool_called`` / ``tool_not_called``: the recorded tool calls (MCP names, client prefixes removed).
- ``lint_error``: one real error of a lint task, named by its code or by its flag in a sentence that says
  what is wrong (recall); ``lint_precision``: no error claimed that the engine does not report: rule codes
  the engine did not report, flags it found nothing wrong with called wrong, and the task's known inventions.
- ``skill_not_used``: for negative tasks, the skill was not used (no call to its tools either).

Each expectation is either *outcome* (what the answer says: every content check) or *process* (how it got
there: the tool-use checks); grading.json's summary gives both apart, so an agent without tools is judged on
its content as well as failed on its process.

Precision checks (forbidden, tool_not_called, lint_precision, skill_not_used) are credited only when a recall
check passed: an answer that says nothing makes no false claim, but earns nothing for it. Same record, same
grade: nothing here depends on time, order of dictionaries or the machine.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..engine.rules import rule_table
from ..errors import InputError
from ..faces.registry import TOOLS, TOOLS_BY_NAME
from ..model.catalog import load_gpu, load_model
from ..tools.plan_search import default_dispatcher, default_precision
from ..tools.size_cp import comm_type_for
from . import extract, reading
from .tasks import PRECISION_TYPES, PROCESS_TYPES, RECALL_TYPES

ENGINE_TOOLS = frozenset(tool.name for tool in TOOLS)
GRADER_VERSION = "2"
# An answer of at least this many words of prose that restates a number of the question is an attempt at it: its
# precision checks (no false claim) are credited even when none of the expected content is found. Any other answer
# must show some expected content first (a generic or empty answer makes no false claim but earns nothing for it).
ATTEMPT_WORDS = 40


def tool_name(name: str) -> str:
    """An MCP tool name without a client's prefix (Claude Code: mcp__<server>__<tool>)."""
    return name.rsplit("__", 1)[-1] if "__" in name else name


class Answer:
    """One recorded answer, with what the checks need computed once."""

    def __init__(self, record: dict[str, Any], question: str = ""):
        self.text: str = record.get("answer") or ""
        self.question = question
        self.code_lines = [line for s in extract.segments(self.text) if s.code for line in s.lines()]
        asked = {n for n, _, _ in extract.numbers(question) if n >= 10}
        said = {n for n, _, _ in extract.numbers(self.text)}
        # an attempt: enough prose, and about the user's case (it restates a number of the question)
        self.attempt = len(extract.prose(self.text).split()) >= ATTEMPT_WORDS and bool(asked & said)
        self.calls = [
            (tool_name(str(c.get("name", ""))), c.get("arguments") or {})
            for c in record.get("tool_calls") or []
        ]
        self.tools = {name for name, _ in self.calls}
        used = record.get("used_skill")
        self.used_skill = bool(used) if used is not None else bool(self.tools & ENGINE_TOOLS)


# --------------------------------------------------------------------------- checks


ROLE_CHECK = re.compile(r"^(?:Recommends|Proposes|Picks|Chooses)\b")


def _required(check: dict, a: Answer) -> tuple[bool, str]:
    rx = re.compile(check["pattern"], re.I | re.M)
    if ROLE_CHECK.match(check["text"]):
        # a recommendation counts where the answer recommends, not where it lists options or a fallback
        for u in reading.units(a.text):
            m = rx.search(u.read)
            if (
                m
                and not u.alternative()
                and (reading.RECOMMEND.search(u.read) or not reading.OPTIONS.search(u.text))
            ):
                return True, f"recommends: {extract.snippet(u.read, m.start(), m.end())!r}"
        for line in a.code_lines:
            if m := rx.search(line):
                return True, f"found in a command: {extract.snippet(line, m.start(), m.end())!r}"
        if rx.search(a.text):
            return (
                False,
                f"/{check['pattern']}/ matches only where the answer offers an alternative or a fallback",
            )
        return False, f"no match for /{check['pattern']}/"
    for view in [a.text, *reading.contexts(a.text), *reading.rank_lists(a.text)]:
        if m := rx.search(view):
            return True, f"found: {extract.snippet(view, m.start(), m.end())!r}"
    return False, f"no match for /{check['pattern']}/"


def _forbidden(check: dict, a: Answer) -> tuple[bool, str]:
    made, quoted = reading.claims(check["pattern"], a.text)
    if made:
        return False, f"the answer says {made[0]!r}"
    if quoted:
        return True, f"quotes it only to call it wrong: {quoted[0]!r}"
    return True, "no such claim"


def _number(check: dict, a: Answer) -> tuple[bool, str]:
    tol = max(check.get("abs_tol", 0), check.get("rel_tol", 0) * abs(check["value"]))
    stated = reading.stated_values(a.text, check.get("context"))
    shown = f" (within {check['rel_tol']:.0%})" if check.get("rel_tol") else ""
    for s in stated:
        if not s.alternative and abs(s.value - check["value"]) <= tol + 1e-9:
            return True, f"states {check['value']}{shown}: {s.where!r}"
    given = [s for s in stated if not s.alternative]
    alternatives = [s for s in stated if s.alternative and abs(s.value - check["value"]) <= tol + 1e-9]
    if alternatives:
        return False, (
            f"expected {check['value']}{shown}; the answer gives it only as an alternative or a value it rejects: "
            f"{alternatives[0].where!r}"
        )
    if given:
        return False, f"expected {check['value']}{shown}; the answer states " + "; ".join(
            repr(s.where) for s in given[:3]
        )
    return False, f"expected {check['value']}{shown}; no labelled value in the answer"


def _tools(spec: str | list[str]) -> frozenset[str]:
    """'*' (any engine tool), one tool name, or a list of them."""
    if spec == "*":
        return ENGINE_TOOLS
    return frozenset([spec] if isinstance(spec, str) else spec)


def _tool_called(check: dict, a: Answer) -> tuple[bool, str]:
    called = sorted(a.tools & _tools(check["tool"]))
    if called:
        return True, f"called {', '.join(called)}"
    wanted = "an engine tool" if check["tool"] == "*" else " or ".join(sorted(_tools(check["tool"])))
    return False, f"{wanted} not called (calls: {', '.join(sorted(a.tools)) or 'none'})"


def _tool_not_called(check: dict, a: Answer) -> tuple[bool, str]:
    wanted = _tools(check["tool"])
    called = sorted(a.tools & wanted)
    if called:
        return False, f"called {', '.join(called)}"
    return True, "not called"


def _skill_not_used(check: dict, a: Answer) -> tuple[bool, str]:
    if a.used_skill:
        return False, "the skill was used" + (f" (tools: {', '.join(sorted(a.tools))})" if a.tools else "")
    return True, "the skill was not used and none of its tools was called"


# ----------------------------------------------------------------- layouts


def _call(tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """A tool result as JSON, or None when the engine refuses the input (a layout it cannot even read)."""
    try:
        return TOOLS_BY_NAME[tool].call(arguments).model_dump(mode="json")
    except (InputError, ValueError):
        return None


COMM_TYPE = re.compile(r"(?:cp[-_ ]comm[-_ ]type|comm)\W{0,4}(a2a\+p2p|all_gather|a2a|p2p)", re.I)
HIERARCHY = re.compile(
    r"hierarchical[-_ ]c(?:ontext[-_ ]parallel|p)[-_ ]sizes\W{0,4}\[?\s*(\d+)[,\s]+(\d+)", re.I
)


def _comm(base: dict, mention: extract.LayoutMention, tp: int, cp: int) -> dict[str, Any]:
    """The cp_comm_type the answer states next to the layout, else the one size_cp would choose."""
    if cp == 1:
        return {}
    m = COMM_TYPE.search(mention.segment)
    model, gpu = load_model(base["model"]), load_gpu(base["gpu"]) if base.get("gpu") else None
    chosen, hierarchy, _ = comm_type_for(model, gpu, tp, cp)
    comm = m.group(1).lower() if m else chosen
    out: dict[str, Any] = {"cp_comm_type": comm}
    if comm == "a2a+p2p":
        h = HIERARCHY.search(mention.segment)
        out["hierarchical_cp_sizes"] = [int(h.group(1)), int(h.group(2))] if h else hierarchy
    return out


def _fits(args: dict[str, Any]) -> tuple[bool, str]:
    """Some recompute (and, failing that, optimizer CPU offload) the engine accepts makes the layout fit."""
    gpu = load_gpu(args["gpu"])
    trial = {
        "precision": default_precision(gpu),
        "dispatcher": default_dispatcher(gpu) if args.get("ep", 1) > 1 else "alltoall",
        **args,
    }
    for offload in (0.0, 0.5, 1.0):
        extra = (
            {"optimizer_cpu_offload_fraction": offload, "use_precision_aware_optimizer": True}
            if offload
            else {}
        )
        # an answer's layout must fit the GPU; the 5 % headroom plans keep is the planner's margin, not a rule
        result = _call("pick_recompute", {**trial, **extra, "headroom": 0.0})
        if result is None:
            return False, "the engine cannot estimate it"
        if result["fits"]:
            how = result["recompute_granularity"] or "no recompute"
            if result["recompute_modules"]:
                how += " " + ",".join(result["recompute_modules"])
            return (
                True,
                f"fits at {result['peak_gib_after'] or result['peak_gib_before']} GiB ({how}, offload {offload:.0%})",
            )
    return False, f"does not fit {result['usable_gib']} GiB even with recompute and full optimizer offload"


def _layout_verdict(
    mention: extract.LayoutMention, check: dict, splits: list[dict], batch: dict
) -> tuple[bool, str]:
    base = check["base"]
    d = mention.dims
    tp, cp, pp, ep = d.get("tp", 1), d.get("cp", 1), d.get("pp", 1), d.get("ep", 1)
    args: dict[str, Any] = {**base, "tp": tp, "cp": cp, "pp": pp, "ep": ep}
    for key in ("vpp", "etp"):
        if key in d:
            args[key] = d[key]
    if args.get("vpp") == 1:
        args["vpp"] = None
    args.update(_comm(base, mention, tp, cp))
    args.setdefault("mbs", batch.get("mbs", 1))
    if "gbs" not in base:
        dp = base["num_gpus"] // (tp * cp * pp) if base["num_gpus"] % (tp * cp * pp) == 0 else 1
        args["gbs"] = batch.get(
            "gbs", args["mbs"] * dp * 8 * pp
        )  # plan_layout's default: 8 x PP microbatches
    budget_fields = TOOLS_BY_NAME["check_dp_budget"].request.model_fields
    problems = []
    for split in splits:
        trial = {**args, **split}
        result = _call("check_dp_budget", {k: v for k, v in trial.items() if k in budget_fields})
        if result is None:
            problems.append("the engine cannot read it")
            continue
        errors = [f["code"] for f in result["findings"] if f["severity"] == "error"]
        if errors:
            problems.append(", ".join(dict.fromkeys(errors)))
            continue
        stated = {k: d[k] for k in ("dp", "edp") if k in d}
        wrong = {k: v for k, v in stated.items() if result[k] != v}
        if wrong:
            return False, f"{mention.describe()}: states " + ", ".join(
                f"{k.upper()}={v} but the engine derives {k.upper()}={result[k]}" for k, v in wrong.items()
            )
        how = f"{result['layout']}" + (f" with {split}" if split else "")
        if check.get("fit_memory"):
            ok, why = _fits(trial)
            return ok, f"{how}: {why}"
        return True, f"{how}: check_dp_budget passes"
    return False, f"{mention.describe()}: check_dp_budget errors {' / '.join(dict.fromkeys(problems))}"


def _layouts(check: dict, a: Answer) -> tuple[bool, str]:
    mentions = extract.layout_mentions(a.text)
    own = bool(mentions)
    if not own:  # an answer that applies a split (or a batch) to the user's layout is judged on that layout
        mentions = extract.layout_mentions(a.question)
    splits = extract.pipeline_splits(a.text)
    batch = extract.batch_sizes(a.text)
    # the split and batch written next to a layout come first, then any the answer states elsewhere
    verdicts = [
        _layout_verdict(
            m,
            check,
            [*extract.pipeline_splits(m.segment)[1:], *splits],
            {**batch, **extract.batch_sizes(m.segment)},
        )
        for m in mentions
    ]
    good = [why for ok, why in verdicts if ok]
    bad = [why for ok, why in verdicts if not ok]
    need = check.get("min_count", 1)
    every = check.get("scope", "all") == "all"
    passed = (len(verdicts) >= need and not bad) if every else len(good) >= need
    if not verdicts:
        return False, "no layout stated (TP, CP, PP and EP together)"
    shown = (bad + good)[:4]
    whose = "" if own else "the question's layout with the answer's split and batch: "
    summary = whose + f"{len(good)} of {len(verdicts)} layouts pass: " + "; ".join(shown)
    return passed, summary


# ----------------------------------------------------------------- lint


def _lint_error(check: dict, a: Answer) -> tuple[bool, str]:
    code = check["code"]
    if re.search(rf"\b{re.escape(code)}\b", a.text):
        return True, f"names {code}"
    # the flag (or its name in plain words) and the fault, in one sentence read with its lead or the line
    # before it (a flag on one line, what is wrong with it on the next)
    views = [u for u in reading.units(a.text) if not reading.disclaimed(u)]
    texts = [u.read for u in views] + [
        f"{x.text} {y.text}" for x, y in itertools.pairwise(views) if x.block != y.block
    ]
    for text in texts:
        if not (extract.ERROR_CLAIM.search(text) or extract.FIX_WORDS.search(text)):
            continue
        for flag in check["flags"]:
            if reading.plain_mention(text, flag):
                return True, f"says what is wrong with {flag}: {text.strip()[:160]!r}"
    return False, f"neither {code} nor its flags ({', '.join(check['flags'])}) named as a problem"


def lint_false_claims(check: dict, a: Answer) -> list[str]:
    """Errors the answer claims that the engine does not report. Flags it lists as fine or "not checked", and
    rules it quotes to call them wrong, are not claims."""
    known = set(rule_table())
    reported = set(check["reported_codes"])
    claims: list[str] = []
    sentences = [u for u in reading.units(a.text) if not reading.disclaimed(u)]
    code_units = [s.text for s in extract.segments(a.text) if s.code]
    for unit in [u.text for u in sentences] + code_units:
        for code in extract.codes_in(unit, known):
            if code not in reported:
                claims.append(f"claims {code}, which the engine does not report")
    previous, block = "", None
    for u in sentences:
        context = f"{previous if u.block == block else ''} {u.text}"
        previous, block = u.text, u.block
        if not extract.ERROR_CLAIM.search(u.text):
            continue
        if any(extract.mentions(context, k) for k in check["error_keys"]) or extract.codes_in(
            context, reported
        ):
            continue  # about a real error (its code or flag is named here or just before), whatever else it names
        clean = [f for f in check["clean_flags"] if extract.mentions(u.text, f)]
        if clean:
            claims.append(f"calls {clean[0]} wrong: {u.text.strip()[:140]!r}")
    for invented in check.get("invented", []):
        made, _ = reading.claims(invented["pattern"], a.text)
        if made:
            claims.append(f"{invented['text']}: {made[0]!r}")
    return list(dict.fromkeys(claims))


def _lint_precision(check: dict, a: Answer) -> tuple[bool, str]:
    claims = lint_false_claims(check, a)
    if claims:
        return False, "; ".join(claims[:4])
    return True, "every error it claims is one the engine reports"


CHECKS = {
    "required": _required,
    "forbidden": _forbidden,
    "number": _number,
    "layouts": _layouts,
    "tool_called": _tool_called,
    "tool_not_called": _tool_not_called,
    "lint_error": _lint_error,
    "lint_precision": _lint_precision,
    "skill_not_used": _skill_not_used,
}


# --------------------------------------------------------------------------- grading


def grade(task: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """grading.json for one answer: expectations in the task's check order, a summary, lint counts."""
    a = Answer(record, task.get("question", ""))
    raw = [(check, *CHECKS[check["type"]](check, a)) for check in task["checks"]]
    recalled = any(ok for check, ok, _ in raw if check["type"] in RECALL_TYPES) or a.attempt
    expectations = []
    for check, ok, evidence in raw:
        if ok and check["type"] in PRECISION_TYPES and not recalled:
            ok, evidence = (
                False,
                f"not credited: {evidence}, but the answer shows none of the expected content",
            )
        kind = "process" if check["type"] in PROCESS_TYPES else "outcome"
        expectations.append({"text": check["text"], "passed": ok, "evidence": evidence, "kind": kind})
    passed = sum(e["passed"] for e in expectations)
    total = len(expectations)
    parts = {}
    for kind in ("outcome", "process"):
        mine = [e for e in expectations if e["kind"] == kind]
        parts[kind] = {
            "passed": sum(e["passed"] for e in mine),
            "total": len(mine),
            "pass_rate": round(sum(e["passed"] for e in mine) / len(mine), 4) if mine else None,
        }
    out: dict[str, Any] = {
        "eval_id": task["id"],
        "expectations": expectations,
        "summary": {
            "passed": passed,
            "failed": total - passed,
            "total": total,
            "pass_rate": round(passed / total, 4) if total else 0.0,
            **parts,
        },
        "execution_metrics": {
            "tool_calls": len(a.calls),
            "tools": sorted(a.tools),
            "used_skill": a.used_skill,
            "answer_chars": len(a.text),
        },
        "grader": f"moe-lc eval grade (deterministic checks, version {GRADER_VERSION})",
    }
    lint_checks = [c for c in task["checks"] if c["type"] == "lint_error"]
    precision = next((c for c in task["checks"] if c["type"] == "lint_precision"), None)
    if lint_checks and precision is not None:
        found = sum(ok for check, ok, _ in raw if check["type"] == "lint_error")
        out["lint"] = {
            "errors": len(lint_checks),
            "found": found,
            "false_claims": len(lint_false_claims(precision, a)),
        }
    return out


def task_passed(grading: dict[str, Any]) -> bool:
    return grading["summary"]["failed"] == 0


def read_answers(path: str | Path) -> list[dict[str, Any]]:
    """Answer records from a JSONL file; a line that is not a JSON object with id and answer is refused."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise InputError("answers", str(path), f"a readable JSONL file ({exc.strerror})") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError.plain(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise InputError.plain(f"{path}:{number}: expected an object with a string 'id'")
        if not isinstance(record.get("answer", ""), str):
            raise InputError.plain(f"{path}:{number}: 'answer' must be a string")
        calls = record.get("tool_calls", [])
        if not isinstance(calls, list) or not all(isinstance(c, dict) and "name" in c for c in calls):
            raise InputError.plain(
                f"{path}:{number}: 'tool_calls' must be a list of {{name, arguments}} objects"
            )
        records.append(record)
    return records


def grade_records(
    tasks: Iterable[dict[str, Any]], records: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(task, grading) for each record, in the records' order; an id the task file lacks is refused."""
    by_id = {t["id"]: t for t in tasks}
    unknown = [r["id"] for r in records if r["id"] not in by_id]
    if unknown:
        raise InputError.plain(f"unknown task id {unknown[0]!r} (not in the evals file)")
    return [(by_id[r["id"]], grade(by_id[r["id"]], r)) for r in records]
