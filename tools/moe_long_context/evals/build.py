"""evals/tasks.yaml -> evals/evals.json: every expected value computed by the engine's tools.

The source holds what a person writes: the question, the engine calls that answer it (``calls``), the
ground truth and the checks as templates. ``${name.path}`` stands for a value of a call's result (``${cp.cp}``,
``${plan.plans.0.layout}``, ``${off.peak_gib - on.peak_gib}``): a string that is one placeholder becomes the
value itself, a placeholder inside a regular expression is escaped, and ``${path|digits}`` in a regular
expression matches a list of numbers written in any notation ([7, 8, 6], 7/8/6); ``${path|join}`` writes a
list as "a; b; c". A ``lint`` check names the errors the
author planted; the build refuses the task unless they are exactly the engine's errors, then writes one
recall check per error (its code and the flags it names) and one precision check (the codes the engine
reports, the flags it finds nothing wrong with, known inventions). A call's ``expect`` states what its
result must say (a layout is invalid, a setting fits) so that a change in the engine stops the build instead
of silently changing what a task asks.

``moe-lc eval build`` writes evals.json; ``--check`` says whether the committed file is what the engine gives
today (a test runs it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from ..dialects.tables import flags_for, flatten_config, keys_for
from ..errors import InputError
from ..faces.registry import TOOLS_BY_NAME
from .tasks import SKILL_NAME, TASKS_YAML, validate

PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")
ENV_NAMES = {
    "nccl_graph_register": ["NCCL_GRAPH_REGISTER"],
    "expandable_segments": ["PYTORCH_CUDA_ALLOC_CONF"],
}
LAUNCHER_FLAGS = ("--nnodes", "--nproc-per-node", "--nproc_per_node", "NODES", "NNODES")


class BuildError(InputError):
    """The task source cannot be built: the message names the task and what is wrong."""

    def __init__(self, task: str, message: str):
        self.field, self.value, self.allowed, self.hint = "task", task, message, None
        ValueError.__init__(self, f"task {task!r}: {message}")


def run_call(call: dict[str, Any]) -> dict[str, Any]:
    tool = TOOLS_BY_NAME[call["tool"]]
    return tool.call(call["arguments"]).model_dump(mode="json")


def lookup(results: dict[str, Any], path: str) -> Any:
    """A value of a call's result by dotted path (list indices as numbers); a path ending in '?' is None
    when a key is missing (plan settings leave out fields at their defaults)."""
    path = path.strip()
    optional = path.endswith("?")
    name, *parts = path.rstrip("?").split(".")
    value: Any = results[name]
    for part in parts:
        if isinstance(value, list):
            value = value[int(part)]
        elif optional and part not in value:
            return None
        else:
            value = value[part]
    return value


def evaluate(results: dict[str, Any], expr: str) -> Any:
    """``path`` or ``path - path`` (a difference, rounded to 3 decimals)."""
    if " - " in expr:
        left, right = expr.split(" - ", 1)
        return round(lookup(results, left) - lookup(results, right), 3)
    return lookup(results, expr)


def fmt(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    return str(value)


def fill(template: Any, results: dict[str, Any], regex: bool = False) -> Any:
    """Resolve placeholders in a string (or in every string of a list or mapping)."""
    if isinstance(template, dict):
        return {k: fill(v, results, regex or k == "pattern") for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, results, regex) for v in template]
    if not isinstance(template, str):
        return template
    whole = PLACEHOLDER.fullmatch(template.strip())
    if whole and not regex:
        return evaluate(results, whole.group(1))

    def sub(m: re.Match) -> str:
        expr, _, flt = m.group(1).partition("|")
        value = evaluate(results, expr)
        if flt == "digits" and regex:  # a list of numbers in any notation: [7, 8, 6], 7/8/6, 7 8 6
            return r"\D{1,6}".join(re.escape(fmt(v)) for v in value)
        text = "; ".join(fmt(v) for v in value) if flt == "join" else fmt(value)
        return re.escape(text) if regex else text

    return PLACEHOLDER.sub(sub, template)


def _source_of(template: Any) -> dict[str, str] | None:
    if isinstance(template, str) and (m := PLACEHOLDER.fullmatch(template.strip())):
        expr = m.group(1)
        return {"expr": expr}
    return None


def _names_in(text: str) -> list[str]:
    """Flags, dotted Bridge keys and environment variables as written in a launch script or override list
    (the dotted keys of a YAML/JSON config object)."""
    if not re.search(r"(?m)^\s*(?:--|[\w.]+=|export\s|torchrun|python)", text):
        try:
            obj = yaml.safe_load(text)
        except yaml.YAMLError:
            obj = None
        if isinstance(obj, dict):
            return list(flatten_config(obj))
    found = re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9_-]*", text)
    found += re.findall(r"(?m)^\s*(?:export\s+)?([A-Z][A-Z0-9_]+)=", text)
    found += re.findall(r"(?m)^\s*([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+|mixed_precision)=", text)
    return list(dict.fromkeys(found))


def _expand_key(key: str, script_names: list[str]) -> list[str]:
    """A finding key as the launch writes it: flags and keys stay, engine field names become their flags."""
    if key.startswith("-") or "." in key or key.isupper() or key in script_names:
        return [key]
    if key == "num_gpus":
        return [n for n in LAUNCHER_FLAGS if n in script_names]
    return [key, *ENV_NAMES.get(key, []), *flags_for(key), *keys_for(key)]


def lint_checks(task_id: str, spec: dict[str, Any], results: dict[str, Any], question: str) -> list[dict]:
    call_name = spec["call"]
    result = results[call_name]
    arguments = results["__calls__"][call_name]["arguments"]
    script = arguments.get("megatron_args") or arguments.get("bridge_overrides") or arguments.get("config")
    if not isinstance(script, str) or script.strip() not in question:
        raise BuildError(task_id, "the lint call's configuration must be quoted verbatim in the question")
    script_names = _names_in(script)
    errors = [f for f in result["findings"] if f["severity"] == "error"]
    engine_codes = list(dict.fromkeys(f["code"] for f in errors))
    planted = spec["planted"] if spec.get("_fixed", True) else spec["planted_today"]
    if isinstance(planted, dict):  # the truth names the flags at fault; the engine's new rule names the code
        planted = engine_codes
    if sorted(planted) != sorted(engine_codes):
        raise BuildError(
            task_id,
            f"planted errors {sorted(planted)} are not the engine's errors {sorted(engine_codes)}; "
            "fix the task (or the engine) until they agree",
        )
    checks: list[dict] = []
    error_keys: list[str] = []
    for code in engine_codes:
        findings = [f for f in errors if f["code"] == code]
        keys = [name for f in findings for key in f["keys"] for name in _expand_key(key, script_names)]
        keys = list(dict.fromkeys(keys))
        error_keys += keys
        first = findings[0]["message"].split(". ")[0].rstrip(".")
        checks.append(
            {
                "type": "lint_error",
                "text": f"Reports {code}: {first}"
                + (f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""),
                "code": code,
                "flags": [k for k in keys if k in script_names] or keys,
            }
        )
    error_keys = list(dict.fromkeys(error_keys))
    # a flag an upstream check reaches that no rule models is not verified clean: calling it wrong is no false claim
    unverified = {k for n in result.get("not_checked", []) if n.get("source") for k in n["keys"]}
    clean = [n for n in script_names if n not in error_keys and n not in unverified]
    checks.append(
        {
            "type": "lint_precision",
            "text": "Claims no error the engine does not report (no other rule code, no clean flag called wrong"
            + (", none of the known inventions" if spec.get("invented") else "")
            + ")",
            "reported_codes": list(dict.fromkeys(f["code"] for f in result["findings"])),
            "error_keys": error_keys,
            "clean_flags": clean,
            "invented": spec.get("invented", []),
        }
    )
    return checks


def _check_expectations(task_id: str, name: str, result: dict[str, Any], expect: dict[str, Any]) -> None:
    for path, wanted in expect.items():
        got = lookup({name: result}, f"{name}.{path}")
        if got != wanted:
            raise BuildError(task_id, f"call {name!r}: {path} is {got!r}, the task expects {wanted!r}")


def _with_config(value: Any, config: str | None) -> Any:
    """``${config}`` (the configuration a lint task pastes) in the question or a call's arguments."""
    if config is None:
        return value
    if isinstance(value, dict):
        return {k: _with_config(v, config) for k, v in value.items()}
    if isinstance(value, str):
        return value.replace("${config}", config.strip())
    return value


def _engine_fixed(raw: dict[str, Any], results: dict[str, Any]) -> bool:
    """Whether the engine gives the truth a task states. A task marked ``depends_on: issue-N`` names, in each
    lint check, the errors the truth requires (``planted``, from the upstream source) and the ones today's engine
    reports (``planted_today``); ``planted: {flags: [...]}`` stands for an error, whatever its code, that names
    those flags (a rule another issue adds). Until the engine reports the planted ones, the build records today's output and
    leaves out the checks marked ``after_fix``; once it does, the task builds as the truth requires (and
    evals.json changes, so the lead rebuilds it)."""
    if not raw.get("depends_on"):
        return True
    for item in raw["checks"]:
        ((kind, spec),) = item.items()
        if kind != "lint":
            continue
        findings = [f for f in results[spec["call"]]["findings"] if f["severity"] == "error"]
        errors = sorted({f["code"] for f in findings})
        truth = spec["planted"]
        if isinstance(truth, dict):
            # {flags: [...]}: an error whose keys name each flag, beyond the errors of today
            blamed = {
                k for f in findings if f["code"] not in spec.get("planted_today", []) for k in f["keys"]
            }
            norm = {k.lstrip("-").replace("-", "_").split(".")[-1] for k in blamed}
            fixed = all(any(flag in k for k in norm) for flag in truth["flags"])
        else:
            fixed = errors == sorted(truth)
        if not fixed:
            if "planted_today" not in spec:
                raise BuildError(raw["id"], "a depends_on task's lint check needs planted_today")
            return False
    return True


def build_task(raw: dict[str, Any]) -> dict[str, Any]:
    task_id = raw["id"]
    config = raw.get("config")
    results: dict[str, Any] = {"__calls__": {}}
    calls_out = {}
    for name, call in (raw.get("calls") or {}).items():
        call_spec = {"tool": call["tool"], "arguments": _with_config(call["arguments"], config)}
        try:
            result = run_call(call_spec)
        except (InputError, ValueError) as exc:
            raise BuildError(task_id, f"call {name!r} ({call['tool']}) is refused: {exc}") from None
        _check_expectations(task_id, name, result, call.get("expect") or {})
        results[name] = result
        results["__calls__"][name] = call_spec
        calls_out[name] = call_spec
    question = _with_config(raw["question"], config).strip()
    fixed = _engine_fixed(raw, results)
    checks: list[dict] = []
    for item in raw["checks"]:
        ((kind, spec),) = item.items()
        if isinstance(spec, dict) and "after_fix" in spec:
            if not fixed:
                continue  # a check the truth requires, which today's engine does not yet give
            spec = {k: v for k, v in spec.items() if k != "after_fix"}
        if kind == "lint":
            spec = {**spec, "_fixed": fixed}
            checks += lint_checks(task_id, spec, results, question)
            continue
        check = {"type": kind, **fill(spec, results)}
        if kind == "number":
            if (src := _source_of(spec.get("value"))) is not None:
                check["source"] = src
            if not isinstance(check["value"], int | float):
                raise BuildError(task_id, f"number check {spec.get('text')!r} resolves to {check['value']!r}")
        if kind in ("required", "forbidden"):
            try:
                re.compile(check["pattern"])
            except re.error as exc:
                raise BuildError(
                    task_id, f"pattern {check['pattern']!r} is not a regular expression: {exc}"
                ) from None
        checks.append(check)
    return {
        "id": task_id,
        "question": question,
        "expected_skill": SKILL_NAME if raw.get("positive", True) else None,
        "expected_script": None,
        "ground_truth": " ".join(fill(raw["ground_truth"], results).split()),
        "expected_behavior": [fill(b, results) for b in raw["expected_behavior"]],
        "category": raw["category"],
        "engine_calls": calls_out,
        "checks": checks,
    }


def build(source: str | Path | None = None) -> list[dict[str, Any]]:
    path = Path(source) if source else TASKS_YAML
    try:
        spec = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InputError("source", str(path), f"a readable tasks.yaml ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        raise InputError("source", str(path), f"valid YAML ({getattr(exc, 'problem', exc)}{line})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("tasks"), list):
        raise InputError("source", str(path), "a mapping with a 'tasks' list")
    tasks = []
    for raw in spec["tasks"]:
        name = raw.get("id", "?") if isinstance(raw, dict) else "?"
        try:
            tasks.append(build_task(raw))
        except InputError:
            raise
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BuildError(name, f"{type(exc).__name__} {exc} (a missing key or a placeholder path that does "
                             "not exist in the call's result)") from None  # fmt: skip
    validate(tasks)
    return tasks


def render(tasks: list[dict[str, Any]]) -> str:
    return json.dumps(tasks, indent=2, ensure_ascii=False) + "\n"
