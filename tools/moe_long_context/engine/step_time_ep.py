"""Expert-parallel dispatch and combine traffic of one MoE layer, split into what crosses nodes and what does not.

NCCL's all-to-all (the ``alltoall`` and ``allgather`` dispatchers) sends every routed copy of a token to the rank
that holds its expert, so the share of copies on other nodes crosses the network. The flex dispatchers send a token
once to each remote node it needs and forward it over NVLink there: Megatron Core asks DeepEP for
``num_tokens_per_rdma_rank`` and ``is_token_in_rank`` (MCore 0.19.2 transformer/moe/fused_a2a.py:93-121), and
HybridEP is built the same way (RDMA between nodes, NVLink inside). With balanced routing a token's top-k experts
are a uniform draw from the routed experts, so the nodes it reaches are counted exactly (hypergeometric).
"""

from __future__ import annotations

from math import comb

FLEX = ("flex-deepep", "flex-hybridep")


def remote_nodes_per_token(experts: int, topk: int, nodes: int) -> float:
    """Expected number of other nodes holding at least one of a token's top-k experts (uniform routing)."""
    if nodes <= 1:
        return 0.0
    per_node = experts // nodes
    miss = comb(experts - per_node, topk) / comb(experts, topk)
    return (nodes - 1) * (1 - miss)


def ep_traffic(
    dispatcher: str,
    tokens: float,
    topk: int,
    hidden: int,
    experts: int,
    group: int,
    per_node: int,
    bytes_: float,
) -> tuple[float, float]:
    """(network bytes, NVLink bytes) one rank sends for one layer and microbatch, fwd and bwd, dispatch plus combine.

    ``bytes_`` is the bytes of one hidden element over dispatch and combine (e.g. 1 + 2 for FP8 dispatch and a
    BF16 combine); ``per_node`` the ranks of the EP group that share a node (or NVLink domain)."""
    copies = tokens * topk * hidden * (group - 1) / group  # routed copies that leave the rank
    volume = 2 * copies * bytes_  # forward and backward
    in_node = min(group, per_node) / group
    if dispatcher in FLEX and group > per_node:
        nodes = -(-group // per_node)
        inter = 2 * tokens * hidden * remote_nodes_per_token(experts, topk, nodes) * bytes_
        return inter, volume  # every copy still reaches its GPU over NVLink on the last hop
    return volume * (1 - in_node), volume * in_node
