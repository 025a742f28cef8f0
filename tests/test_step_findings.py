"""Dominant-term findings: when one term of the estimated step takes more than a quarter of it, estimate_throughput
says which, names the rule-checked setting that cuts it and quotes the gain from re-running the step-time model."""

from __future__ import annotations

import re

import pytest

from moe_long_context.engine.representative import representative_layouts
from moe_long_context.engine.step_time_ep import ep_traffic, remote_nodes_per_token
from moe_long_context.tools.estimate_throughput import EstimateThroughputRequest, estimate_throughput
from moe_long_context.tools.step_findings import DOMINANT_SHARE

LAYOUTS = {layout.id: layout.config for layout in representative_layouts()}


def throughput(**kw):
    return estimate_throughput(EstimateThroughputRequest(**kw))


def step_findings(result):
    return {f.code: f for f in result.findings if f.code.startswith("STEP_")}


def gain(fix: str) -> float:
    return float(re.search(r"estimated ([0-9.]+)x the tokens/s", fix).group(1))


def test_p2p_across_nodes_names_hierarchical_cp_and_its_gain():
    """DeepSeek-V3 at 128K on 256 H100 with cp_comm_type left at p2p: a ring of 32 ranks over 4 nodes streams the
    expanded MLA keys and values over the network 31 times per layer. The finding names a2a+p2p [8, 4] (size_cp's
    choice) and the gain is the step-time model's own for that setting."""
    p2p = throughput(
        **{**LAYOUTS["deepseek-v3-128k-h100"], "cp_comm_type": "p2p", "hierarchical_cp_sizes": None}
    )
    assert p2p.valid
    share = p2p.terms_s["cp_comm"] / p2p.step_s
    assert share > DOMINANT_SHARE
    found = step_findings(p2p)["STEP_CP_COMM_DOMINANT"]
    assert found.severity.value == "warning" and found.keys == ["cp_comm_type", "hierarchical_cp_sizes"]
    assert f"{share:.0%} of the estimated step" in found.message
    assert "cp_comm_type=a2a+p2p with hierarchical_cp_sizes=[8, 4]" in found.fix
    hierarchical = throughput(**LAYOUTS["deepseek-v3-128k-h100"])  # a2a+p2p [8, 4]
    assert gain(found.fix) == pytest.approx(hierarchical.tokens_per_s / p2p.tokens_per_s, abs=0.01)
    assert gain(found.fix) > 3  # the TFLOP/s the issue saw fall 3.6x
    assert "STEP_CP_COMM_DOMINANT" not in step_findings(hierarchical)


def test_the_alltoall_dispatcher_across_nodes_names_a_flex_dispatcher():
    cfg = dict(model="qwen3-235b-a22b", gpu="h100", num_gpus=256, seq_len=4096, tp=2, pp=8, vpp=4, ep=32, gbs=2048,
               sequence_parallel=True, account_for_embedding_in_pipeline_split=True,
               account_for_loss_in_pipeline_split=True, dispatcher="alltoall")  # fmt: skip
    slow = throughput(**cfg)
    found = step_findings(slow)["STEP_EP_COMM_DOMINANT"]
    assert "dispatcher=flex-" in found.fix
    backend = re.search(r"dispatcher=(flex-\w+)", found.fix).group(1)
    fast = throughput(**{**cfg, "dispatcher": backend})
    assert gain(found.fix) == pytest.approx(fast.tokens_per_s / slow.tokens_per_s, abs=0.01)


def test_too_few_microbatches_name_a_larger_batch():
    """GLM-5.2 at 200K on 608 H100 as the recipe ships it: GBS 13 for 19 pipeline stages."""
    r = throughput(**LAYOUTS["glm-5.2-200k-h100"])
    found = step_findings(r)["STEP_BUBBLE_DOMINANT"]
    assert "gbs=26" in found.fix and gain(found.fix) > 1
    bigger = throughput(**{**LAYOUTS["glm-5.2-200k-h100"], "gbs": 26})
    assert gain(found.fix) == pytest.approx(bigger.tokens_per_s / r.tokens_per_s, abs=0.01)


def test_no_finding_when_no_term_dominates():
    r = throughput(**LAYOUTS["qwen3-235b-a22b-128k-gb200"])
    big = [k for k, v in r.terms_s.items() if v / r.step_s > DOMINANT_SHARE]
    assert not set(big) & {"cp_comm", "ep_comm", "pipeline_bubble", "recompute"}
    assert not step_findings(r)


def test_remote_nodes_per_token_by_hand():
    # 2 nodes, 128 experts (64 per node), top-8: the other node is missed with probability C(64, 8) / C(128, 8)
    from math import comb

    assert remote_nodes_per_token(128, 8, 2) == pytest.approx(1 - comb(64, 8) / comb(128, 8))
    assert remote_nodes_per_token(128, 8, 1) == 0.0
    # 8 nodes, 256 experts, top-8: 7 x (1 - C(224, 8) / C(256, 8))
    assert remote_nodes_per_token(256, 8, 8) == pytest.approx(7 * (1 - comb(224, 8) / comb(256, 8)))


def test_flex_dispatchers_send_a_token_once_per_remote_node():
    """Qwen3-30B-A3B, EP16 over 2 nodes, 4096 tokens, hidden 2048, top-8, FP8 dispatch + BF16 combine (3 B):
    alltoall sends the 8 x 15/16 copies, half of them over the network; DeepEP/HybridEP send ~1 copy to the other
    node (fused_a2a.py:93-121, num_tokens_per_rdma_rank) and every copy over NVLink."""
    copies = 4096 * 8 * 2048 * 15 / 16
    nccl = ep_traffic("alltoall", 4096, 8, 2048, 128, 16, 8, 3)
    assert nccl == pytest.approx((2 * copies * 3 * 0.5, 2 * copies * 3 * 0.5))
    inter, intra = ep_traffic("flex-hybridep", 4096, 8, 2048, 128, 16, 8, 3)
    assert inter == pytest.approx(2 * 4096 * 2048 * remote_nodes_per_token(128, 8, 2) * 3)
    assert intra == pytest.approx(2 * copies * 3)
    assert nccl[0] / inter == pytest.approx(3.75 / remote_nodes_per_token(128, 8, 2))  # 3.75 copies vs ~1
    # inside one NVLink domain nothing crosses the network either way
    assert ep_traffic("flex-deepep", 4096, 8, 2048, 128, 8, 8, 3)[0] == 0.0
