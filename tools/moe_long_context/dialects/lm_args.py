"""Megatron-LM validate_args checks on flags the engine's fields do not carry, judged on the launch as written.

Each check returns ``Conflict``s: the finding and the rewrite of the launch that clears it (``None`` drops a
flag; a text with a space replaces the flag and its values). Sources are core_r0.19.0 megatron/training/
arguments.py lines, in the order validate_args applies them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ..engine.findings import Finding
from ..engine.rules import finding

Values = Mapping[str, list[str]]


@dataclass
class Conflict:
    """A finding on the launch as written, and the rewrite of the launch that clears it."""

    finding: Finding
    repair: dict[str, str | None] = field(default_factory=dict)


# arguments.py:572-580: flags that still parse but validate_args refuses, and what replaced them
_REMOVED = {"--batch-size": "--micro-batch-size", "--warmup": "--lr-warmup-fraction",
            "--model-parallel-size": "--tensor-model-parallel-size"}  # fmt: skip
_ARCH_REQUIRED = ("--num-layers", "--hidden-size", "--num-attention-heads", "--max-position-embeddings")
# Flags only these checks read (the engine has no field for them): not listed as unread.
LM_ONLY_FLAGS = (*_REMOVED, "--max-position-embeddings", "--no-overlap-p2p-communication", "--fp4-param-gather",
                 "--fp8-output-proj",
                 # read only by engine/rules/lm_args_features.py (numerics, debugging and data flags)
                 "--qk-clip", "--qk-clip-alpha", "--qk-clip-threshold", "--check-weight-hash-across-dp-replicas-interval",
                 "--ddp-average-in-collective", "--init-model-with-meta-device", "--calculate-per-token-loss",
                 "--dataloader-type")  # fmt: skip


def _int(values: Values, flag: str, default: int | None = None) -> int | None:
    written = (values.get(flag) or [None])[0]
    try:
        return int(written) if written is not None else default
    except ValueError:
        return None


def removed_flags(values: Values) -> Iterator[Conflict]:
    """arguments.py:572-580: --batch-size, --warmup and --model-parallel-size are refused."""
    for flag, new in _REMOVED.items():
        if flag not in values:
            continue
        keep = new != "--lr-warmup-fraction" and new not in values  # a renamed value that means the same
        yield Conflict(
            finding(
                "LM_REMOVED_FLAG",
                f"{flag} is no longer valid: Megatron-LM's validate_args asserts it is unset (use {new}).",
                f"Write {new} instead" + ("." if keep else f" and drop {flag}."),
                [flag],
            ),
            {flag: new if keep else None},
        )


def positions(values: Values, pretrain: bool = False) -> Iterator[Conflict]:
    """arguments.py:1273-1277 (the architecture flags are required) and :1313-1316 (--max-position-embeddings
    at least --seq-length). Missing flags are judged only where the launch runs Megatron-LM's own pretrain_*.py
    and writes the architecture (another entry point, e.g. slime's train.py, may fill them in itself)."""
    if not any(flag in values for flag in _ARCH_REQUIRED):
        return
    # judged where the launch writes the architecture itself (--num-layers): a list that gives only some flags
    # (the rest in a model file it includes) does not show the whole launch
    missing = (
        [flag for flag in _ARCH_REQUIRED if flag not in values]
        if pretrain and "--num-layers" in values
        else []
    )
    seq = _int(values, "--seq-length")
    if missing:
        repair = {"--seq-length": f"--seq-length {seq} --max-position-embeddings {seq}"} if (
            missing == ["--max-position-embeddings"] and seq) else {}  # fmt: skip
        yield Conflict(
            finding(
                "LM_MODEL_ARGS_REQUIRED",
                f"{', '.join(missing)} not given: Megatron-LM requires --num-layers, --hidden-size, "
                "--num-attention-heads and --max-position-embeddings.",
                "Add "
                + ", ".join(missing)
                + (
                    f" (--max-position-embeddings {seq} for this sequence length)"
                    if "--max-position-embeddings" in missing and seq
                    else ""
                )
                + ".",
                missing,
            ),
            repair,
        )
        return
    positions_ = _int(values, "--max-position-embeddings")
    if seq is not None and positions_ is not None and positions_ < seq:
        yield Conflict(
            finding(
                "LM_SEQ_OVER_MAX_POSITIONS",
                f"--seq-length {seq} is longer than --max-position-embeddings {positions_}: Megatron-LM refuses a "
                "sequence longer than the position table.",
                f"Set --max-position-embeddings {seq} (with RoPE it only bounds the positions), or shorten "
                "--seq-length.",
                ["--seq-length", "--max-position-embeddings"],
            ),
            {"--max-position-embeddings": f"--max-position-embeddings {seq}"},
        )


def kv_channels(values: Values) -> Iterator[Conflict]:
    """arguments.py:1291-1293: without --kv-channels, the hidden size must divide by the attention heads."""
    hidden, heads = _int(values, "--hidden-size"), _int(values, "--num-attention-heads")
    if "--kv-channels" in values or not hidden or not heads or hidden % heads == 0:
        return
    yield Conflict(
        finding(
            "LM_KV_CHANNELS",
            f"--hidden-size {hidden} does not divide by --num-attention-heads {heads} and --kv-channels is not "
            "given: Megatron-LM derives the head size from them and asserts.",
            "Give --kv-channels (the model's head dimension).",
            ["--hidden-size", "--num-attention-heads", "--kv-channels"],
        )
    )


def p2p_overlap(values: Values) -> Iterator[Conflict]:
    """arguments.py:966-975: the interleaved schedule without p2p overlap needs PP > 2."""
    pp = _int(values, "--pipeline-model-parallel-size", 1) or 1
    vpp = _int(values, "--num-virtual-stages-per-pipeline-rank")
    interleaved = (vpp or 1) > 1 or "--num-layers-per-virtual-pipeline-stage" in values
    if "--no-overlap-p2p-communication" in values and interleaved and pp == 2:
        yield Conflict(
            finding(
                "LM_VPP_P2P_OVERLAP",
                "--no-overlap-p2p-communication with virtual pipeline stages on PP 2: Megatron-LM needs PP > 2 "
                "for the interleaved schedule without p2p overlap.",
                "Drop --no-overlap-p2p-communication, or use PP > 2.",
                ["--no-overlap-p2p-communication", "--pipeline-model-parallel-size"],
            ),
            {"--no-overlap-p2p-communication": None},
        )


def precision_options(values: Values) -> Iterator[Conflict]:
    """arguments.py:1068-1071 (--fp4-param-gather needs --fp4-format); MCore transformer_config.py:1443-1448
    (--fp8-output-proj needs the MXFP8 recipe)."""
    if "--fp4-param-gather" in values and "--fp4-format" not in values:
        yield Conflict(
            finding(
                "PRECISION_OPTION_RECIPE",
                "--fp4-param-gather without --fp4-format: Megatron-LM refuses an FP4 parameter all-gather "
                "without FP4 training.",
                "Drop --fp4-param-gather, or train with --fp4-format e2m1 --fp4-recipe nvfp4.",
                ["--fp4-param-gather", "--fp4-format"],
            ),
            {"--fp4-param-gather": None},
        )
    recipe = (values.get("--fp8-recipe") or ["delayed"])[0]
    if "--fp8-output-proj" in values and ("--fp8-format" not in values or recipe != "mxfp8"):
        yield Conflict(
            finding(
                "PRECISION_OPTION_RECIPE",
                "--fp8-output-proj without the MXFP8 recipe: Megatron Core runs the attention output projection "
                "in FP8 only with --fp8-recipe mxfp8.",
                "Drop --fp8-output-proj, or use --fp8-format e4m3 --fp8-recipe mxfp8.",
                ["--fp8-output-proj", "--fp8-recipe"],
            ),
            {"--fp8-output-proj": None},
        )


def virtual_stages(values: Values, num_layers: int) -> Iterator[Conflict]:
    """arguments.py:920-940: --num-layers-per-virtual-pipeline-stage refuses uneven first/last stages, and the
    layers per PP stage (embedding and loss counted when accounted for) must divide by it."""
    per_vstage = _int(values, "--num-layers-per-virtual-pipeline-stage")
    if not per_vstage or "--pipeline-model-parallel-layout" in values:
        return
    uneven = [
        f
        for f in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers")
        if f in values
    ]
    if "--num-virtual-stages-per-pipeline-rank" not in values and uneven:
        yield Conflict(
            finding(
                "LM_LAYERS_PER_VIRTUAL_STAGE",
                f"--num-layers-per-virtual-pipeline-stage with {', '.join(uneven)}: Megatron-LM takes the virtual "
                "stages of an uneven pipeline only from --num-virtual-stages-per-pipeline-rank.",
                "Replace --num-layers-per-virtual-pipeline-stage by --num-virtual-stages-per-pipeline-rank.",
                ["--num-layers-per-virtual-pipeline-stage", *uneven],
            )
        )
        return
    pp = _int(values, "--pipeline-model-parallel-size", 1) or 1
    total = num_layers + sum(f in values for f in ("--account-for-embedding-in-pipeline-split",
                                                    "--account-for-loss-in-pipeline-split"))  # fmt: skip
    if total % pp == 0 and (total // pp) % per_vstage:
        yield Conflict(
            finding(
                "LM_LAYERS_PER_VIRTUAL_STAGE",
                f"{total // pp} layers per pipeline stage do not divide into virtual stages of {per_vstage} "
                "(--num-layers-per-virtual-pipeline-stage).",
                "Pick a divisor of the layers per stage, or give --num-virtual-stages-per-pipeline-rank instead.",
                ["--num-layers-per-virtual-pipeline-stage", "--pipeline-model-parallel-size"],
            )
        )


def max_connections(values: Values, env: Mapping[str, str], sm_major: int | None) -> Iterator[Conflict]:
    """arguments.py:1413-1439: before Blackwell, TP > 1 or CP > 1 needs CUDA_DEVICE_MAX_CONNECTIONS=1 in the
    environment (unless FSDP or EP overlap, which only warn). A launch that exports another value is refused; one
    that does not export it inherits its caller's environment, which it does not show: a reminder."""
    tp = _int(values, "--tensor-model-parallel-size", 1) or 1
    cp = _int(values, "--context-parallel-size", 1) or 1
    exempt = {"--use-torch-fsdp2", "--use-megatron-fsdp", "--overlap-moe-expert-parallel-comm"} & set(values)
    if (tp == 1 and cp == 1) or exempt or sm_major is None or sm_major >= 10:
        return
    exported = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if exported is None:
        yield Conflict(finding(
            "LM_CUDA_MAX_CONNECTIONS_ENV",
            f"TP {tp} / CP {cp} on a GPU before Blackwell: Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 in "
            "the environment, which this launch does not export.",
            "Export CUDA_DEVICE_MAX_CONNECTIONS=1 in the launch (or make sure its caller does).",
            ["--tensor-model-parallel-size", "--context-parallel-size"]))  # fmt: skip
    elif exported != "1":
        yield Conflict(finding(
            "LM_CUDA_MAX_CONNECTIONS",
            f"TP {tp} / CP {cp} on a GPU before Blackwell with CUDA_DEVICE_MAX_CONNECTIONS={exported}: "
            "Megatron-LM's validate_args asserts it is 1.",
            "Export CUDA_DEVICE_MAX_CONNECTIONS=1.",
            ["CUDA_DEVICE_MAX_CONNECTIONS", "--tensor-model-parallel-size", "--context-parallel-size"]))  # fmt: skip


def runs_pretrain(launcher_tokens: list[str]) -> bool:
    """The launch runs Megatron-LM's own entry point (pretrain_gpt.py, pretrain_mamba.py, ...)."""
    return any(t.rsplit("/", 1)[-1].startswith("pretrain_") and t.endswith(".py") for t in launcher_tokens)


def flag_conflicts(values: Values, pretrain: bool = False) -> list[Conflict]:
    """The checks that need only the flags (and whether Megatron-LM's own entry point runs them)."""
    out: list[Conflict] = [*positions(values, pretrain)]
    for check in (removed_flags, kv_channels, p2p_overlap, precision_options):
        out += check(values)
    return out
