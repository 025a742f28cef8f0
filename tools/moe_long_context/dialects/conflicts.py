"""Combinations of flags (or keys) that one engine field cannot hold, checked as upstream checks them.

Reading a launch folds several flags into one field (the dispatcher type, backend and --moe-enable-deepep into
``dispatcher``; the FP8 and FP4 formats into ``precision``). Where upstream refuses a combination that the fold
would hide, the finding is made here, on the flags as written, with its repair: the flags to drop or rewrite
so that the launch says what the engine read and checked (``None`` drops a flag; a text with a space replaces
the flag and its values).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..engine.rules import finding
from .lm_args import Conflict, flag_conflicts


def _dispatcher(get: Callable[[str], Any], name: Callable[[str], str]) -> Iterator[Conflict]:
    """MCore transformer_config.py:1589-1613: DeepEP needs the flex dispatcher and no other backend; NCCL EP
    needs the flex dispatcher. A dispatcher type of None is not known (a Bridge recipe's own) and not judged."""
    kind = get("moe_token_dispatcher_type")
    backend = get("moe_flex_dispatcher_backend")
    deepep = get("moe_enable_deepep") in (True, "true", "True", "")
    switch, backend_key = name("moe_enable_deepep"), name("moe_flex_dispatcher_backend")
    if deepep and kind not in ("flex", None):
        problem, drop = (
            f"{switch} with the {kind} dispatcher: DeepEP runs only under the flex dispatcher.",
            switch,
        )
    elif deepep and backend == "hybridep":
        problem, drop = (
            f"{switch} with the hybridep backend: the flex dispatcher takes one backend.",
            backend_key,
        )
    elif backend == "ncclep" and kind not in ("flex", None):
        problem = (
            f"The ncclep backend with the {kind} dispatcher: NCCL EP runs only under the flex dispatcher."
        )
        drop = backend_key
    else:
        return
    yield Conflict(
        finding(
            "DISPATCHER_FLAG_CONFLICT",
            problem,
            f"Set {name('moe_token_dispatcher_type')} flex with one {backend_key} (deepep, hybridep or ncclep), "
            "and drop the deprecated DeepEP switch.",
            [name("moe_token_dispatcher_type"), backend_key, switch],
        ),
        {drop: None},
    )


def _fp8_and_fp4(fp8: str | None, fp4: str | None, recipe: str) -> Iterator[Conflict]:
    """LM arguments.py:1065-1067 and MCore transformer_config.py:1454-1456: FP8 and FP4 exclude each other.
    The repair keeps FP4, which is what the engine read (and checked)."""
    if fp8 and fp4:
        yield Conflict(
            finding(
                "PRECISION_FP8_AND_FP4",
                f"{fp8} and {fp4} are both set: Megatron refuses FP8 and FP4 training together.",
                f"Keep one of them: {fp8} for an FP8 recipe or {fp4} for NVFP4.",
                [fp8, fp4],
            ),
            {fp8: None, recipe: None},
        )


def _mtp_layers(values: Mapping[str, list[str]]) -> str:
    """--mtp-num-layers as validate_args has it at :855: the deprecated --hybrid-override-pattern becomes the
    pattern (:720-732), the legacy --mtp-hybrid-override-pattern joins it (:749-760), and MTP depths after '/'
    in the pattern replace --mtp-num-layers (:838-853, parse_hybrid_pattern)."""
    written = (values.get("--mtp-num-layers") or ["0"])[0]
    pattern = next(
        (values[f][0] for f in ("--hybrid-override-pattern", "--hybrid-layer-pattern") if values.get(f)), None
    )
    legacy = (values.get("--mtp-hybrid-override-pattern") or [None])[0]
    if legacy and written.isdigit() and int(written) > 0 and (pattern is None or "/" not in pattern):
        pattern = (pattern or "") + "/" + "/".join([legacy] * int(written))
    depths = pattern.split("/")[1:] if pattern and "$" not in pattern else []
    if depths and not all(d == "" for d in depths) and all(d == depths[0] for d in depths):
        return str(len(depths))
    return written


def _position_embedding(values: Mapping[str, list[str]]) -> Iterator[Conflict]:
    """LM arguments.py:855-860: with MTP, --position-embedding-type must be rope or none as written, since the
    legacy --use-rotary-position-embeddings is applied only later (:1575-1576); :1579-1580 refuses
    --no-position-embedding unless the type (after that) is rope. The MTP count is validate_args's at :855
    (_mtp_layers: a hybrid pattern's MTP depths replace --mtp-num-layers)."""
    written = (values.get("--position-embedding-type") or ["learned_absolute"])[0]
    mtp = _mtp_layers(values)
    # judged where the launch writes the architecture (--num-layers or a hybrid pattern ...): a flag list that
    # leaves the model to a separate definition does not show its position embedding
    declares = any(f in values for f in ("--num-layers", "--position-embedding-type", "--hybrid-layer-pattern",
                                         "--hybrid-override-pattern"))  # fmt: skip
    if declares and mtp.isdigit() and int(mtp) > 0 and written not in ("rope", "none"):
        legacy = " (--use-rotary-position-embeddings is applied after this check)" if (
            "--use-rotary-position-embeddings" in values) else ""  # fmt: skip
        # the repair rewrites a flag the launch writes (the MTP count may come from the hybrid pattern)
        at = next(
            (f for f in ("--position-embedding-type", "--mtp-num-layers", "--num-layers") if values.get(f)),
            None,
        )
        kept = "" if at == "--position-embedding-type" or at is None else f"{at} {values[at][0]} "
        repair: dict[str, str | None] = {at: f"{kept}--position-embedding-type rope"} if at else {}
        yield Conflict(
            finding(
                "LM_POSITION_EMBEDDING",
                (
                    f"--mtp-num-layers {mtp}"
                    if mtp == (values.get("--mtp-num-layers") or [None])[0]
                    else f"{mtp} MTP depths in the hybrid pattern"
                )
                + f" with position embedding {written}: Megatron-LM's validate_args accepts "
                f"MTP only with --position-embedding-type rope or none{legacy}.",
                "Add --position-embedding-type rope (or none).",
                ["--mtp-num-layers", "--position-embedding-type"],
            ),
            repair,
        )
        return
    final = "rope" if "--use-rotary-position-embeddings" in values else written
    if "--no-position-embedding" in values and final != "rope":
        repair = {"--no-position-embedding": None}
        if "--position-embedding-type" in values:
            repair["--position-embedding-type"] = "--position-embedding-type none"
        else:
            repair["--no-position-embedding"] = "--position-embedding-type none"
        yield Conflict(
            finding(
                "LM_POSITION_EMBEDDING",
                f"--no-position-embedding with position embedding {final}: Megatron-LM refuses the deprecated "
                "flag unless the embedding is rope.",
                "Drop --no-position-embedding and set --position-embedding-type (none for no position embedding).",
                ["--no-position-embedding", "--position-embedding-type"],
            ),
            repair,
        )


def _seq_lengths(keys: Mapping[str, Any]) -> Iterator[Conflict]:
    """Bridge training/config.py:1490-1509: the model's and the dataset's seq_length must be equal; an override
    list that writes only one of them leaves the other at the recipe's value."""
    model, data = keys.get("model.seq_length"), keys.get("dataset.seq_length")
    if model is not None and data is not None and str(model) != str(data):
        yield Conflict(
            finding(
                "BRIDGE_SEQ_LENGTH_MISMATCH",
                f"model.seq_length={model} and dataset.seq_length={data}: Megatron Bridge asserts they are equal.",
                "Set both to the training sequence length.",
                ["model.seq_length", "dataset.seq_length"],
            ),
            {"dataset.seq_length": f"dataset.seq_length={model}"},
        )  # the model's, which the engine checked; fmt: skip
    elif (model is None) != (data is None):
        given, other = ("model.seq_length", "dataset.seq_length") if model is not None else (
            "dataset.seq_length", "model.seq_length")  # fmt: skip
        yield Conflict(finding(
            "BRIDGE_SEQ_LENGTH_ONE_SIDED",
            f"Only {given} is overridden: Megatron Bridge asserts {other} equals it, and {other} keeps the "
            "recipe's value.",
            f"Override {other} with the same value.", [given, other]))  # fmt: skip


def megatron_conflicts(values: Mapping[str, list[str]], pretrain: bool = False) -> list[Conflict]:
    """The flag combinations a Megatron-LM launch gets refused for that its engine fields cannot show."""
    defaults = {"moe_token_dispatcher_type": "allgather", "moe_flex_dispatcher_backend": "deepep"}

    def get(key: str) -> Any:
        flag = "--" + key.replace("_", "-")
        if flag not in values:
            return defaults.get(key)
        return values[flag][0] if values[flag] else ""

    found = list(_dispatcher(get, lambda key: "--" + key.replace("_", "-")))
    found += _fp8_and_fp4("--fp8-format" if "--fp8-format" in values else None,
                          "--fp4-format" if "--fp4-format" in values else None, "--fp8-recipe")  # fmt: skip
    found += _position_embedding(values)
    return found + flag_conflicts(values, pretrain)


def bridge_conflicts(keys: Mapping[str, Any]) -> list[Conflict]:
    """The same for a Megatron Bridge override list (model.* keys; mixed_precision.* for the formats). Only
    what the list writes is judged: a key it leaves keeps the recipe's value, which the list does not show."""
    found = list(_dispatcher(lambda k: keys.get(f"model.{k}"), lambda k: f"model.{k}"))
    for section in ("model", "mixed_precision"):
        fp8 = f"{section}.fp8" if keys.get(f"{section}.fp8") else None
        found += _fp8_and_fp4(
            fp8, f"{section}.fp4" if keys.get(f"{section}.fp4") else None, f"{section}.fp8_recipe"
        )
    found += _seq_lengths(keys)
    modules = keys.get("model.cuda_graph_modules")
    if keys.get("model.cuda_graph_scope") is not None and modules not in (None, [], "full", ["full"], ""):
        found.append(Conflict(  # MCore transformer_config.py:2383-2386
            finding("GRAPH_SCOPE_AND_MODULES",
                    "model.cuda_graph_scope and model.cuda_graph_modules are both set: Megatron Core refuses the "
                    "deprecated scope next to the modules.",
                    "Drop model.cuda_graph_scope and keep model.cuda_graph_modules.",
                    ["model.cuda_graph_scope", "model.cuda_graph_modules"]),
            {"model.cuda_graph_scope": None}))  # fmt: skip
    return found
