"""Megatron-LM's verdict on a rendered argv: its own parser, validate_args and the stages after it, on a CPU.

The stages, in order (each one that can run is run; the first failure is the verdict): ``parse_args``
(argparse: an unknown flag or a bad value exits), ``validate_args``, ``core_transformer_config_from_args``
(TransformerConfig's checks), then the oracle's shared stages (OptimizerConfig, the microbatch calculator,
``initialize_model_parallel`` on torch's fake process-group backend, ``get_num_layers_to_build`` and
``BaseMoELayer.__init__``). The launch's exported variables are set for the run; the GPU's device queries
answer for the entry's GPU (``megatron_env.set_gpu``).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from dataclasses import asdict
from typing import Any

from moe_long_context.model.catalog import load_gpu

from .. import megatron_env
from ..oracle import Failure, Oracle, Verdict


@contextlib.contextmanager
def environment(values: dict[str, str | None]):
    """The launch's variables for the block (None: unset, as a launcher that does not export it)."""
    saved = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = str(v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _parse(lm, script: str, argv: list[str]):
    saved = sys.argv
    sys.argv = [script, *argv]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return lm.parse_args()
    except SystemExit as exc:  # argparse refused the command line: an upstream verdict
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        raise ValueError(lines[-1] if lines else f"argparse exited with {exc.code}") from None
    finally:
        sys.argv = saved


def judge_argv(oracle: Oracle, argv: list[str], env: dict[str, str], num_gpus: int, gpu: str,
               script: str = "pretrain_gpt.py") -> Verdict:  # fmt: skip
    """Megatron-LM's verdict on ``argv`` launched on ``num_gpus`` GPUs of the catalog's ``gpu``."""
    spec = load_gpu(gpu)
    megatron_env.set_gpu(spec.device_name, spec.compute_capability)
    verdict = Verdict("megatron-lm")
    lm = oracle.lm
    # CUDA_DEVICE_MAX_CONNECTIONS is what the launch exports, or unset (megatron_env's default is for the
    # generated cases).
    with environment({"WORLD_SIZE": str(num_gpus), "RANK": "0", "CUDA_DEVICE_MAX_CONNECTIONS": None, **env}):
        args, ok = oracle_stage(oracle, verdict, "lm parse_args", "config", _parse, lm, script, argv)
        if not ok:
            return verdict
        _, ok = oracle_stage(oracle, verdict, "lm validate_args", "init", lm.validate_args, args)
        if not ok:
            return verdict
        tconfig, _ = oracle_stage(
            oracle, verdict, "lm core_transformer_config_from_args", "config", lm.core_transformer_config_from_args,
            args,
        )  # fmt: skip
        opt_kwargs = {
            f: getattr(args, f) for f in oracle.OptimizerConfig.__dataclass_fields__ if hasattr(args, f)
        }
        sizes = dict(
            tp=args.tensor_model_parallel_size, pp=args.pipeline_model_parallel_size,
            vpp=args.virtual_pipeline_model_parallel_size, cp=args.context_parallel_size,
            hcp=args.hierarchical_context_parallel_sizes, ep=args.expert_model_parallel_size,
            etp=args.expert_tensor_parallel_size, world=args.world_size, gbs=args.global_batch_size,
            mbs=args.micro_batch_size,
        )  # fmt: skip
        oracle._common(verdict, None, None, tconfig, sizes, opt_kwargs)
    return verdict


def oracle_stage(oracle: Oracle, verdict: Verdict, stage: str, when: str, fn, *args):
    """One stage; a failure (any exception, argparse's exit included) is recorded, never raised."""
    verdict.stages_run.append(stage)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return fn(*args), True
    except Exception as exc:
        where, line = ("argparse", "") if stage == "lm parse_args" else oracle._where(exc)
        verdict.failures.append(Failure(stage, when, type(exc).__name__, str(exc).strip()[:600], where, line))
        return None, False


def verdict_record(verdict: Verdict) -> dict[str, Any]:
    """What the corpus stores: the status, the first failure (stage, message, upstream line), the stages run.

    ``unresolved``: argparse refused a ``$VARIABLE`` the launcher leaves to a pipeline that is not public
    (the release tests' $TOKENIZER_TYPE): no verdict on the launch itself.
    """
    first = asdict(verdict.failures[0]) if verdict.failures else None
    status = "accepted" if verdict.accepted else "rejected"
    if first and first["stage"] == "lm parse_args" and "$" in first["message"]:
        status = "unresolved"
    return {"status": status, "first_failure": first, "stages": verdict.stages_run,
            "also_failed": [f"{f.stage}: {f.where}" for f in verdict.failures[1:]]}  # fmt: skip
