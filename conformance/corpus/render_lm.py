"""Megatron-LM core_r0.19's MoE functional tests, rendered as the argv their launcher builds.

A test case is ``tests/functional_tests/test_cases/<model>/<case>/model_config.yaml``; CI runs it through
``tests/functional_tests/shell_test_utils/_run_training.sh``, which turns ``MODEL_ARGS`` into argv with yq
and bash (the rules are restated in ``render_model_args``), on the nodes x GPUs of the recipe in
``tests/test_utils/recipes/`` that lists the case. A case is MoE when its MODEL_ARGS give --num-experts.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

REF = "core_r0.19.0"
CASES = "tests/functional_tests/test_cases"
RECIPES = "tests/test_utils/recipes"
# The launcher's ARGUMENTS (recipe ``script``) with the CI folders written as stand-in paths.
LAUNCH_VARS = {
    "DATA_PATH": "/mnt/artifacts",
    "DATA_CACHE_PATH": "/workspace/data/cache",
    "OUTPUT_PATH": "/workspace/assets",
    "TENSORBOARD_PATH": "/workspace/assets/tensorboard",
    "CHECKPOINT_SAVE_PATH": "/workspace/artifacts/checkpoints",
    "CHECKPOINT_LOAD_PATH": "/mnt/artifacts",
}
_TRUE = {"true", "True", "TRUE"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _scalar_text(node: yaml.Node) -> str | None:
    """A value as yq's ``tostring`` prints it: the scalar's own text (1e-5 stays 1e-5)."""
    if isinstance(node, yaml.ScalarNode):
        return node.value
    return None


def render_model_args(node: yaml.MappingNode, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """argv from a MODEL_ARGS mapping, as _run_training.sh builds it; and notes on what it could not resolve.

    Per entry: ``true`` gives the flag alone; an empty value drops the entry; a value in ( ) or with a space,
    ``|``, ``(`` or ``)`` is double-quoted; a value in [ ] loses its brackets and is split by the shell; any
    other value follows its flag. The string is then split by ``eval``, which expands variables.
    """
    words: list[str] = []
    notes: list[str] = []
    for key_node, value_node in node.value:
        key = key_node.value
        text = _scalar_text(value_node)
        if text is None:
            notes.append(f"{key}: a non-scalar value, rendered as YAML flow text")
            text = yaml.safe_dump(yaml.safe_load(yaml.serialize(value_node)), default_flow_style=True).strip()
        value = " ".join(text.split())  # xargs trims and squeezes whitespace
        if value == "":
            continue
        if value in _TRUE:
            words.append(key)
        elif re.fullmatch(r"\([^)]+\)", value):
            words.append(f'{key} "{value}"')
        elif re.fullmatch(r"\[[^\]]+\]", value):
            words.append(f"{key} {value[1:-1]}")
        elif any(c in value for c in " |()"):
            words.append(f'{key} "{value}"')
        else:
            words.append(f"{key} {value}")
    text = " ".join(words)

    def expand(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in env:
            return env[name]
        notes.append(f"${name} is not set by the launcher: left as written")
        return m.group(0)

    text = re.sub(r"\$\{(\w+)\}|\$(\w+)", expand, text)
    return shlex.split(text), notes


def _env_vars(doc: yaml.MappingNode) -> dict[str, str]:
    for k, v in doc.value:
        if k.value == "ENV_VARS" and isinstance(v, yaml.MappingNode):
            return {a.value: b.value for a, b in v.value}
    return {}


def _section(doc: yaml.MappingNode, name: str) -> yaml.Node | None:
    return next((v for k, v in doc.value if k.value == name), None)


def recipe_world(repo: Path) -> dict[str, dict[str, Any]]:
    """test case -> {nodes, gpus, platform, script, recipe} from the first recipe listing it."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(_git(repo, "ls-tree", "-r", "--name-only", REF, RECIPES).split()):
        if not path.endswith(".yaml"):
            continue
        try:
            data = yaml.safe_load(_git(repo, "show", f"{REF}:{path}"))
        except yaml.YAMLError:
            continue
        spec = (data or {}).get("spec") or {}
        script = re.search(r"TRAINING_SCRIPT_PATH=([^\"\s]+)", spec.get("script", "") or "")
        for product in (data or {}).get("products") or []:
            for case in product.get("test_case") or []:
                out.setdefault(case, {
                    "nodes": product.get("nodes", spec.get("nodes", 1)),
                    "gpus": product.get("gpus", spec.get("gpus", 8)),
                    "platform": path.split("/")[-2],
                    "script": script.group(1) if script else None,
                    "recipe": path,
                })  # fmt: skip
    return out


def _smallest_world(argv: list[str]) -> int:
    """lcm(8, TP x CP x PP, ETP x EP x PP) from the argv (Megatron-LM's defaults for absent sizes)."""
    from math import lcm

    def size(flag: str, default: int) -> int:
        return int(argv[argv.index(flag) + 1]) if flag in argv else default

    tp, pp, cp = (
        size("--tensor-model-parallel-size", 1),
        size("--pipeline-model-parallel-size", 1),
        size("--context-parallel-size", 1),
    )
    ep, etp = size("--expert-model-parallel-size", 1), size("--expert-tensor-parallel-size", tp)
    return lcm(8, tp * cp * pp, etp * ep * pp)


def render(repo: Path) -> list[dict[str, Any]]:
    """Every MoE functional-test case of core_r0.19.0 as an entry (argv, env, world, GPU, source)."""
    commit = _git(repo, "rev-parse", REF).strip()
    worlds = recipe_world(repo)
    entries = []
    paths = _git(repo, "ls-tree", "-r", "--name-only", REF, CASES).split()
    for path in sorted(p for p in paths if p.endswith("/model_config.yaml")):
        text = _git(repo, "show", f"{REF}:{path}")
        doc = yaml.compose(text)
        args = _section(doc, "MODEL_ARGS")
        if not isinstance(args, yaml.MappingNode) or not any(
            k.value == "--num-experts" and v.value not in ("0", "", "null") for k, v in args.value
        ):
            continue
        case = path.split("/")[-2]
        model_dir = path.split("/")[-3]
        world = worlds.get(case, {})
        env = {**LAUNCH_VARS, **_env_vars(doc)}
        argv, notes = render_model_args(args, env)
        script = world.get("script") or "pretrain_gpt.py"
        num_gpus = int(world.get("nodes", 1)) * int(world.get("gpus", 8))
        if not world:
            num_gpus = _smallest_world(argv)
            notes.append(
                f"no recipe at {REF} lists the case: the smallest multiple of 8 GPUs its layout fits "
                f"({num_gpus})"
            )
        entry = {
            "id": f"lm/{model_dir}/{case}",
            "kind": "megatron-lm",
            "source": f"NVIDIA/Megatron-LM@{commit}:{path}",
            "launcher": f"{world.get('recipe', 'no recipe lists the case: 1 node x 8 GPUs')} "
            "via tests/functional_tests/shell_test_utils/_run_training.sh",
            "script": script,
            "num_gpus": num_gpus,
            "gpu": "gb200" if world.get("platform") == "gb200" else "h100",
            "env": _env_vars(doc),
            "argv": argv,
        }
        if notes:
            entry["render_notes"] = notes
        if script != "pretrain_gpt.py":
            entry["skip"] = f"runs {script}, not pretrain_gpt.py (not a training launch the engine reads)"
        entries.append(entry)
    return entries
