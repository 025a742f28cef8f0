"""Rules added from the upstream inventory (issue 22): each on both sides, with the upstream line it follows.

Launch-level rules judge flags or keys the engine's fields fold or do not carry (dialects/conflicts.py,
dialects/lm_args.py); their repairs are checked through lint_config's round trip (the corrected launch is read
again and holds no error). Sources: Megatron-LM core_r0.19.0 arguments.py, Megatron Core 0.19.2, Megatron
Bridge 0.6.2 training/config.py.
"""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules import run
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config

LM = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 8 "
      "--micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16")  # fmt: skip
QWEN = dict(model="qwen3-30b-a3b", num_gpus=8)
ARCH = ("--num-layers 48 --hidden-size 2048 --num-attention-heads 32 --max-position-embeddings 40960 "
        "--position-embedding-type rope")  # fmt: skip


def lint(**kw):
    return lint_config(LintConfigRequest(**{**QWEN, **kw}))


def codes(r, severity=Severity.error) -> list[str]:
    return [f.code for f in r.findings if f.severity is severity]


def engine_errors(**kw) -> list[str]:
    cfg = TrainingConfig(**{"model": "qwen3-30b-a3b", "num_gpus": 8, "ep": 8, "seq_len": 4096, **kw})
    return [f.code for f in run(build_context(cfg)) if f.severity is Severity.error]


@pytest.mark.parametrize(
    ("extra", "fires"),
    [
        (
            "--moe-enable-deepep --moe-token-dispatcher-type alltoall",
            True,
        ),  # MCore transformer_config.py:1590
        ("--moe-enable-deepep --moe-token-dispatcher-type flex", False),
        (
            "--moe-enable-deepep --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep",
            True,
        ),  # :1593
        ("--moe-token-dispatcher-type alltoall --moe-flex-dispatcher-backend ncclep", True),  # :1610
        ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend ncclep", False),
    ],
)
def test_dispatcher_flags_that_one_dispatcher_field_cannot_hold(extra, fires):
    r = lint(megatron_args=f"{LM} {extra}")
    assert ("DISPATCHER_FLAG_CONFLICT" in codes(r)) is fires
    assert "DISPATCHER_FLAG_CONFLICT" not in r.remaining_errors  # the repair drops the flag not read


def test_bridge_dispatcher_conflict_needs_the_type_written():
    """A backend override alone keeps the recipe's dispatcher type, which the list does not show."""
    assert "DISPATCHER_FLAG_CONFLICT" not in codes(
        lint(bridge_overrides=["model.moe_flex_dispatcher_backend=ncclep"])
    )
    r = lint(
        bridge_overrides=[
            "model.moe_flex_dispatcher_backend=ncclep",
            "model.moe_token_dispatcher_type=alltoall",
        ]
    )
    assert "DISPATCHER_FLAG_CONFLICT" in codes(r) and r.corrected == [
        "model.moe_token_dispatcher_type=alltoall"
    ]


def test_fp8_and_fp4_together():
    """LM arguments.py:1065-1067; MCore transformer_config.py:1454-1456."""
    r = lint(megatron_args=f"{LM} --fp8-format e4m3 --fp8-recipe blockwise --fp4-format e2m1")
    assert "PRECISION_FP8_AND_FP4" in codes(r) and not r.remaining_errors
    assert "--fp8" not in r.corrected and "--fp4-format e2m1" in r.corrected  # FP4 kept: what was checked
    assert "PRECISION_FP8_AND_FP4" not in codes(lint(megatron_args=f"{LM} --fp4-format e2m1"))


def test_mtp_needs_rope_as_written_before_the_legacy_flag_applies():
    """LM arguments.py:855-860 asserts before :1575-1576 turns --use-rotary-position-embeddings into rope."""
    script = (
        f"{LM} --num-layers 61 --hidden-size 7168 --num-attention-heads 128 --max-position-embeddings 163840"
    )
    r = lint(
        megatron_args=f"{script} --mtp-num-layers 1 --use-rotary-position-embeddings", model="deepseek-v3"
    )
    (f,) = [f for f in r.findings if f.code == "LM_POSITION_EMBEDDING"]
    assert "applied after this check" in f.message and f.source.startswith("LM arguments.py:855-860")
    assert (
        "--position-embedding-type rope" in r.corrected and "LM_POSITION_EMBEDDING" not in r.remaining_errors
    )
    clean = lint(
        megatron_args=f"{script} --mtp-num-layers 1 --position-embedding-type rope", model="deepseek-v3"
    )
    assert "LM_POSITION_EMBEDDING" not in codes(clean)
    # :1579-1580: --no-position-embedding needs rope; a flag list without the architecture is not judged for MTP
    assert "LM_POSITION_EMBEDDING" in codes(lint(megatron_args=f"{LM} --no-position-embedding"))
    assert "LM_POSITION_EMBEDDING" not in codes(
        lint(megatron_args=f"{LM} --mtp-num-layers 1", model="deepseek-v3")
    )


def test_activation_offload_needs_a_module():
    """MCore transformer_config.py:1849-1853."""
    assert "OFFLOAD_NEEDS_MODULES" in engine_errors(activation_offload=[])
    assert "OFFLOAD_NEEDS_MODULES" not in engine_errors(activation_offload=["expert_fc1"])
    r = lint(megatron_args=f"{LM} --fine-grained-activation-offloading")
    assert "OFFLOAD_NEEDS_MODULES" in codes(r) and "OFFLOAD_NEEDS_MODULES" not in r.remaining_errors


def test_ep_overlap_with_ncclep_refuses_expert_fc1_offload():
    """MCore transformer_config.py:2723-2733."""
    base = dict(ep_overlap=True, dispatcher="flex-ncclep", gpu="b200")
    assert "EP_OVERLAP_RULES" in engine_errors(
        **base, activation_offload=["expert_fc1"], nvte_cpu_offload_v1=True
    )
    assert "EP_OVERLAP_RULES" not in engine_errors(
        **base, activation_offload=["moe_act"], nvte_cpu_offload_v1=True
    )


def test_packed_sequences_train_one_pack_per_microbatch_under_bridge():
    """Bridge training/config.py:1463-1470."""
    assert "PACKED_MBS_ONE" in engine_errors(packed_sequences=True, mbs=2, gbs=64)
    assert "PACKED_MBS_ONE" not in engine_errors(packed_sequences=True, mbs=1, gbs=64)
    assert "PACKED_MBS_ONE" not in engine_errors(packed_sequences=True, mbs=2, gbs=64, launcher="megatron-lm")


def test_megatron_lm_refuses_gpt_split_flags_next_to_a_hybrid_pattern():
    """LM arguments.py:798-811; Bridge only warns that HybridModel ignores them (HYBRID_GPT_SPLIT_IGNORED)."""
    cfg = dict(
        model="nemotron-3-nano", num_gpus=8, seq_len=4096, account_for_embedding_in_pipeline_split=True
    )
    lm = run(build_context(TrainingConfig(**cfg, launcher="megatron-lm")))
    bridge = run(build_context(TrainingConfig(**cfg)))
    assert "HYBRID_LM_SPLIT_FLAGS" in [f.code for f in lm] and "HYBRID_GPT_SPLIT_IGNORED" not in [
        f.code for f in lm
    ]
    assert "HYBRID_LM_SPLIT_FLAGS" not in [f.code for f in bridge]
    assert "HYBRID_LM_SPLIT_FLAGS" not in [f.code for f in run(build_context(TrainingConfig(
        model="nemotron-3-nano", num_gpus=8, seq_len=4096, launcher="megatron-lm")))]  # fmt: skip


def test_removed_flags():
    """LM arguments.py:572-580: --batch-size, --warmup and --model-parallel-size parse but are refused."""
    r = lint(megatron_args=LM.replace("--micro-batch-size 1", "--batch-size 1"))
    assert "LM_REMOVED_FLAG" in codes(r) and "--micro-batch-size 1" in r.corrected and not r.remaining_errors
    assert "LM_REMOVED_FLAG" in codes(lint(megatron_args=f"{LM} --warmup 100"))
    assert "LM_REMOVED_FLAG" not in codes(lint(megatron_args=LM))


def test_architecture_flags_and_the_position_table():
    """LM arguments.py:1273-1277 (required with pretrain_gpt.py) and :1313-1316 (table >= sequence)."""
    short = ARCH.replace(" --max-position-embeddings 40960", "")
    run_ = "torchrun --nproc-per-node 8 pretrain_gpt.py "
    r = lint(megatron_args=run_ + f"{LM} {short}", gpu="b200")
    assert "LM_MODEL_ARGS_REQUIRED" in codes(r) and "--max-position-embeddings 4096" in r.corrected
    assert "LM_MODEL_ARGS_REQUIRED" not in codes(lint(megatron_args=f"{LM} {short}"))  # bare flags: not shown
    assert "LM_MODEL_ARGS_REQUIRED" not in codes(lint(megatron_args=run_ + f"{LM} {ARCH}", gpu="b200"))
    long = lint(megatron_args=f"{LM} {ARCH}".replace("--seq-length 4096", "--seq-length 131072"))
    assert "LM_SEQ_OVER_MAX_POSITIONS" in codes(long) and "--max-position-embeddings 131072" in long.corrected
    assert "LM_SEQ_OVER_MAX_POSITIONS" not in codes(lint(megatron_args=f"{LM} {ARCH}"))


def test_kv_channels_when_the_hidden_size_does_not_divide():
    """LM arguments.py:1291-1293."""
    odd = f"{LM} --hidden-size 2050 --num-attention-heads 32"
    assert "LM_KV_CHANNELS" in codes(lint(megatron_args=odd))
    assert "LM_KV_CHANNELS" not in codes(lint(megatron_args=f"{odd} --kv-channels 128"))


def test_interleaving_without_p2p_overlap_needs_pp_above_two():
    """LM arguments.py:970-975."""
    flags = (LM.replace("--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2")
             + " --num-virtual-stages-per-pipeline-rank 2 --no-overlap-p2p-communication")  # fmt: skip
    r = lint(megatron_args=flags, num_gpus=16)
    assert "LM_VPP_P2P_OVERLAP" in codes(r) and "--no-overlap-p2p-communication" not in r.corrected
    assert "LM_VPP_P2P_OVERLAP" not in codes(
        lint(megatron_args=flags.replace("size 2 ", "size 4 "), num_gpus=32)
    )


def test_precision_options_need_their_recipe():
    """LM arguments.py:1068-1071; MCore transformer_config.py:1443-1448."""
    assert "PRECISION_OPTION_RECIPE" in codes(lint(megatron_args=f"{LM} --fp4-param-gather"))
    assert "PRECISION_OPTION_RECIPE" not in codes(
        lint(megatron_args=f"{LM} --fp4-param-gather --fp4-format e2m1")
    )
    assert "PRECISION_OPTION_RECIPE" in codes(lint(megatron_args=f"{LM} --fp8-format e4m3 --fp8-output-proj"))
    clean = f"{LM} --fp8-format e4m3 --fp8-recipe mxfp8 --fp8-output-proj"
    assert "PRECISION_OPTION_RECIPE" not in codes(lint(megatron_args=clean, gpu="b200"))


def test_layers_per_virtual_stage():
    """LM arguments.py:920-940: no uneven stages with it, and it divides the layers per stage (48 / PP 2 = 24)."""
    flags = LM.replace("--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2")
    good = lint(megatron_args=f"{flags} --num-layers-per-virtual-pipeline-stage 6", num_gpus=16)
    assert "LM_LAYERS_PER_VIRTUAL_STAGE" not in codes(good) and good.effective_config["vpp"] == 4
    bad = lint(megatron_args=f"{flags} --num-layers-per-virtual-pipeline-stage 5", num_gpus=16)
    assert "LM_LAYERS_PER_VIRTUAL_STAGE" in codes(bad)
    uneven = lint(megatron_args=f"{flags} --num-layers-per-virtual-pipeline-stage 6 "
                  "--decoder-first-pipeline-num-layers 24", num_gpus=16)  # fmt: skip
    assert "LM_LAYERS_PER_VIRTUAL_STAGE" in codes(uneven)


def test_cuda_device_max_connections_before_blackwell():
    """LM arguments.py:1413-1439: TP > 1 or CP > 1 on Hopper asserts CUDA_DEVICE_MAX_CONNECTIONS=1."""
    flags = LM.replace("--tensor-model-parallel-size 1", "--tensor-model-parallel-size 2 --sequence-parallel")
    script = "torchrun --nproc-per-node 8 pretrain_gpt.py " + flags
    wrong = lint(megatron_args="export CUDA_DEVICE_MAX_CONNECTIONS=32\n" + script, gpu="h100", num_gpus=16)
    assert "LM_CUDA_MAX_CONNECTIONS" in codes(wrong)
    exported = lint(megatron_args="export CUDA_DEVICE_MAX_CONNECTIONS=1\n" + script, gpu="h100", num_gpus=16)
    assert not [f for f in exported.findings if f.code.startswith("LM_CUDA_MAX_CONNECTIONS")]
    assert "LM_CUDA_MAX_CONNECTIONS" not in codes(lint(megatron_args=script, gpu="b200", num_gpus=16))
    inherited = lint(megatron_args=script, gpu="h100", num_gpus=16)  # not exported: the caller's environment
    assert "LM_CUDA_MAX_CONNECTIONS_ENV" in codes(inherited, Severity.info) and inherited.valid


def test_bridge_graph_scope_and_modules():
    """MCore transformer_config.py:2383-2386 (Megatron-LM's own assert is LM_CUDA_GRAPH_SCOPE_AND_MODULES)."""
    keys = [
        "model.cuda_graph_impl=transformer_engine",
        "model.cuda_graph_modules=[attn]",
        "model.cuda_graph_scope=attn",
    ]
    r = lint(bridge_overrides=keys)
    assert "GRAPH_SCOPE_AND_MODULES" in codes(r) and "model.cuda_graph_scope=attn" not in r.corrected
    assert "GRAPH_SCOPE_AND_MODULES" not in codes(lint(bridge_overrides=keys[:2]))


def test_bridge_model_and_dataset_sequence_lengths():
    """Bridge training/config.py:1490-1509: model.seq_length must equal dataset.seq_length."""
    r = lint(bridge_overrides=["model.seq_length=131072", "dataset.seq_length=4096"])
    assert "BRIDGE_SEQ_LENGTH_MISMATCH" in codes(r) and "dataset.seq_length=131072" in r.corrected
    one = lint(bridge_overrides=["model.seq_length=131072"])
    assert "BRIDGE_SEQ_LENGTH_ONE_SIDED" in codes(one, Severity.warning) and one.valid
    both = lint(bridge_overrides=["model.seq_length=131072", "dataset.seq_length=131072"])
    assert not [c for c in codes(both, Severity.warning) + codes(both) if c.startswith("BRIDGE_SEQ_LENGTH")]


def test_dsa_index_sharing_keeps_each_stage_on_a_computing_layer():
    """MCore experimental_attention_variant_module_specs.py:339-374: GLM-5's 78 layers with index sharing every 2
    layers (offset 0): PP 2 starts stage 2 on layer 40, which reuses layer 39's top-k; PP 3 starts on 27 and 53."""
    from moe_long_context.engine.context import Context
    from moe_long_context.model.catalog import load_model

    shared = load_model("glm-5").model_copy(update={"dsa_index_topk_freq": 2})

    def split_errors(pp: int) -> list[str]:
        cfg = TrainingConfig(model="glm-5", num_gpus=64 * pp, pp=pp, ep=64, seq_len=4096)
        return [f.code for f in run(Context(cfg=cfg, model=shared, gpu=None)) if f.severity is Severity.error]

    assert "DSA_INDEX_SHARE_SPLIT" in split_errors(2)
    assert "DSA_INDEX_SHARE_SPLIT" not in split_errors(3)
    assert "DSA_INDEX_SHARE_SPLIT" not in engine_errors(
        model="glm-5", pp=2, num_gpus=128, ep=64
    )  # freq 1: no sharing
