"""Megatron-MoE-ModelZoo's public launches, rendered as its ``sbatch_benchmarking.sh`` composes them.

Two kinds of launch: every model of ``runtime_configs/benchmarking/runtime.conf`` with its table defaults
(``MODEL=<name> bash sbatch_benchmarking.sh``), and every ``sbatch_benchmarking.sh`` line of the
``best_practice/`` scripts with the variables exported before it. ``compose`` restates the script's steps in
order (common.conf, runtime.conf, the cluster template, envsubst of the model YAML, yq's MODEL_ARGS rule,
then the flags it appends); the training command is ``python pretrain_gpt.py ${TRAINING_PARAMS}``, split on
whitespace with no quote removal (it runs as ``bash -c ${TRAINING_CMD}``). The cluster template's
``YOUR_*`` placeholders stand for the paths a user fills in.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

REF = "HEAD"
_COLUMNS = ("TP", "PP", "EP", "CP", "VPP", "MBS", "GBS", "NUM_LAYERS", "MOE_TOKEN_DISPATCHER", "MOE_GROUPED_GEMM",
            "NNODES", "RUN_TIME", "PRETRAIN", "SEQ_LEN", "DATASET", "PP_FIRST", "PP_LAST")  # fmt: skip
_GPU_BY_NAME = (("gb300", "gb300"), ("gb200", "gb200"), ("b200", "b200"), ("h100", "h100"))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def model_table(runtime_conf: str) -> dict[str, list[str]]:
    """runtime.conf's BENCHMARKING_MODEL_CONFIGS: model -> its columns."""
    return {m.group(1): m.group(2).split() for m in re.finditer(r'\[([\w.-]+)\]="([^"]*)"', runtime_conf)}


def expand(text: str, env: dict[str, str]) -> str:
    """Bash parameter expansion of ${V}, $V and ${V:-word} (unset is empty)."""
    out, i = "", 0
    while i < len(text):
        if text.startswith("${", i):
            depth, j = 1, i + 2
            while j < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            body = text[i + 2 : j - 1]
            name, sep, word = body.partition(":-")
            value = env.get(name, "")
            if sep and value == "":
                value = expand(word, env).strip('"')
            out += value
            i = j
        elif text[i] == "$" and i + 1 < len(text) and (text[i + 1].isalpha() or text[i + 1] == "_"):
            m = re.match(r"\$(\w+)", text[i:])
            out += env.get(m.group(1), "")
            i += len(m.group(0))
        else:
            out += text[i]
            i += 1
    return out


def _model_args_line(node: yaml.MappingNode) -> str:
    """yq: drop "false", "true" becomes the flag alone, else "key value"; entries joined by spaces."""
    words = []
    for k, v in node.value:
        value = v.value if isinstance(v, yaml.ScalarNode) else ""
        if value == "false":
            continue
        words.append(k.value + " " + ("" if value == "true" else value))
    return " ".join(words)


def compose(repo: Path, env_in: dict[str, str], args: list[str]) -> dict[str, Any]:
    """The training command sbatch_benchmarking.sh builds for these variables and arguments."""
    env = {"WORKSPACE": "/workspace/Megatron-MoE-ModelZoo", "PWD": "/workspace/Megatron-MoE-ModelZoo",
           "MEGATRON_PATH": "/workspace/Megatron-LM", **{k: v for k, v in env_in.items()}}  # fmt: skip
    for name, default in (("MODEL", "your_own_model"), ("CLUSTER", "template"),
                          ("MCORE_RELEASE_VERSION", "your_own_megatron_version")):  # fmt: skip
        env[name] = env.get(name) or default
    env["TRAINING_SCRIPT_PATH"] = env.get("TRAINING_SCRIPT_PATH") or f"{env['MEGATRON_PATH']}/pretrain_gpt.py"
    env["COMMENT"] = env.get("COMMENT") or f"v{env['MCORE_RELEASE_VERSION']}"  # common.conf
    env["WANDB_PROJECT"] = env.get("WANDB_PROJECT") or f"moe-benchmarking-v{env['MCORE_RELEASE_VERSION']}"
    env["PR"] = env.get("PR") or "bf16"
    env["PROFILE"] = env.get("PROFILE") or "0"
    table = model_table(_git(repo, "show", f"{REF}:runtime_configs/benchmarking/runtime.conf"))
    config = table[env["MODEL"]]
    for i, name in enumerate(_COLUMNS[:15]):
        env[name] = env.get(name) or config[i]
    pp, vpp, layers = (int(env[n]) for n in ("PP", "VPP", "NUM_LAYERS"))
    env["LAYERS_PER_VP"] = env.get("LAYERS_PER_VP") or (str(layers // pp // vpp) if vpp > 1 else "false")
    if layers % pp:
        env["PP_FIRST"] = env.get("PP_FIRST") or config[15]
        env["PP_LAST"] = env.get("PP_LAST") or config[16]
    else:
        env["PP_FIRST"] = env["PP_LAST"] = "false"
    for name, placeholder in (("DATA_PATH", "YOUR_DATA_PATH"), ("TOKENIZER_MODEL", "YOUR_TOKENIZER_MODEL"),
                              ("LOAD_PATH", "YOUR_CHECKPOINT_PATH"),
                              ("OUTPUT_PATH", f"YOUR_OUTPUT_DIR/{env['MODEL']}")):  # fmt: skip
        env[name] = env.get(name) or placeholder
    model_yaml = f"model_configs/benchmarking/{env['MODEL']}.yaml"
    doc = yaml.compose(expand(_git(repo, "show", f"{REF}:{model_yaml}"), env))
    sections = {k.value: v for k, v in doc.value}
    params = " " + _model_args_line(sections["MODEL_ARGS"]) + (" " + " ".join(args) if args else "")
    exported = {k.value: v.value for k, v in sections.get("ENV_VARS", yaml.MappingNode("", [])).value}
    if vpp > 1 and not any(f in params for f in ("--pipeline-model-parallel-layout",
                                                  "--num-virtual-stages-per-pipeline-rank",
                                                  "--num-layers-per-virtual-pipeline-stage")):  # fmt: skip
        params += f" --num-virtual-stages-per-pipeline-rank {vpp}"
    if layers % pp and "--pipeline-model-parallel-layout" not in params:
        params += f" --decoder-first-pipeline-num-layers {env['PP_FIRST']} --decoder-last-pipeline-num-layers {env['PP_LAST']}"
    offload = env.get("OPTIMIZER_OFFLOAD") or "0"
    if offload == "1":
        params += " --optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d"
    dispatcher = env.get("DISPATCHER") or "deepep"
    params += {
        "alltoall": " --moe-token-dispatcher-type alltoall",
        "deepep": " --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep",
        "hybridep": " --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-hybridep-num-sms 32",
    }.get(dispatcher, "")
    precision_opt = (" --use-precision-aware-optimizer --main-grads-dtype fp32 --main-params-dtype fp32"
                     " --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16")  # fmt: skip
    if env["PR"] == "fp8":
        params += " --fp8-recipe blockwise --fp8-format e4m3"
        params += " --fp8-param-gather" if offload == "0" else ""
        params += precision_opt + " --moe-router-padding-for-fp8"
    if env["PR"] == "bf16":
        params += " --tp-comm-overlap"
    if env["PR"] == "mxfp8":
        params += " --fp8-recipe mxfp8 --fp8-format e4m3"
        if offload == "0":
            params += " --fp8-param-gather --reuse-grad-buf-for-mxfp8-param-ag --overlap-grad-reduce --overlap-param-gather"
        params += precision_opt + " --moe-router-padding-for-quantization"
    a2a = (env.get("A2A_OVERLAP") or "0") == "1"
    exported["CUDA_DEVICE_MAX_CONNECTIONS"] = "32" if a2a else "1"
    exported["NVTE_FWD_LAYERNORM_SM_MARGIN"] = exported["NVTE_BWD_LAYERNORM_SM_MARGIN"] = "24" if a2a else "0"
    if a2a:
        params += " --delay-wgrad-compute --overlap-moe-expert-parallel-comm"
    max_pos = next(
        (v.value for k, v in sections["MODEL_ARGS"].value if k.value == "--max-position-embeddings"), ""
    )
    if max_pos and env.get("SEQ_LEN") and int(env["SEQ_LEN"]) > int(max_pos):
        params += f" --max-position-embeddings {env['SEQ_LEN']}"
    if env["PROFILE"] in ("1", "nsys"):
        params += " --profile --profile-step-start 23 --profile-step-end 25 --profile-ranks 0 "
    elif env["PROFILE"] == "torch":
        params += " --profile --profile-step-start 23 --profile-step-end 25 --profile-ranks 0 --use-pytorch-profiler"
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER", "NVTE_CPU_OFFLOAD_V1"):
        if env_in.get(name):  # exported by the best-practice script itself (inherited by the job)
            exported.setdefault(name, env_in[name])
    per_node = 4 if (env.get("GB200_CLUSTER") or "0") == "1" else 8
    return {
        "argv": params.split(),
        "env": exported,
        "num_gpus": int(env["NNODES"]) * per_node,
        "model_yaml": model_yaml,
        "model": env["MODEL"],
    }


def _script_launches(text: str) -> list[tuple[dict[str, str], list[str], str | None]]:
    """(variables, arguments, GPU named by the comment above it) per sbatch_benchmarking.sh line."""
    env: dict[str, str] = {}
    out = []
    joined = re.sub(r"\\\n", " ", text)
    gpu = None
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):  # the comment above a launch names its GPU ("# B200 config ...")
            gpu = next((g for key, g in _GPU_BY_NAME if key in stripped.lower()), gpu)
        if not stripped or stripped.startswith("#"):
            continue
        words = shlex.split(expand(stripped, env), comments=True)
        if not words:
            continue
        if words[0] == "export":
            words = words[1:]
        assigns = {}
        while words and re.match(r"^\w+=", words[0]):
            name, _, value = words.pop(0).partition("=")
            assigns[name] = value
        if not words:
            env.update(assigns)
            continue
        if any(w.endswith("sbatch_benchmarking.sh") for w in words):
            at = next(i for i, w in enumerate(words) if w.endswith("sbatch_benchmarking.sh"))
            out.append(({**env, **assigns}, words[at + 1 :], gpu))
    return out


def _gpu(path: str) -> str:
    name = path.lower()
    return next((gpu for key, gpu in _GPU_BY_NAME if key in name), "h100")


def render(repo: Path) -> list[dict[str, Any]]:
    commit = _git(repo, "rev-parse", REF).strip()
    entries = []
    table = model_table(_git(repo, "show", f"{REF}:runtime_configs/benchmarking/runtime.conf"))
    for model in table:
        launch = compose(repo, {"MODEL": model}, [])
        entries.append({
            "id": f"modelzoo/runtime.conf/{model}",
            "kind": "megatron-lm",
            "source": f"yanring/Megatron-MoE-ModelZoo@{commit}:{launch['model_yaml']}",
            "launcher": "MODEL=" + model + " bash sbatch_benchmarking.sh (runtime_configs/benchmarking/runtime.conf)",
            "script": "pretrain_gpt.py", "gpu": "h100",
            **{k: launch[k] for k in ("num_gpus", "env", "argv")},
        })  # fmt: skip
    scripts = [
        p
        for p in _git(repo, "ls-tree", "-r", "--name-only", REF, "best_practice").split()
        if p.endswith(".sh")
    ]
    for path in sorted(scripts):
        for n, (env, args, gpu) in enumerate(_script_launches(_git(repo, "show", f"{REF}:{path}")), 1):
            launch = compose(repo, env, args)
            entries.append({
                "id": f"modelzoo/{path}#{n}",
                "kind": "megatron-lm",
                "source": f"yanring/Megatron-MoE-ModelZoo@{commit}:{path} (launch {n}) + {launch['model_yaml']}",
                "launcher": "sbatch_benchmarking.sh",
                "script": "pretrain_gpt.py", "gpu": gpu or _gpu(path),
                **{k: launch[k] for k in ("num_gpus", "env", "argv")},
            })  # fmt: skip
    return entries
