"""lint_config: launch scripts and override lists to findings, with corrected configs that lint clean."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from conftest import error_codes
from moe_long_context.dialects.overrides import architecture_flags, bridge_override_list, megatron_args_for
from moe_long_context.dialects.tables import parse_bridge_overrides, parse_megatron_args, render_megatron
from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.findings import Severity
from moe_long_context.errors import InputError
from moe_long_context.model.catalog import load_model
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config

DSV3_SCRIPT = (Path(__file__).parent / "data" / "dsv3_128k_h100.sh").read_text()

QWEN_OVERRIDES = [
    "model.tensor_model_parallel_size=4",
    "model.context_parallel_size=4",
    "model.expert_model_parallel_size=32",
    "model.expert_tensor_parallel_size=1",
    "model.pipeline_model_parallel_size=4",
    "model.virtual_pipeline_model_parallel_size=12",
    "model.account_for_embedding_in_pipeline_split=true",
    "model.account_for_loss_in_pipeline_split=true",
    "model.sequence_parallel=true",
    "model.seq_length=131072",
    "train.global_batch_size=64",
    "train.micro_batch_size=1",
    "model.moe_token_dispatcher_type=flex",
    "model.moe_flex_dispatcher_backend=hybridep",
    "mixed_precision=bf16_with_mxfp8_mixed",
    "model.recompute_granularity=selective",
    "model.recompute_modules=[moe_act,layernorm]",
    "model.cuda_graph_impl=transformer_engine",
    "model.cuda_graph_modules=[attn,moe_router,moe_preprocess]",
]


def lint(**kw):
    return lint_config(LintConfigRequest(**kw))


def test_seed_dsv3_script_lints_clean_and_is_understood():
    r = lint(megatron_args=DSV3_SCRIPT, gpu="h100")
    assert r.valid, [(f.code, f.message) for f in r.findings if f.severity == Severity.error]
    assert r.model == "deepseek-v3" and r.num_gpus == 256  # recognised from the flags; 32 nodes x 8
    eff = r.effective_config
    assert (eff["tp"], eff["cp"], eff["pp"], eff["vpp"], eff["ep"]) == (1, 32, 8, 4, 32)
    assert eff["precision"] == "fp8-blockwise" and eff["dispatcher"] == "flex-deepep"
    assert eff["optimizer_cpu_offload_fraction"] == 1.0  # Megatron-LM's default fraction
    assert {n.keys[0] for n in r.not_checked} == {"--lr", "--data-path"}  # flags no rule reads
    assert all(n.source is None for n in r.not_checked)
    assert r.fixes == [] and r.remaining_errors == []
    assert "MODEL_RECOGNISED" in [f.code for f in r.findings]


def test_seed_qwen_overrides_lint_clean():
    r = lint(bridge_overrides=QWEN_OVERRIDES, model="qwen3-235b-a22b", gpu="gb200", num_gpus=128)
    assert r.valid, error_codes(r)
    assert r.effective_config["precision"] == "mxfp8"
    # and as a config object with sections
    obj = {
        "model": {"tensor_model_parallel_size": 4, "context_parallel_size": 4, "expert_model_parallel_size": 32,
                  "pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 12,
                  "account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True,
                  "sequence_parallel": True, "seq_length": 131072},
        "train": {"global_batch_size": 64},
    }  # fmt: skip
    r = lint(config=obj, model="qwen3-235b-a22b", gpu="gb200", num_gpus=128)
    assert r.valid and r.dialect == "config"


def test_findings_name_the_flags_as_written():
    script = DSV3_SCRIPT.replace("mla_up_proj layernorm moe mlp", "up_proj norm moe mlp")
    r = lint(megatron_args=script, gpu="h100")
    bad = [f for f in r.findings if f.code == "RECOMPUTE_UNKNOWN_MODULE"]
    assert len(bad) == 2 and all(f.keys == ["--recompute-modules"] for f in bad)
    assert "'mla_up_proj'" in bad[0].fix or "'layernorm'" in bad[0].fix


def test_unknown_flags_are_errors_and_deprecated_names_info():
    script = DSV3_SCRIPT + " --tensor-parallel-size 2 --moe-router-padding-for-fp8"
    r = lint(megatron_args=script, gpu="h100")
    unknown = [f for f in r.findings if f.code == "LM_UNKNOWN_FLAG"]
    assert unknown and "--tensor-parallel-size" in unknown[0].message
    assert "--tensor-model-parallel-size" in unknown[0].fix
    dep = [f for f in r.findings if f.code == "DEPRECATED_NAME"]
    assert (
        dep and dep[0].severity == Severity.info and "--moe-router-padding-for-quantization" in dep[0].message
    )
    assert "--tensor-parallel-size" not in r.corrected


def test_cuda_graph_modules_is_a_real_flag_and_scope_is_deprecated():
    script = DSV3_SCRIPT + " --cuda-graph-impl transformer_engine --cuda-graph-modules attn"
    r = lint(megatron_args=script, gpu="h100")
    assert "LM_UNKNOWN_FLAG" not in [f.code for f in r.findings]
    old = DSV3_SCRIPT + " --cuda-graph-impl transformer_engine --cuda-graph-scope attn"
    r = lint(megatron_args=old, gpu="h100")
    assert any(f.code == "DEPRECATED_NAME" and "--cuda-graph-scope" in f.message for f in r.findings)
    assert r.effective_config["cuda_graph_modules"] == ["attn"]
    assert "LM_CUDA_GRAPH_SCOPE_AND_MODULES" not in [f.code for f in r.findings]
    # both at once: arguments.py:615-618 asserts, so the launch stops (one error, the fix drops the old flag)
    both = lint(megatron_args=old + " --cuda-graph-modules attn", gpu="h100")
    found = [f for f in both.findings if f.code == "LM_CUDA_GRAPH_SCOPE_AND_MODULES"]
    assert found and found[0].severity == Severity.error and "--cuda-graph-scope" in found[0].fix
    assert "--cuda-graph-scope" not in both.corrected and "--cuda-graph-modules attn" in both.corrected
    again = lint(megatron_args=both.corrected, gpu="h100")
    assert "LM_CUDA_GRAPH_SCOPE_AND_MODULES" not in [f.code for f in again.findings]


# One broken rule per family: (edits of the seed script, the error code).
BREAKS = [
    (
        [
            ("--nnodes ${NODES}", "--nnodes 48"),
            ("--expert-model-parallel-size 32", "--expert-model-parallel-size 16"),
        ],
        "LAYOUT_WORLD_DIVISIBILITY",
    ),
    (
        [
            ("--nnodes ${NODES}", "--nnodes 96"),
            ("--expert-model-parallel-size 32", "--expert-model-parallel-size 24"),
            ("--global-batch-size 256", "--global-batch-size 768"),
        ],
        "EP_DIVIDES_EXPERTS",
    ),
    ([("--pipeline-model-parallel-layout 'Et|(tt|)*30mL'", "")], "PP_LAYERS_NOT_DIVISIBLE"),
    ([("--global-batch-size 256", "--global-batch-size 60")], "VPP_MICROBATCHES"),
    ([("--seq-length 131072", "--seq-length 131000")], "SEQ_CP_DIVISIBILITY"),
    ([("--cp-comm-type a2a+p2p", "--cp-comm-type a2a")], "CP_MLA_COMM_TYPE"),
    (
        [("--recompute-modules mla_up_proj layernorm moe mlp", "--recompute-modules up_proj")],
        "RECOMPUTE_UNKNOWN_MODULE",
    ),
    (
        [("--moe-grouped-gemm", ""), ("layernorm moe mlp", "layernorm moe_act")],
        "RECOMPUTE_MOE_ACT_GROUPED_GEMM",
    ),
    ([("--fp8-recipe blockwise", "--fp8-recipe mxfp8")], "PRECISION_GPU"),
    ([("--use-precision-aware-optimizer", "")], "OFFLOAD_NEEDS_PRECISION_AWARE"),
    (
        [
            (
                "--moe-grouped-gemm",
                "--moe-grouped-gemm --moe-pad-expert-input-to-capacity --moe-expert-capacity-factor 1.0",
            )
        ],
        "DISPATCHER_DEEPEP_PAD",
    ),
    (
        [("--bf16", "--bf16 --cuda-graph-impl transformer_engine --cuda-graph-modules attn moe_preprocess")],
        "GRAPH_PREPROCESS_NEEDS_ROUTER",
    ),
    ([("--bf16", "--bf16 --recompute-method uniform")], "RECOMPUTE_SELECTIVE_METHOD"),
    (
        [("--tensor-model-parallel-size 1", "--tensor-model-parallel-size 1 --sequence-paralel")],
        "LM_UNKNOWN_FLAG",
    ),
]


@pytest.mark.parametrize(("edits", "code"), BREAKS, ids=[b[1] for b in BREAKS])
def test_breaking_one_rule_gives_that_error_and_a_correction_that_lints_clean(edits, code):
    script = DSV3_SCRIPT
    for old, new in edits:
        assert old in script
        script = script.replace(old, new)
    r = lint(megatron_args=script, gpu="h100")
    assert set(error_codes(r)) == {code}, [
        (f.code, f.message) for f in r.findings if f.severity == Severity.error
    ]
    # the correction was checked as handed back; a layout no alternative of which fits says so, with next steps
    assert r.remaining_errors in ([], ["MEMORY_OVER_BUDGET"])
    if r.remaining_errors:
        assert r.corrected_memory.fits is False and r.corrected_memory.next_steps
    again = lint(megatron_args=r.corrected, gpu="h100")
    assert again.valid, [(f.code, f.message) for f in again.findings if f.severity == Severity.error]
    # the other dialect is equivalent
    other = lint(
        bridge_overrides=r.corrected_other_dialect, model="deepseek-v3", gpu="h100", num_gpus=r.num_gpus
    )
    assert other.valid, error_codes(other)


def test_correction_changes_nothing_else():
    script = DSV3_SCRIPT.replace("--global-batch-size 256", "--global-batch-size 60")
    r = lint(megatron_args=script, gpu="h100")
    assert [(f.code, f.settings) for f in r.fixes] == [("VPP_MICROBATCHES", {"gbs": 64})]
    before = parse_megatron_args(script)
    after = parse_megatron_args(r.corrected)
    diff = [
        (a.flag, a.values, b.values)
        for a, b in zip(before.items, after.items, strict=True)
        if a.values != b.values
    ]
    assert diff == [("--global-batch-size", ["60"], ["64"])]


def test_bridge_correction_keeps_unknown_keys_and_order():
    items = [*QWEN_OVERRIDES, "checkpoint.save=/ckpt"]
    items[items.index("model.recompute_modules=[moe_act,layernorm]")] = (
        "model.recompute_modules=[moe_act,norm]"
    )
    r = lint(bridge_overrides=items, model="qwen3-235b-a22b", gpu="gb200", num_gpus=128)
    assert error_codes(r) == ["RECOMPUTE_UNKNOWN_MODULE"]
    assert [n.keys for n in r.not_checked] == [["checkpoint.save"]]
    assert "model.recompute_modules=[moe_act,layernorm]" in r.corrected
    assert r.corrected[-1] == "checkpoint.save=/ckpt" and len(r.corrected) == len(items)


def test_parse_script_features():
    parsed = parse_megatron_args("A=4\nexport B=8  # comment\npython pretrain_gpt.py --context-parallel-size $A \\\n"
                                 "  --tensor-model-parallel-size=${B} --recompute-modules a b --bf16")  # fmt: skip
    flags = {i.flag: i.values for i in parsed.items}
    assert flags == {"--context-parallel-size": ["4"], "--tensor-model-parallel-size": ["8"],
                     "--recompute-modules": ["a", "b"], "--bf16": []}  # fmt: skip
    assert parse_bridge_overrides("a.b=1 c.d=[x, y] e=true f=null") == {
        "a.b": 1,
        "c.d": ["x", "y"],
        "e": True,
        "f": None,
    }


def test_round_trip_of_rendered_flags():
    cfg = TrainingConfig(model="deepseek-v3", num_gpus=256, cp=32, ep=32, pp=8, vpp=4, seq_len=131072, gbs=256,
                         pipeline_layout="Et|(tt|)*30mL", dispatcher="flex-deepep", precision="fp8-blockwise",
                         recompute_granularity="selective", recompute_modules=["mla_up_proj", "layernorm"])  # fmt: skip
    model = load_model("deepseek-v3")
    script = "torchrun --nnodes 32 --nproc-per-node 8 pretrain_gpt.py " + render_megatron(
        architecture_flags(model) + megatron_args_for(cfg, None), per_line=False
    )
    r = lint(megatron_args=script, gpu="h100")
    for key in ("tp", "cp", "pp", "vpp", "ep", "gbs", "pipeline_layout", "dispatcher", "precision",
                "recompute_modules", "use_distributed_optimizer", "moe_grouped_gemm"):  # fmt: skip
        assert r.effective_config[key] == cfg.model_dump(mode="json")[key], key
    b = lint(bridge_overrides=bridge_override_list(cfg), model="deepseek-v3", gpu="h100", num_gpus=256)
    for key in ("tp", "cp", "pp", "vpp", "ep", "gbs", "pipeline_layout", "dispatcher", "precision"):
        assert b.effective_config[key] == cfg.model_dump(mode="json")[key], key


@pytest.mark.parametrize(
    ("precision", "written"), [("fp8-blockwise", False), ("bf16", False), ("mxfp8", True)]
)
def test_mxfp8_only_settings_are_written_only_with_mxfp8(precision, written):
    """reuse_grad_buf_for_mxfp8_param_ag means something to Megatron only with the MXFP8 recipe."""
    cfg = TrainingConfig(model="qwen3-235b-a22b", gpu="b200", num_gpus=64, tp=2, ep=8, precision=precision)
    assert ("--reuse-grad-buf-for-mxfp8-param-ag" in megatron_args_for(cfg)) is written
    off = TrainingConfig(**{**cfg.model_dump(exclude_unset=True), "reuse_grad_buf_for_mxfp8_param_ag": False})
    assert ("mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=false" in bridge_override_list(off)) is written


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "exactly one of megatron_args, bridge_overrides or config"),
        ({"megatron_args": "--tp 1", "bridge_overrides": "a=1"}, "exactly one"),
        ({"bridge_overrides": "model.tp"}, "key=value"),
        ({"megatron_args": "--context-parallel-size 2"}, "architecture flags"),
        ({"megatron_args": "--context-parallel-size 2", "model": "dsv3"}, "num_gpus"),
    ],
)
def test_bad_input(kw, message):
    with pytest.raises((InputError, ValueError), match=message):
        lint(**kw)


FLAG_POOL = ["--tensor-model-parallel-size", "--context-parallel-size", "--pipeline-model-parallel-size",
             "--expert-model-parallel-size", "--num-virtual-stages-per-pipeline-rank", "--global-batch-size",
             "--seq-length", "--recompute-modules", "--cuda-graph-modules", "--cp-comm-type", "--fp8-recipe",
             "--fp8-format", "--moe-token-dispatcher-type", "--pipeline-model-parallel-layout", "--bf16",
             "--sequence-parallel", "--optimizer-cpu-offload", "--bogus-flag", "--recompute-granularity",
             "--decoder-first-pipeline-num-layers", "--hierarchical-context-parallel-sizes"]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(FLAG_POOL),
            st.lists(
                st.sampled_from(
                    [
                        "1",
                        "2",
                        "8",
                        "0",
                        "-3",
                        "x",
                        "a2a",
                        "moe",
                        "full",
                        "Et|tL",
                        "99999999999",
                        "$X",
                        "[1,2]",
                    ]
                ),
                max_size=2,
            ),
        ),
        max_size=12,
    )
)
def test_lint_never_crashes_on_generated_scripts(items):
    script = "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py " + " ".join(
        f"{flag} {' '.join(values)}" for flag, values in items
    )
    with contextlib.suppress(InputError, ValidationError):
        lint(megatron_args=script, model="qwen3-30b-a3b", gpu="h100")
