"""Megatron-LM validate_args checks on flags the engine's fields do not carry, judged on a launch as written.

Each check reads the flags as argparse leaves them (a flag left out has its argparse default) and then as
validate_args has rewritten them by the line it checks at: deprecated flags are applied in validate_args's
own order (--recompute-activations at arguments.py:589-590, --enable-cuda-graph at :593-613, --cuda-graph-scope
at :616-623, --hybrid-override-pattern at :720-732, --use-megatron-fsdp turning the distributed optimizer on at
:1112 and the MXFP8 buffer reuse off at :1114, --use-torch-fsdp2 turning --fp8-param-gather off at :1016-1017,
--use-rotary-position-embeddings at :1571-1572, --num-experts 0 at :1593-1594), so a check never reads a value
the launch wrote but validate_args replaced before it. A flag whose value is an unresolved shell variable is
not judged. Sources: Megatron-LM core_r0.19.0 megatron/training/arguments.py (LM), Megatron Core 0.19.2
optimizer/optimizer_config.py (MCore), which Megatron-LM builds from the same flags.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..findings import Finding

Values = Mapping[str, list[str]]


class _Unknown(Exception):
    """A flag the check reads holds an unresolved shell variable or a value argparse would refuse."""


Flags = Mapping[str, Mapping[str, Any]]  # argparse's options: flag -> kind, dest, nargs, type, default


_BY_DEST: dict[int, tuple[Flags, dict[str, list[tuple[str, Mapping[str, Any]]]]]] = {}


def _by_dest(flags: Flags) -> dict[str, list[tuple[str, Mapping[str, Any]]]]:
    """argparse's options grouped by dest; built once per option table (the launch reader passes the same one)."""
    hit = _BY_DEST.get(id(flags))
    if hit is not None and hit[0] is flags:
        return hit[1]
    out: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for flag, info in flags.items():
        out.setdefault(info.get("dest", ""), []).append((flag, info))
    _BY_DEST[id(flags)] = (flags, out)
    return out


def _convert(text: str, kind: str | None) -> Any:
    if "$" in text:
        raise _Unknown(text)
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError as e:
        raise _Unknown(text) from e
    return text


class Args:
    """argparse's namespace for the flags a launch writes (last one wins), read by argparse dest. ``flags`` is
    Megatron-LM's option table (dialects/megatron_lm_flags.json, which the launch reader passes in)."""

    def __init__(self, values: Values, env: Mapping[str, str] | None, flags: Flags):
        self.values = values
        self.env = dict(env or {})
        self.dests = _by_dest(flags)

    def given(self, dest: str) -> bool:
        return any(flag in self.values for flag, _ in self.dests.get(dest, []))

    def flag(self, dest: str) -> str:
        """The flag that sets ``dest`` (the one written, else the first argparse knows)."""
        flags = [flag for flag, _ in self.dests[dest]]
        return next((f for f in flags if f in self.values), flags[0])

    def __getattr__(self, dest: str) -> Any:
        if dest in ("values", "env", "dests"):  # not set yet (copy, pickle): no namespace to read
            raise AttributeError(dest)
        entries = self.dests.get(dest)
        if not entries:
            raise AttributeError(dest)
        value = entries[0][1].get("default")
        for flag, info in entries:
            if flag not in self.values:
                continue
            kind, written = info["kind"], self.values[flag]
            if kind == "true":
                value = True
            elif kind == "false":
                value = False
            elif kind == "value":
                if info.get("nargs") in ("*", "+"):
                    value = [_convert(w, info.get("type")) for w in written]
                elif written:
                    value = _convert(written[0], info.get("type"))
                else:
                    raise _Unknown(flag)
            else:
                raise _Unknown(flag)  # kind bool: --flag / --no-flag pairs, not read here
        return value

    @property
    def declares_architecture(self) -> bool:
        """The launch writes the model itself (--num-layers or a hybrid pattern); a flag list that leaves the
        model to a separate definition does not show its architecture flags (experts, MLA, biases, tying)."""
        return any(
            f in self.values for f in ("--num-layers", "--hybrid-layer-pattern", "--hybrid-override-pattern")
        )

    # validate_args's rewrites, at the lines named in the module docstring
    @property
    def recompute_granularity_(self) -> str | None:
        return "selective" if self.recompute_activations else self.recompute_granularity

    @property
    def cuda_graph_impl_(self) -> str:
        if self.enable_cuda_graph:
            return "local"
        return "transformer_engine" if self.external_cuda_graph else self.cuda_graph_impl

    @property
    def cuda_graph_modules_(self) -> list[str]:
        scope = self.cuda_graph_scope_deprecated
        raw = scope if scope is not None else self.cuda_graph_modules
        names = [n for item in raw or [] for n in str(item).split(",") if n]
        return [] if names == ["full"] else names

    @property
    def hybrid_pattern_(self) -> str | None:
        return self.hybrid_override_pattern or self.hybrid_layer_pattern

    @property
    def use_distributed_optimizer_(self) -> bool:
        """After :1112 (Megatron-FSDP implies it); read by checks after that line."""
        return bool(self.use_distributed_optimizer or self.use_megatron_fsdp)

    @property
    def position_embedding_type_(self) -> str:
        return "rope" if self.use_rotary_position_embeddings else self.position_embedding_type

    def vpp(self, num_layers: int | None) -> tuple[bool, int | None]:
        """(decided, virtual_pipeline_model_parallel_size) as validate_args leaves it after :950."""
        pp = self.pipeline_model_parallel_size
        pattern = self.hybrid_pattern_
        vpp: int | None = None
        if pattern is not None:
            segments = pattern.split("/")[0].count("|") + 1
            vpp = segments // pp if segments > pp and segments % pp == 0 else None
        if self.pipeline_model_parallel_layout is not None:
            from ..pipeline import parse_layout

            try:
                stages = len(parse_layout(self.pipeline_model_parallel_layout))
            except Exception:  # a layout Megatron refuses itself (PP_LAYOUT_INVALID)
                return False, None
            if stages % pp:
                return False, None  # validate_args asserts first (:911, PP_LAYOUT_INVALID)
            return True, (stages // pp if stages // pp > 1 else None)
        per_vstage, per_rank = (
            self.num_layers_per_virtual_pipeline_stage,
            self.num_virtual_stages_per_pipeline_rank,
        )
        if per_rank is not None:
            return True, (per_rank if per_rank != 1 else None)
        if per_vstage is not None:
            if num_layers is None:
                return False, None
            total = (
                num_layers
                + int(bool(self.account_for_embedding_in_pipeline_split))
                + int(bool(self.account_for_loss_in_pipeline_split))
            )
            if total % pp or (total // pp) % per_vstage:
                return False, None  # validate_args asserts first (LM_LAYERS_PER_VIRTUAL_STAGE)
            v = total // pp // per_vstage
            return True, (v if v != 1 else None)
        return True, vpp


Check = Callable[[Args], Iterator[Finding]]
_LAUNCH_CHECKS: list[Check] = []


def _launch(fn: Check) -> Check:
    _LAUNCH_CHECKS.append(fn)
    return fn
