"""size_cp: CP from tokens per TP x CP shard, legal for every rule, with the comm type and alternatives."""

from __future__ import annotations

import pytest

from conftest import error_codes
from moe_long_context.errors import InputError
from moe_long_context.tools.size_cp import SizeCpRequest, size_cp


def cp_for(**kw):
    return size_cp(SizeCpRequest(**kw))


@pytest.mark.parametrize(("seq", "cp"), [(131072, 32), (262144, 64), (65536, 16), (32768, 8), (4096, 1)])
def test_dsv3_on_h100_targets_4096_tokens_per_shard(seq, cp):
    r = cp_for(model="deepseek-v3", gpu="h100", seq_len=seq)
    assert r.cp == cp
    assert r.tokens_per_shard == seq // cp and r.tokens_per_rank == seq // cp
    assert r.target_tokens_per_shard == 4096
    assert not error_codes(r)


def test_qwen3_235b_on_gb200_with_tp4_gives_cp4_and_no_a2a():
    r = cp_for(model="qwen3-235b-a22b", gpu="gb200", seq_len=131072, tp=4)
    assert r.cp == 4 and r.target_tokens_per_shard == 8192 and r.tokens_per_shard == 8192
    # 4 query groups over TP 4 leave one KV head per rank: Ulysses (a2a) cannot split it.
    assert r.cp_comm_type == "p2p"
    assert "a2a also works" not in r.reason
    assert all(o.cp_comm_type != "a2a" for o in r.alternatives)


def test_non_power_of_two_length_never_breaks_seq_divisibility():
    r = cp_for(model="deepseek-v3", gpu="h100", seq_len=200000)
    assert 200000 % (2 * r.cp) == 0
    assert r.cp == 32  # 48.8 wanted; 64 would need 200000 % 128 == 0
    assert any("CP=64" in c and "2 x CP = 128" in c for c in r.constraints)
    for alt in r.alternatives:
        assert 200000 % (2 * alt.cp) == 0


@pytest.mark.parametrize("seq", [100000, 131000, 196608, 163840, 50000, 12345 * 8])
def test_any_length_gives_a_legal_cp(seq):
    for tp in (1, 2, 4):
        r = cp_for(model="qwen3-30b-a3b", gpu="h100", seq_len=seq, tp=tp)
        assert seq % (2 * r.cp) == 0 or r.cp == 1
        assert seq % (r.cp * tp) == 0


def test_mla_across_nodes_gets_hierarchical_cp():
    r = cp_for(model="deepseek-v3", gpu="h100", seq_len=131072)
    assert r.cp_comm_type == "a2a+p2p" and r.hierarchical_cp_sizes == [8, 4]


def test_gpt_oss_cp_is_bounded_by_kv_heads_and_uses_a2a():
    r = cp_for(model="gpt-oss-120b", gpu="h100", seq_len=131072)
    assert r.cp == 8 and r.cp_comm_type == "a2a"  # 8 KV heads; sinks allow only a2a
    assert "CP_SHARD_SIZE" in [f.code for f in r.findings]
    r = cp_for(model="gpt-oss-120b", gpu="h100", seq_len=131072, tp=2)
    assert r.cp == 4


def test_qwen3_next_gdn_heads_bound_tp_times_cp():
    r = cp_for(model="qwen3-next-80b-a3b", gpu="gb200", seq_len=262144, tp=2)
    assert 16 % (2 * r.cp) == 0  # linear key heads over TP x CP


def test_trading_cp_for_tp_inside_nvl72():
    r = cp_for(model="qwen3-235b-a22b", gpu="gb200", seq_len=131072, tp=4)
    traded = [o for o in r.alternatives if o.tp == 8 and o.cp == 2]
    assert traded and traded[0].tokens_per_shard == 8192


def test_num_gpus_bounds_cp():
    r = cp_for(model="deepseek-v3", gpu="h100", seq_len=131072, num_gpus=16)
    assert r.cp == 16


def test_custom_target():
    assert cp_for(model="deepseek-v3", gpu="h100", seq_len=131072, target_tokens_per_shard=8192).cp == 16


def test_impossible_requests_are_input_errors():
    with pytest.raises(InputError, match="tp"):
        cp_for(model="deepseek-v3", seq_len=131072, tp=16, num_gpus=8)
