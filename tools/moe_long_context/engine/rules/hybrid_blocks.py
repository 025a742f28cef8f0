"""What Nemotron 3 Super, Ultra and 3.5 Lightning add to the Nano hybrid, as Megatron Core 0.19.2 runs it:
LatentMoE (``transformer/moe/moe_layer.py``) and the repeated MTP block of hybrid layers
(``transformer/multi_token_prediction.py``, ``models/hybrid/hybrid_model.py``).

* LatentMoE projects tokens to the latent width before the dispatch, so every dispatcher moves latent tokens (the
  all-to-all, allgather and DeepEP/HybridEP paths take the width from the tensor, NCCL EP sizes its buffers to it,
  ``token_dispatcher.py``:1519-1522); what it refuses in training is shared-expert overlap, whose side stream would
  need the full-width input.
* The MTP block runs on the last pipeline stage (``hybrid_model.py``:214-228 mtp_on_this_rank) and its last virtual
  stage (``multi_token_prediction.py``:1671-1675); the engine's split places it there. Its inner layers form a
  HybridStack, which the per-layer CUDA-graph helper does not capture (``cuda_graphs.py``:2043-2050, 2174-2179:
  only GraphableMegatronModule layers are graphed).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import Context
from ..findings import Finding
from .table import check, finding


@check("moe")
def latent_moe_shared_expert_overlap(ctx: Context) -> Iterator[Finding]:
    m, c = ctx.model, ctx.cfg
    if m.moe_latent_size and m.moe_shared_expert_intermediate_size and c.moe_shared_expert_overlap:
        yield finding(
            "LATENT_MOE_SHARED_EXPERT_OVERLAP",
            f"{m.name} is a LatentMoE model (moe_latent_size={m.moe_latent_size}): Megatron Core raises in the "
            "first training step when moe_shared_expert_overlap is on (the shared expert would run beside a "
            "dispatcher that only sees latent tokens).",
            "Set moe_shared_expert_overlap false (model.moe_shared_expert_overlap=false, as every Bridge Super and "
            "Ultra recipe does).",
            ["moe_shared_expert_overlap"],
        )


@check("graphs")
def mtp_block_not_graphed(ctx: Context) -> Iterator[Finding]:
    m, c = ctx.model, ctx.cfg
    if m.mtp_block_pattern and ctx.mtp_layers and c.cuda_graph_impl in ("transformer_engine", "local"):
        yield finding(
            "MTP_BLOCK_NOT_GRAPHED",
            f"The {ctx.mtp_layers} MTP depth(s) of {m.name} run eagerly: the MTP block's inner layers form a "
            f"HybridStack, which per-layer CUDA graphs ({c.cuda_graph_impl}) do not capture; only the decoder's "
            "layers are graphed.",
            None,
            ["cuda_graph_impl", "mtp_num_layers"],
        )
