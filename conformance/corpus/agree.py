"""Does lint_config agree with upstream's verdict on every corpus entry?

For each entry (its launch as a user would paste it, with the entry's GPU and world size):

- upstream accepts it: lint_config must not refuse it (exit 2) and must report no error finding;
- upstream rejects it: lint_config must report an error whose source cites the raising upstream line (the
  file and a line range that holds it, within ``LINE_SLACK`` lines for a multi-line statement), or refuse it
  in a line that names the flag or key upstream names;
- lint_config hands back a correction: the corrected launch goes through the same upstream judge and must
  pass it.

Every difference is a disagreement, listed by entry, unless ``allowlist.yaml`` here names the entry with a
written reason.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from moe_long_context.errors import InputError
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config

LINE_SLACK = 3
# conformance/allowlist.yaml's engine-only entries for checks upstream makes after configuration (in the first
# step, in Transformer Engine, at model build): no CPU stage reaches them, for the corpus either. Its
# bridge-config entries are checks ConfigContainer.validate makes, which the corpus does run: not excused.
_LATE_PREFIXES = ("runtime-", "te-", "build-")


def late_checks() -> dict[str, str]:
    """rule code -> the allowlist id documenting that upstream checks it after configuration."""
    from ..compare import load_allowlist

    return {code: a.id for a in load_allowlist() if a.direction == "engine-only" and a.id.startswith(_LATE_PREFIXES)
            for code in a.codes}  # fmt: skip


_CITE = re.compile(r"([\w/]+\.py):(\d+)(?:-(\d+))?")


@dataclass
class Agreement:
    id: str
    upstream: str  # accepted | rejected | unresolved | not-built
    engine: str  # accepted | error | refused
    problems: list[str] = field(default_factory=list)
    engine_errors: list[str] = field(default_factory=list)
    refusal: str | None = None
    corrected_verdict: str | None = None
    late: list[str] = field(default_factory=list)  # engine errors upstream checks after configuration


def launch_text(entry: dict[str, Any]) -> str:
    """A Megatron-LM entry as the launch script a user pastes: its exports, then the command."""
    lines = [f"export {k}={shlex.quote(str(v))}" for k, v in sorted(entry.get("env", {}).items())]
    return "\n".join(
        [*lines, "python " + shlex.join([entry.get("script", "pretrain_gpt.py"), *entry["argv"]])]
    )


def parse_launch(text: str) -> tuple[dict[str, str], list[str]]:
    """(exports, argv after the script) of a launch written by ``launch_text`` or corrected by lint_config."""
    env: dict[str, str] = {}
    words = shlex.split(re.sub(r"\\\n", " ", text), comments=True)
    argv: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "export" and i + 1 < len(words) and "=" in words[i + 1]:
            k, _, v = words[i + 1].partition("=")
            env[k] = v
            i += 2
            continue
        if w.endswith(".py"):
            argv = words[i + 1 :]
            break
        i += 1
    return env, argv


def lint_entry(entry: dict[str, Any]):
    """lint_config's result on the entry, or the InputError of a refusal."""
    kw: dict[str, Any] = {"gpu": entry["gpu"], "num_gpus": entry["num_gpus"]}
    if entry["kind"] == "megatron-lm":
        kw["megatron_args"] = launch_text(entry)
    else:
        kw["bridge_overrides"] = entry["overrides"]
        kw["model"] = entry["model"]
    try:
        return lint_config(LintConfigRequest(**kw))
    except InputError as exc:
        return exc


def cites(source: str, where: str) -> bool:
    """Whether a rule's source cites the upstream line ``where`` (``megatron/training/arguments.py:1402``)."""
    path, _, line = where.rpartition(":")
    if not line.isdigit():
        return False
    name, line_no = path.rsplit("/", 1)[-1], int(line)
    for m in _CITE.finditer(source):
        if m.group(1).rsplit("/", 1)[-1] != name:
            continue
        start = int(m.group(2))
        end = int(m.group(3) or start)
        if start - LINE_SLACK <= line_no <= end + LINE_SLACK:
            return True
    return False


def _named(message: str) -> list[str]:
    """The flags (--x) or keys (a.b) an upstream failure names."""
    return re.findall(r"--[a-z0-9][a-z0-9-]*", message) + re.findall(r"\b[a-z_]+\.[a-z_]+\b", message)


def compare(
    entry: dict[str, Any], result, rules: dict[str, str], late: dict[str, str] | None = None
) -> Agreement:
    verdict = entry["verdict"]
    status = verdict["status"]
    if isinstance(result, InputError):
        engine, errs, refusal = "refused", [], str(result)
    else:
        errs = sorted({f.code for f in result.findings if f.severity == "error"})
        engine, refusal = ("error" if errs else "accepted"), None
    out = Agreement(entry["id"], status, engine, engine_errors=errs, refusal=refusal)
    late = late or {}
    out.late = [f"{c} ({late[c]})" for c in errs if c in late]
    if status == "accepted":
        if engine == "refused":
            out.problems.append(f"valid entry refused: {refusal}")
        elif [c for c in errs if c not in late]:
            out.problems.append("false error: " + ", ".join(c for c in errs if c not in late))
    elif status == "rejected":
        first = verdict["first_failure"]
        if engine == "refused":
            names = _named(first["message"])
            if names and not any(n in refusal for n in names):
                out.problems.append(
                    f"refused, but not for what upstream names ({', '.join(names)}): {refusal}"
                )
        elif first["where"] == "argparse":  # argparse names the flag: an error keyed on it
            names = _named(first["message"])
            keyed = [f for f in result.findings if f.severity == "error" and set(f.keys) & set(names)]
            if not keyed:
                out.problems.append(f"missed rejection: argparse: {first['message'][:200]}")
        elif not any(cites(rules.get(code, ""), first["where"]) for code in errs):
            out.problems.append(
                f"missed rejection: upstream {first['stage']} {first['where']}: {first['message'][:200]}"
                + (f"; engine errors {errs} cite other lines" if errs else "")
            )
    return out
