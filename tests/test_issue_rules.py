"""The source audit's findings (shared/reference/rule-audit.md) and the rules real launch scripts break.

Every rule is tested on both sides (fires / does not fire); each test names the upstream source it follows
(file:line at Megatron Core 0.19.2, Megatron-LM core_r0.19.0, Megatron Bridge 0.6.2, Transformer Engine 2.14).
"""

from __future__ import annotations

import json

import pytest

from moe_long_context.cli import main
from moe_long_context.dialects.launch import understand_megatron
from moe_long_context.dialects.tables import parse_megatron_args
from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules import run
from moe_long_context.engine.rules.cp import comm_type_findings
from moe_long_context.model.catalog import load_model
from moe_long_context.tools.check_dp_budget import CheckDpBudgetRequest, check_dp_budget
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config
from moe_long_context.tools.lint_model import resolve_model
from moe_long_context.tools.validate_cuda_graph_shapes import (
    ValidateCudaGraphsRequest,
    validate_cuda_graph_shapes,
)

QWEN = dict(model="qwen3-30b-a3b", num_gpus=16, seq_len=4096, tp=2, ep=8, gbs=64)
LM_BASE = (
    "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 8 --seq-length 4096 "
    "--micro-batch-size 1 --global-batch-size 64 --bf16 --use-distributed-optimizer"
)
BRIDGE_BASE = (
    "model.tensor_model_parallel_size=2 model.expert_model_parallel_size=8 model.seq_length=4096 "
    "train.global_batch_size=64"
)


def codes(findings, severity=Severity.error) -> list[str]:
    return [f.code for f in findings if f.severity == severity]


def errors(**kw) -> list[str]:
    return codes(run(build_context(TrainingConfig(**kw))))


def the(findings, code):
    (found,) = [f for f in findings if f.code == code]
    return found


def lint(**kw):
    return lint_config(LintConfigRequest(model="qwen3-30b-a3b", num_gpus=16, **kw))


def cli_json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) in (0, 1)
    return json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------ audit "Reproduction" list


def test_reproduction_gpt_oss_bridge_recipe_layout_is_valid(capsys):
    """Bridge recipes/gpt_oss/h100/gpt_oss.py:69-70 set cp_comm_type='a2a' in the pretrain recipe every GPT-OSS
    perf recipe builds on (perf_recipes/gpt_oss/gb200/gpt_oss.py:34-45: TP1 CP2 EP4 on 8 GB200); TE 2.14
    accepts a2a for sliding windows and sinks (context_parallel.py:4064-4070, utils.py:746-754)."""
    argv = ["check-dp-budget", "--model", "gpt-oss-20b", "--gpu", "gb200", "--num-gpus", "8", "--seq-len", "8192",
            "--tp", "1", "--cp", "2", "--ep", "4"]  # fmt: skip
    r = cli_json(capsys, *argv)
    assert r["valid"] is True
    assumed = [f for f in r["findings"] if f["code"] == "CP_COMM_TYPE_ASSUMED"]
    assert assumed and assumed[0]["severity"] == "warning"
    assert "SFT and" in assumed[0]["message"] and "p2p" in assumed[0]["message"]
    assert assumed[0]["fix"] == "Set cp_comm_type=a2a explicitly."
    explicit = cli_json(capsys, *argv, "--cp-comm-type", "a2a")
    assert explicit["valid"] is True
    assert "CP_COMM_TYPE_ASSUMED" not in [f["code"] for f in explicit["findings"]]
    # Megatron-LM's --cp-comm-type defaults to p2p (arguments.py:3054): both TE refusals stay errors
    lm = cli_json(capsys, *argv, "--launcher", "megatron-lm")
    assert lm["valid"] is False
    assert {"CP_SLIDING_WINDOW_COMM_TYPE", "CP_SINKS_COMM_TYPE"} <= {
        f["code"] for f in lm["findings"] if f["severity"] == "error"
    }


def test_reproduction_explicit_p2p_and_all_gather_stay_errors_under_bridge():
    """TE context_parallel.py:4067-4070 (sliding window: a2a or all_gather) and utils.py:746-754 (sinks: a2a)."""
    gpt = load_model("gpt-oss-20b")
    assert codes(comm_type_findings(gpt, 1, 2, "p2p", None, False)) == [
        "CP_SLIDING_WINDOW_COMM_TYPE",
        "CP_SINKS_COMM_TYPE",
    ]
    assert codes(comm_type_findings(gpt, 1, 2, "all_gather", None, False)) == ["CP_SINKS_COMM_TYPE"]
    assert codes(comm_type_findings(gpt, 1, 2, None, None, False, "bridge")) == []
    assert codes(comm_type_findings(gpt, 1, 2, None, None, False, "megatron-lm")) == [
        "CP_SLIDING_WINDOW_COMM_TYPE",
        "CP_SINKS_COMM_TYPE",
    ]
    # the unset value comes from the gpt_oss row only: other families keep p2p under Bridge
    qwen = load_model("qwen3-30b-a3b")
    ctx = build_context(TrainingConfig(**QWEN, cp=2))
    assert ctx.cp_comm_type == "p2p" and ctx.cp_comm_default.caveat is None
    assert codes(comm_type_findings(qwen, 1, 2, None, None, False)) == []


def test_reproduction_mla_with_packed_sequences_is_not_an_mla_error():
    """MCore multi_latent_attention.py:85-99 pads V to the Q/K head dim for THD, so TE's MLA check
    (context_parallel.py:4072-4076, k and v head dims differ) cannot fire on packed sequences."""
    dsv3 = load_model("deepseek-v3")
    assert codes(comm_type_findings(dsv3, 1, 2, "a2a", None, True)) == []
    unpacked = comm_type_findings(dsv3, 1, 2, "a2a", None, False)
    assert codes(unpacked) == ["CP_MLA_COMM_TYPE"]
    assert "unpacked" in the(unpacked, "CP_MLA_COMM_TYPE").message
    # packed + all_gather still fails, for the THD reason (context_parallel.py:2877)
    assert codes(comm_type_findings(dsv3, 1, 2, "all_gather", None, True)) == ["CP_THD_COMM_TYPE"]


def test_reproduction_sinks_with_degenerate_a2a_p2p_is_refused():
    """TE utils.py:746-754: the backend filter reads cp_comm_type as stored ('a2a+p2p', even with a size-1
    level, dot_product_attention.py:373, 1367), disables FusedAttention and no backend is left."""
    gpt = load_model("gpt-oss-20b")
    found = comm_type_findings(gpt, 1, 2, "a2a+p2p", [2, 1], False)
    assert codes(found) == ["CP_SINKS_COMM_TYPE"]
    assert "not a2a+p2p" in the(found, "CP_SINKS_COMM_TYPE").message
    assert codes(comm_type_findings(gpt, 1, 2, "a2a", None, False)) == []


def test_reproduction_thd_with_degenerate_a2a_p2p_is_refused():
    """TE context_parallel.py:4031-4033 asserts qkv_format != 'thd' for a2a+p2p before it degrades a size-1
    level (:4037-4042)."""
    qwen = load_model("qwen3-30b-a3b")
    for hierarchy in ([1, 2], [2, 1]):
        found = comm_type_findings(qwen, 1, 2, "a2a+p2p", hierarchy, True)
        assert codes(found) == ["CP_THD_COMM_TYPE"]
        assert f"hierarchical_cp_sizes={hierarchy}" in the(found, "CP_THD_COMM_TYPE").message
        assert codes(comm_type_findings(qwen, 1, 2, "a2a+p2p", hierarchy, False)) == []
    assert codes(comm_type_findings(qwen, 1, 2, "a2a", None, True)) == []
    assert codes(comm_type_findings(qwen, 1, 2, "p2p", None, True)) == []


def test_reproduction_blockwise_shape_lint(capsys):
    """TE 2.14 aligns blockwise to 16 (quantization.py:119-125; cublaslt_gemm.cu:209-210, :292-295), not 128."""
    r = lint_config(
        LintConfigRequest(
            model="qwen3-30b-a3b",
            gpu="h100",
            num_gpus=64,
            megatron_args="--tensor-model-parallel-size 4 --context-parallel-size 16 --expert-model-parallel-size 8 "
            "--sequence-parallel --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --fp8-format e4m3 "
            "--fp8-recipe blockwise --bf16 --use-distributed-optimizer",
        )
    )
    assert "PRECISION_SHAPE" not in codes(r.findings) and r.valid


# ------------------------------------------------------------------ hierarchy at CP = 1


def test_a2a_p2p_needs_the_hierarchy_at_every_cp_size():
    """LM arguments.py:565-567 and Bridge training/config.py:1542-1549 assert the hierarchy whenever
    cp_comm_type contains a2a+p2p, independent of the CP size."""
    qwen = load_model("qwen3-30b-a3b")
    for cp in (1, 2):
        found = comm_type_findings(qwen, 1, cp, "a2a+p2p", None, False)
        assert codes(found) == ["CP_HIERARCHY_REQUIRED"]
    assert "drop cp_comm_type at CP = 1" in comm_type_findings(qwen, 1, 1, "a2a+p2p", None, False)[0].fix
    assert codes(comm_type_findings(qwen, 1, 1, "a2a+p2p", [1, 1], False)) == []
    assert codes(comm_type_findings(qwen, 1, 1, None, None, False)) == []
    assert "CP_HIERARCHY_REQUIRED" in errors(**QWEN, cp_comm_type="a2a+p2p")
    assert "CP_HIERARCHY_REQUIRED" not in errors(**QWEN, cp_comm_type="a2a+p2p", hierarchical_cp_sizes=[1, 1])
    fixed = lint(bridge_overrides=BRIDGE_BASE + " model.cp_comm_type=a2a+p2p")
    assert codes(fixed.findings) == ["CP_HIERARCHY_REQUIRED"] and fixed.remaining_errors == []
    assert fixed.fixes[0].settings == {"cp_comm_type": None}


# ------------------------------------------------------------------ smallest fix upstream accepts


def test_a2a_heads_fix_never_suggests_p2p_for_sliding_window_or_sinks():
    """TE context_parallel.py:3402-3404 (heads % a2a size); p2p is refused for sliding windows (:4067-4070)
    and sinks (utils.py:746-754), so the fix stays on a2a."""
    gpt = load_model("gpt-oss-120b")  # 64 query / 8 KV heads: TP2 leaves 4 KV heads per rank
    found = comm_type_findings(gpt, 2, 8, "a2a", None, False)
    assert codes(found) == ["CP_A2A_HEADS"]
    fix = the(found, "CP_A2A_HEADS").fix
    assert "p2p" not in fix
    assert "CP at most 4 at TP=2" in fix and "TP=1 allows a2a up to 8" in fix
    qwen = load_model("qwen3-30b-a3b")  # full attention: p2p is the nearest legal choice
    assert (
        "Use cp_comm_type p2p" in the(comm_type_findings(qwen, 1, 8, "a2a", None, False), "CP_A2A_HEADS").fix
    )
    assert codes(comm_type_findings(gpt, 2, 4, "a2a", None, False)) == []


def test_budget_alternative_for_gpt_oss_with_p2p_is_a2a_not_cp1():
    """The same layout with cp_comm_type a2a is what Bridge's recipe runs; it comes before dropping CP."""
    r = check_dp_budget(
        CheckDpBudgetRequest(
            model="gpt-oss-20b",
            gpu="gb200",
            num_gpus=8,
            seq_len=8192,
            tp=1,
            cp=2,
            ep=4,
            gbs=8,
            cp_comm_type="p2p",
        )
    )
    assert not r.valid
    assert r.alternatives[0].settings == {"cp_comm_type": "a2a"}
    assert "cp_comm_type p2p -> a2a" in r.alternatives[0].why


def test_lint_repairs_gpt_oss_p2p_with_a2a():
    r = lint_config(
        LintConfigRequest(
            model="gpt-oss-20b",
            gpu="gb200",
            num_gpus=8,
            bridge_overrides="model.context_parallel_size=2 model.expert_model_parallel_size=4 "
            "model.seq_length=8192 train.global_batch_size=8 model.cp_comm_type=p2p",
        )
    )
    assert not r.valid and r.remaining_errors == []
    assert [f.settings for f in r.fixes] == [{"cp_comm_type": "a2a"}]
    assert "model.cp_comm_type=a2a" in r.corrected


# ------------------------------------------------------------------ Megatron-LM validate_args rules


def test_lm_cross_entropy_te_fusion():
    """LM arguments.py:1642-1647 asserts not (cross_entropy_loss_fusion and impl == 'te'); Bridge has no
    such check (MCore model_parallel_config.py:536-543 only warns)."""
    bad = lint(megatron_args=LM_BASE + " --cross-entropy-loss-fusion --cross-entropy-fusion-impl te")
    assert codes(bad.findings) == ["LM_CROSS_ENTROPY_TE"]
    assert the(bad.findings, "LM_CROSS_ENTROPY_TE").keys == [
        "--cross-entropy-loss-fusion",
        "--cross-entropy-fusion-impl",
    ]
    assert bad.fixes[0].settings == {"cross_entropy_fusion": "native"}
    assert (
        "--cross-entropy-fusion-impl" not in bad.corrected and "--cross-entropy-loss-fusion" in bad.corrected
    )
    assert lint(megatron_args=LM_BASE + " --cross-entropy-loss-fusion").valid
    assert lint(megatron_args=LM_BASE + " --cross-entropy-fusion-impl te").valid  # impl alone: no fusion
    assert lint(megatron_args=LM_BASE).effective_config["cross_entropy_fusion"] == "none"
    bridge = lint(bridge_overrides=BRIDGE_BASE + " model.cross_entropy_fusion_impl=te")
    assert bridge.valid and bridge.effective_config["cross_entropy_fusion"] == "te"


def test_lm_tp_comm_overlap_needs_sequence_parallel():
    """LM arguments.py:1393-1399 turns SP off at TP 1, then :1401-1402 asserts SP for --tp-comm-overlap;
    Bridge comm_overlap.py:441-451 turns the overlap off instead."""
    assert lint(megatron_args=LM_BASE + " --tp-comm-overlap").valid
    no_sp = lint(megatron_args=LM_BASE.replace("--sequence-parallel ", "") + " --tp-comm-overlap")
    assert "LM_TP_COMM_OVERLAP_NEEDS_SP" in codes(no_sp.findings)
    tp1 = "--sequence-parallel --expert-model-parallel-size 8 --seq-length 4096 --micro-batch-size 1 " \
          "--global-batch-size 64 --bf16 --tp-comm-overlap"  # fmt: skip
    r = lint_config(LintConfigRequest(model="qwen3-30b-a3b", num_gpus=8, megatron_args=tp1))
    assert codes(r.findings) == ["LM_TP_COMM_OVERLAP_NEEDS_SP"]
    assert "TP = 1" in the(r.findings, "LM_TP_COMM_OVERLAP_NEEDS_SP").message
    assert r.fixes[-1].settings == {"tp_comm_overlap": False}
    bridge = run(build_context(TrainingConfig(**QWEN, tp_comm_overlap=True, sequence_parallel=False)))
    assert the(bridge, "TP_COMM_OVERLAP_DISABLED").severity == Severity.info
    assert "LM_TP_COMM_OVERLAP_NEEDS_SP" not in codes(bridge)


def test_activation_offload_reads_the_launch_exports():
    """LM arguments.py:1854-1859 and Bridge training/config.py:2053-2059: with TE >= 2.10 the variable must be
    exactly '1'."""
    offload = "torchrun --nproc-per-node 8 pretrain_gpt.py " + LM_BASE + " --fine-grained-activation-offloading " \
              "--offload-modules core_attn"  # fmt: skip
    missing = lint(megatron_args=offload)
    assert codes(missing.findings) == ["OFFLOAD_ENV_MISSING"]
    # bare flags say nothing about the environment: a reminder only
    bare = lint(megatron_args=offload.split("pretrain_gpt.py ")[1])
    assert bare.valid and "OFFLOAD_ENV" in codes(bare.findings, Severity.info)
    assert "export NVTE_CPU_OFFLOAD_V1=1" in the(missing.findings, "OFFLOAD_ENV_MISSING").fix
    assert lint(megatron_args="export NVTE_CPU_OFFLOAD_V1=1\n" + offload).valid
    assert "OFFLOAD_ENV_MISSING" in codes(
        lint(megatron_args="export NVTE_CPU_OFFLOAD_V1=true\n" + offload).findings
    )
    assert lint(megatron_args=LM_BASE).valid  # no offload: the variable does not matter
    # a request that does not say (Bridge overrides, the planning tools): a reminder, not an error
    unknown = run(build_context(TrainingConfig(**QWEN, activation_offload=["core_attn"])))
    assert "OFFLOAD_ENV" in codes(unknown, Severity.info) and "OFFLOAD_ENV_MISSING" not in codes(unknown)


def test_lm_micro_batch_size_is_required():
    """LM arguments.py:675 asserts micro_batch_size is not None (no default in core_r0.19)."""
    r = lint(megatron_args=LM_BASE.replace(" --micro-batch-size 1", ""))
    assert codes(r.findings) == ["LM_MICRO_BATCH_SIZE_MISSING"] and not r.valid
    assert lint(megatron_args=LM_BASE).valid


def test_layout_mtp_stage_needs_the_launchs_mtp_count():
    """MCore pipeline_parallel_layer_layout.py:110-113: the m count must equal mtp_num_layers (None counts
    as 0). Megatron-LM without --mtp-num-layers has no MTP layer, whatever the catalog says."""
    args = ("--pipeline-model-parallel-size 8 --expert-model-parallel-size 32 --seq-length 4096 "
            "--micro-batch-size 1 --global-batch-size 256 --bf16 --use-distributed-optimizer "
            "--pipeline-model-parallel-layout 'Et*3|(t*4|)*14t*2mL'")  # fmt: skip
    req = dict(model="deepseek-v3", num_gpus=256)
    r = lint_config(LintConfigRequest(**req, megatron_args=args))
    assert r.effective_config["mtp_num_layers"] == 0
    assert (
        "the layout has 1 MTP layers m but mtp_num_layers is 0"
        in the(r.findings, "PP_LAYOUT_INVALID").message
    )
    assert lint_config(LintConfigRequest(**req, megatron_args=args + " --mtp-num-layers 1")).valid
    # a count the engine cannot read (a shell variable) is not taken as 0: the model's own count stands
    unread = lint_config(LintConfigRequest(**req, megatron_args=args + " --mtp-num-layers $MTP"))
    assert unread.valid and unread.effective_config["mtp_num_layers"] is None
    no_m = lint_config(LintConfigRequest(**req, megatron_args=args.replace("mL", "L")))
    assert no_m.valid and no_m.effective_config["mtp_num_layers"] == 0
    assert "model.mtp_num_layers=0" in no_m.corrected_other_dialect


def test_moe_ffn_hidden_size_falls_back_to_ffn_hidden_size_and_gqa_dense_layers_build():
    """LM arguments.py:1592-1597 (moe_ffn_hidden_size = ffn_hidden_size when unset); --moe-layer-freq marks
    leading dense layers for any attention type (MCore transformer_config.py moe_layer_freq)."""
    flags = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --group-query-attention "
             "--num-query-groups 4 --num-experts 64 --moe-router-topk 8 --ffn-hidden-size 1024 "
             "--moe-layer-freq ([0]*2+[1]*22) --expert-model-parallel-size 8 --seq-length 4096 "
             "--micro-batch-size 1 --global-batch-size 64 --bf16")  # fmt: skip
    r = lint_config(LintConfigRequest(num_gpus=16, megatron_args=flags))
    assert r.valid and r.model == "custom"
    assert the(r.findings, "MOE_FFN_FROM_FFN").severity == Severity.info
    spec, _ = resolve_model(understand_megatron(parse_megatron_args(flags)), None)
    assert spec.moe_ffn_hidden_size == 1024 and spec.num_dense_layers == 2 and spec.num_query_groups == 4
    given = lint_config(LintConfigRequest(num_gpus=16, megatron_args=flags + " --moe-ffn-hidden-size 512"))
    assert "MOE_FFN_FROM_FFN" not in [f.code for f in given.findings]


# ------------------------------------------------------------------ Bridge rules


def test_bridge_delay_wgrad_needs_ep_overlap():
    """Bridge training/comm_overlap.py:532-535 and MCore transformer_config.py:2749-2752."""
    r = lint(bridge_overrides=BRIDGE_BASE + " comm_overlap.delay_wgrad_compute=true")
    assert codes(r.findings) == ["DELAY_WGRAD_NEEDS_EP_OVERLAP"]
    assert r.fixes[0].settings == {"delay_wgrad_compute": False}
    for key in ("comm_overlap", "model"):
        ok = lint(bridge_overrides=BRIDGE_BASE + " comm_overlap.delay_wgrad_compute=true "
                  f"{key}.overlap_moe_expert_parallel_comm=true")  # fmt: skip
        assert "DELAY_WGRAD_NEEDS_EP_OVERLAP" not in codes(ok.findings)
    lm = lint(megatron_args=LM_BASE + " --delay-wgrad-compute")
    assert "DELAY_WGRAD_NEEDS_EP_OVERLAP" in codes(lm.findings)


def test_bridge_optimizer_cpu_offload_without_fraction_offloads_nothing():
    """MCore optimizer_config.py:344-347 (fraction default 0.0, which Bridge inherits); LM's flag defaults to
    1.0 (arguments.py:2785)."""
    r = lint(bridge_overrides=BRIDGE_BASE + " optimizer.optimizer_cpu_offload=true "
             "optimizer.use_precision_aware_optimizer=true")  # fmt: skip
    warning = the(r.findings, "OFFLOAD_FRACTION_ZERO")
    assert warning.severity == Severity.warning and r.valid
    assert "optimizer.optimizer_offload_fraction" in warning.fix
    assert r.effective_config["optimizer_cpu_offload_fraction"] == 0.0
    with_fraction = lint(bridge_overrides=BRIDGE_BASE + " optimizer.optimizer_cpu_offload=true "
                         "optimizer.optimizer_offload_fraction=1.0 optimizer.use_precision_aware_optimizer=true")  # fmt: skip
    assert "OFFLOAD_FRACTION_ZERO" not in [f.code for f in with_fraction.findings]
    lm = lint(megatron_args=LM_BASE + " --optimizer-cpu-offload --use-precision-aware-optimizer")
    assert lm.effective_config["optimizer_cpu_offload_fraction"] == 1.0
    assert "OFFLOAD_FRACTION_ZERO" not in [f.code for f in lm.findings]


@pytest.mark.parametrize("order", ["external_first", "impl_first"])
def test_external_cuda_graph_resolves_as_megatron_core_whatever_the_key_order(order):
    """MCore transformer_config.py:2365-2381 checks the final values in __post_init__: the switch needs
    cuda_graph_impl 'none' and then becomes transformer_engine."""
    pair = ["model.external_cuda_graph=true", "model.cuda_graph_impl=transformer_engine"]
    if order == "impl_first":
        pair.reverse()
    bad = lint(bridge_overrides=BRIDGE_BASE + " " + " ".join(pair))
    assert codes(bad.findings) == ["GRAPH_LEGACY_WITH_IMPL"]
    alone = lint(bridge_overrides=BRIDGE_BASE + " model.external_cuda_graph=true")
    assert alone.valid and alone.effective_config["cuda_graph_impl"] == "transformer_engine"
    lm_flags = ["--external-cuda-graph", "--cuda-graph-impl transformer_engine"]
    if order == "impl_first":
        lm_flags.reverse()
    lm = lint(megatron_args=LM_BASE + " " + " ".join(lm_flags))
    assert "GRAPH_LEGACY_WITH_IMPL" in codes(lm.findings)
    lm_alone = lint(megatron_args=LM_BASE + " --external-cuda-graph")
    assert lm_alone.effective_config["cuda_graph_impl"] == "transformer_engine"
    assert "GRAPH_LEGACY_WITH_IMPL" not in codes(lm_alone.findings)


def test_bridge_external_cuda_graph_captures_whole_layers():
    """Bridge training/config.py:1260 validates the graph setting before finalize (:1262); with impl 'none'
    utils/cuda_graph.py:134-138 clears the modules, so the migrated transformer_engine graph is whole-layer."""
    for keys in ("model.external_cuda_graph=true model.cuda_graph_modules=[attn]",
                 "model.cuda_graph_modules=[attn] model.external_cuda_graph=true"):  # fmt: skip
        r = lint(bridge_overrides=BRIDGE_BASE + " " + keys)
        assert r.effective_config["cuda_graph_modules"] == []
        assert the(r.findings, "GRAPH_LEGACY_CLEARS_MODULES").severity == Severity.warning
    scoped = lint(bridge_overrides=BRIDGE_BASE + " model.cuda_graph_impl=transformer_engine "
                  "model.cuda_graph_modules=[attn]")  # fmt: skip
    assert scoped.effective_config["cuda_graph_modules"] == ["attn"]
    assert "GRAPH_LEGACY_CLEARS_MODULES" not in [f.code for f in scoped.findings]


# ------------------------------------------------------------------ one engine, one verdict


def test_graph_tool_reports_the_dispatcher_error_estimate_memory_reports():
    """validate_cuda_graph_shapes used to call flex-deepep with pad-to-capacity valid while estimate_memory
    reported DISPATCHER_DEEPEP_PAD."""
    cfg = dict(model="qwen3-30b-a3b", seq_len=4096, tp=1, ep=8, num_gpus=8, gpu="h100", dispatcher="flex-deepep",
               moe_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)  # fmt: skip
    assert "DISPATCHER_DEEPEP_PAD" in errors(**cfg)
    r = validate_cuda_graph_shapes(ValidateCudaGraphsRequest(**cfg))
    assert not r.valid and "DISPATCHER_DEEPEP_PAD" in codes(r.findings)


def test_full_iteration_requirements_do_not_say_experts_stay_eager():
    base = dict(model="qwen3-30b-a3b", seq_len=4096, tp=1, ep=8, num_gpus=8, gbs=16)
    full = validate_cuda_graph_shapes(
        ValidateCudaGraphsRequest(**base, cuda_graph_impl="full_iteration", check_for_nan_in_loss=False)
    )
    assert full.valid
    assert not any("eager" in req for req in full.static_requirements)
    assert "microbatches per step fixed at 2 (global batch size and DP unchanged)" in full.static_requirements
    per_layer = validate_cuda_graph_shapes(
        ValidateCudaGraphsRequest(**base, cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"])
    )
    assert any("expert computation stays eager" in req for req in per_layer.static_requirements)
