"""The parallel layout: the sizes a user sets and the ones Megatron derives from them.

Dense (attention) side: ``TP x CP x DP x PP == world``. Expert side (MoE parallel folding):
``ETP x EP x EDP x PP == world``. EP is not a factor of the dense side, so the product rule
``TP x CP x EP x PP <= world`` is not a Megatron constraint (Megatron Core 0.19 ``parallel_state.py``,
``initialize_model_parallel``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    world: int
    tp: int = 1
    cp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int = 1
    vpp: int | None = None
    sequence_parallel: bool = False

    @property
    def model_size(self) -> int:
        """TP x CP x PP: the ranks one data-parallel replica of the dense part spans."""
        return self.tp * self.cp * self.pp

    @property
    def expert_model_size(self) -> int:
        """ETP x EP x PP: the ranks one replica of the experts spans."""
        return self.etp * self.ep * self.pp

    @property
    def dp(self) -> int | None:
        """Data-parallel size, or None when the world does not factor."""
        return self.world // self.model_size if self.world % self.model_size == 0 else None

    @property
    def edp(self) -> int | None:
        """Expert data-parallel size, or None when the world does not factor."""
        return self.world // self.expert_model_size if self.world % self.expert_model_size == 0 else None

    @property
    def min_gpus(self) -> int:
        """Smallest world that fits both sides once: PP x max(TP x CP, EP x ETP)."""
        return self.pp * max(self.tp * self.cp, self.ep * self.etp)

    @property
    def valid_world(self) -> bool:
        return self.dp is not None and self.edp is not None

    def describe(self) -> str:
        parts = [f"TP{self.tp}", f"CP{self.cp}", f"PP{self.pp}"]
        if self.vpp and self.vpp > 1:
            parts.append(f"VPP{self.vpp}")
        parts += [f"EP{self.ep}", f"ETP{self.etp}"]
        if self.dp is not None:
            parts.append(f"DP{self.dp}")
        if self.edp is not None:
            parts.append(f"EDP{self.edp}")
        return " ".join(parts)


def resolve_etp(tp: int, ep: int, etp: int | None) -> int:
    """ETP as Megatron Bridge 0.6 resolves it: 1 when EP > 1 and unset, else TP when unset."""
    if etp is not None:
        return etp
    return 1 if ep > 1 else tp
