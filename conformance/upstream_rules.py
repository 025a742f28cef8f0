"""``make conformance``: the launch-level rules added from the upstream inventory, judged by Megatron-LM itself.

Each case edits the pretrain_gpt.py flags the oracle writes for a request (conformance/oracle.py lm_argv) the way
a user would, runs Megatron-LM's own parse_args / validate_args / core_transformer_config_from_args on the CPU,
and lints the same flags: the engine must report the rule's code exactly when Megatron refuses, and a check the
engine does not model must come back under not_checked with its line.

Usage (inside the environment ``make conformance`` builds)::

    python -m conformance.upstream_rules --megatron build/conformance/mcore --bridge build/conformance/bridge
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config

from . import oracle as oracle_module
from .oracle import HarnessError, Oracle

Edit = Callable[[list[str]], list[str]]


def _drop(flag: str, values: int = 1) -> Edit:
    def edit(a: list[str]) -> list[str]:
        i = a.index(flag)
        return a[:i] + a[i + 1 + values :]

    return edit


def _set(flag: str, value: str) -> Edit:
    return lambda a: [*a[: a.index(flag) + 1], value, *a[a.index(flag) + 2 :]]


def _add(*flags: str) -> Edit:
    return lambda a: [*a, *flags]


def _then(*edits: Edit) -> Edit:
    def edit(a: list[str]) -> list[str]:
        for e in edits:
            a = e(a)
        return a

    return edit


QWEN = dict(model="qwen3-30b-a3b", num_gpus=8, ep=8)
DSV3 = dict(model="deepseek-v3", num_gpus=256, ep=32, pp=8, pipeline_layout="Et|(tt|)*30mL", mtp_num_layers=1)
PP2 = {**QWEN, "num_gpus": 16, "pp": 2}

# (name, request, edit of the flags, the rule code the engine must report, or a not_checked source)
CASES: list[tuple[str, dict, Edit, str]] = [
    ("MTP with the legacy rope flag", DSV3,
     _then(_drop("--position-embedding-type"), _add("--use-rotary-position-embeddings")), "LM_POSITION_EMBEDDING"),
    ("MTP with rope", DSV3, lambda a: a, "LM_POSITION_EMBEDDING"),
    ("removed --batch-size", QWEN, _add("--batch-size", "1"), "LM_REMOVED_FLAG"),
    ("interleaving on PP 2 without p2p overlap", {**PP2, "vpp": 2}, _add("--no-overlap-p2p-communication"),
     "LM_VPP_P2P_OVERLAP"),
    ("interleaving on PP 4 without p2p overlap", {**QWEN, "num_gpus": 32, "pp": 4, "vpp": 2},
     _add("--no-overlap-p2p-communication"), "LM_VPP_P2P_OVERLAP"),
    ("sequence over the position table", QWEN, _set("--max-position-embeddings", "2048"), "LM_SEQ_OVER_MAX_POSITIONS"),
    ("--fp4-param-gather without FP4", QWEN, _add("--fp4-param-gather"), "PRECISION_OPTION_RECIPE"),
    ("DeepEP switch with alltoall", QWEN, _add("--moe-enable-deepep"), "DISPATCHER_FLAG_CONFLICT"),
    ("FP8 and FP4", QWEN, _add("--fp8-format", "e4m3", "--fp4-format", "e2m1"), "PRECISION_FP8_AND_FP4"),
    ("5 layers per virtual stage of 24", PP2, _add("--num-layers-per-virtual-pipeline-stage", "5"),
     "LM_LAYERS_PER_VIRTUAL_STAGE"),
    ("6 layers per virtual stage of 24", PP2, _add("--num-layers-per-virtual-pipeline-stage", "6"),
     "LM_LAYERS_PER_VIRTUAL_STAGE"),
    ("no --kv-channels, 2050 / 32", QWEN, _then(_drop("--kv-channels"), _set("--hidden-size", "2050")),
     "LM_KV_CHANNELS"),
    ("torch FSDP2 with EP 8", QWEN,
     _add("--use-torch-fsdp2", "--no-gradient-accumulation-fusion", "--untie-embeddings-and-output-weights"),
     "LM_TORCH_FSDP2"),
    ("torch FSDP2 with EP 1", {**QWEN, "ep": 1},
     _add("--use-torch-fsdp2", "--no-gradient-accumulation-fusion", "--untie-embeddings-and-output-weights"),
     "LM_TORCH_FSDP2"),
]  # fmt: skip


def run_case(oracle: Oracle, request: dict, edit: Edit, expect: str) -> tuple[bool, str]:
    """(agrees, what happened): Megatron's verdict on the edited flags against the engine's lint of them."""
    written: list[str] = []

    def argv(cfg, model):
        written[:] = [str(x) for x in edit([str(y) for y in base(cfg, model)])]
        return written

    base, oracle_module.lm_argv = oracle_module.lm_argv, argv
    try:
        cfg = TrainingConfig(**{"seq_len": 4096, "launcher": "megatron-lm", **request})
        ctx = build_context(cfg)
        verdict = oracle.check(cfg, ctx.model, ctx.gpu)
    finally:
        oracle_module.lm_argv = base
    refused = [f for f in verdict.failures if f.stage.startswith("lm ")]
    lint = lint_config(LintConfigRequest(megatron_args=" ".join(written), model=request["model"],
                                         num_gpus=request["num_gpus"]))  # fmt: skip
    megatron = (
        f"Megatron: {refused[0].message[:90] or refused[0].line[:90]}" if refused else "Megatron accepts"
    )
    if expect.startswith("not_checked:"):
        listed = expect.split(":", 1)[1] in {n.source for n in lint.not_checked}
        return bool(refused) and listed, f"{megatron}; listed as not checked: {listed}"
    reported = expect in {f.code for f in lint.findings if f.severity.value == "error"}
    return reported == bool(refused), f"{megatron}; engine reports {expect}: {reported}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megatron", type=Path, required=True)
    parser.add_argument("--bridge", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        oracle = Oracle(args.megatron, args.bridge, None)
    except (HarnessError, FileNotFoundError) as exc:
        print(f"upstream rules: {exc}", file=sys.stderr)
        return 2
    bad = 0
    for name, request, edit, expect in CASES:
        ok, what = run_case(oracle, request, edit, expect)
        bad += not ok
        print(f"{'ok ' if ok else 'DIFF'} {name}: {what}")
    print(f"upstream rules against Megatron-LM's validate_args: {len(CASES) - bad} of {len(CASES)} agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
