"""The resolved view of a configuration that every check reads.

Resolution applies the defaults the launcher applies (ETP, sequence parallelism, MTP from the model, an unset
cp_comm_type from ``launcher_defaults.yaml``) once, so each rule reads settled values and records nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..model.catalog import load_gpu, load_model
from ..model.specs import GpuSpec, ModelSpec
from .config import TrainingConfig
from .launcher_defaults import Default, unset_value
from .layout import Layout, resolve_etp
from .pipeline import SplitResult, split_pipeline


@dataclass(frozen=True)
class Context:
    cfg: TrainingConfig
    model: ModelSpec
    gpu: GpuSpec | None

    @cached_property
    def etp(self) -> int:
        """ETP in effect: given; else Bridge's default (1 when EP > 1), but TP under Megatron-LM."""
        if self.cfg.etp is None and self.cfg.launcher == "megatron-lm":
            return self.cfg.tp  # LM arguments.py:569-570
        return resolve_etp(self.cfg.tp, self.cfg.ep, self.cfg.etp)

    @cached_property
    def sequence_parallel(self) -> bool:
        """SP as it will run: given, or assumed on when TP > 1; always off at TP = 1 (Bridge)."""
        if self.cfg.tp == 1:
            return False
        return self.cfg.sequence_parallel if self.cfg.sequence_parallel is not None else True

    @cached_property
    def cp_comm_default(self) -> Default | None:
        """Where the cp_comm_type in effect comes from when the request leaves it unset (None when given)."""
        if self.cfg.cp_comm_type is not None:
            return None
        return unset_value("cp_comm_type", self.cfg.launcher, self.model.family)

    @cached_property
    def cp_comm_type(self) -> str:
        """cp_comm_type as written or, unset, as the launcher resolves it for this model family."""
        default = self.cp_comm_default
        return self.cfg.cp_comm_type if default is None else default.value

    @cached_property
    def mtp_layers(self) -> int:
        return self.cfg.mtp_num_layers if self.cfg.mtp_num_layers is not None else self.model.mtp_num_layers

    @cached_property
    def split(self) -> SplitResult:
        c = self.cfg
        return split_pipeline(
            self.model.num_layers,
            c.pp,
            c.vpp,
            self.mtp_layers,
            layout=c.pipeline_layout,
            first=c.num_layers_in_first_pipeline_stage,
            last=c.num_layers_in_last_pipeline_stage,
            account_embedding=c.account_for_embedding_in_pipeline_split,
            account_loss=c.account_for_loss_in_pipeline_split,
        )

    @cached_property
    def vpp(self) -> int | None:
        """VPP in effect: from the layout string when given (1 becomes None), else the request."""
        if self.cfg.pipeline_layout is not None and self.split.vpp is not None:
            return self.split.vpp if self.split.vpp > 1 else None
        return self.cfg.vpp if self.cfg.vpp and self.cfg.vpp > 1 else None

    @cached_property
    def layout(self) -> Layout:
        c = self.cfg
        return Layout(
            world=c.num_gpus,
            tp=c.tp,
            cp=c.cp,
            pp=c.pp,
            ep=c.ep,
            etp=self.etp,
            vpp=self.vpp,
            sequence_parallel=self.sequence_parallel,
        )

    @cached_property
    def gbs(self) -> int | None:
        """Global batch as Megatron uses it: given, or MBS x DP when unset."""
        if self.cfg.gbs is not None:
            return self.cfg.gbs
        dp = self.layout.dp
        return self.cfg.mbs * dp if dp else None

    @cached_property
    def num_microbatches(self) -> int | None:
        dp = self.layout.dp
        if dp is None or self.gbs is None or self.gbs % (self.cfg.mbs * dp):
            return None
        return self.gbs // (self.cfg.mbs * dp)

    @cached_property
    def tokens_per_rank(self) -> int | None:
        """Sequence tokens one rank holds per microbatch: seq / CP, and / TP with SP."""
        if self.cfg.seq_len is None:
            return None
        return self.cfg.seq_len // (self.cfg.cp * (self.cfg.tp if self.sequence_parallel else 1))

    @property
    def recompute_modules(self) -> list[str]:
        """Modules selective recompute will use (Megatron's default [core_attn] when unset)."""
        if self.cfg.recompute_granularity != "selective":
            return []
        return list(self.cfg.recompute_modules) if self.cfg.recompute_modules is not None else ["core_attn"]

    @property
    def graph_modules(self) -> list[str]:
        return list(self.cfg.cuda_graph_modules or [])

    @property
    def graphs_on(self) -> bool:
        return self.cfg.cuda_graph_impl != "none"


def build_context(cfg: TrainingConfig) -> Context:
    """Resolve a TrainingConfig (model and GPU ids included) into a Context. Raises InputError."""
    model = load_model(cfg.model)
    gpu = load_gpu(cfg.gpu) if cfg.gpu is not None else None
    return Context(cfg=cfg, model=model, gpu=gpu)
