"""The eval task file: where it lives, loading it, validating it against its JSON Schema."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from ..errors import InputError

SKILL_NAME = "nemo-mbridge-perf-moe-long-context"
REPO = Path(__file__).resolve().parents[3]  # tools/moe_long_context/evals/ -> the repository root
EVALS_DIR = REPO / "evals"
EVALS_JSON = EVALS_DIR / "evals.json"
SCHEMA_JSON = EVALS_DIR / "evals.schema.json"
TASKS_YAML = EVALS_DIR / "tasks.yaml"
BENCHMARK_JSON = EVALS_DIR / "benchmark.json"
BENCHMARK_MD = REPO / "BENCHMARK.md"

# Check types that look for evidence of a right answer (recall) and those that look for what must not be
# there (precision). A precision check is only credited when the answer has shown at least one piece of
# evidence: an empty answer makes no false claim, but it has not earned the point either.
RECALL_TYPES = ("required", "number", "layouts", "tool_called", "lint_error")
PRECISION_TYPES = ("forbidden", "tool_not_called", "lint_precision", "skill_not_used")
# Tool-use checks (process); every other check is about what the answer says (outcome).
PROCESS_TYPES = ("tool_called", "tool_not_called", "skill_not_used")


# Messages for schema rules whose own message would quote a whole task.
HINTS = {
    "contains": "a check of a required type is missing (a negative task needs skill_not_used, a positive task a "
    "forbidden or lint_precision check)",
    "oneOf": "a check does not match its type's fields (see the check definitions in the schema)",
    "minItems": "too few items",
}


def is_positive(task: dict[str, Any]) -> bool:
    return task.get("expected_skill") is not None


@cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_JSON.read_text())


def validate(tasks: Any) -> None:
    """Raise InputError naming the first place the task list breaks the schema (or repeats an id)."""
    try:
        jsonschema.Draft202012Validator(
            schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        ).validate(tasks)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        message = HINTS.get(exc.validator, exc.message) if len(exc.message) > 160 else exc.message
        raise InputError.plain(
            f"evals file does not match {SCHEMA_JSON.name} at {where}: {message}"
        ) from None
    seen: set[str] = set()
    for task in tasks:
        if task["id"] in seen:
            raise InputError.plain(f"evals file repeats the task id {task['id']!r}")
        seen.add(task["id"])


def load_tasks(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The task list of an evals.json (the repository's by default), validated."""
    path = Path(path) if path else EVALS_JSON
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError("evals", str(path), f"a readable evals.json ({exc.strerror})") from None
    try:
        tasks = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError("evals", str(path), f"valid JSON ({exc.msg} at line {exc.lineno})") from None
    validate(tasks)
    return tasks


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
