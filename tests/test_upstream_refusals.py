"""Inputs Hydra, Bridge or Megatron Core refuse at start are refused here too (exit 2, one line naming the field and
what is allowed), not read as something else and approved."""

from __future__ import annotations

import pytest

from moe_long_context.errors import InputError
from moe_long_context.faces.cli import main
from moe_long_context.model.catalog import load_model
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout
from moe_long_context.tools.size_cp import SizeCpRequest, size_cp

WHERE = dict(model="deepseek-v3", gpu="h100", num_gpus=256)


def _lint(overrides: str):
    return lint_config(LintConfigRequest(bridge_overrides=overrides, **WHERE))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # Hydra: '+' on a key the recipe sets raises "Could not append to config"
        ("+model.tensor_model_parallel_size=2", r"\+model.tensor_model_parallel_size appends a key.*Could not append"),
        # MCore moe_layer.py:297-322: only allgather, alltoall and flex are built
        ("model.moe_token_dispatcher_type=flex-deepep", r"model.moe_token_dispatcher_type='flex-deepep' is not allowed: "
         r"alltoall, allgather or flex"),
        ("model.moe_token_dispatcher_type=flex model.moe_flex_dispatcher_backend=deep",
         r"'deep' is not allowed: deepep, hybridep or ncclep"),
        # MCore transformer_config.py:1778: set('moe') is {'m', 'o', 'e'}
        ("model.recompute_granularity=selective model.recompute_modules=moe",
         r"model.recompute_modules='moe' is not allowed: a list such as \[moe\].*\['e', 'm', 'o'\]"),
        ("model.fine_grained_activation_offloading=true model.offload_modules=moe_act",
         r"model.offload_modules='moe_act' is not allowed: a list"),
        # Bridge training/mixed_precision.py:445-461
        ("mixed_precision=bf16_with_fp8_blockwise_mixed", r"mixed_precision='bf16_with_fp8_blockwise_mixed' is not "
         r"allowed: a recipe Bridge registers \(bf16_mixed, "),
    ],
)  # fmt: skip
def test_bridge_values_megatron_refuses_are_refused(overrides, message):
    with pytest.raises(InputError, match=message):
        _lint(overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        "++model.tensor_model_parallel_size=2",  # add-or-override
        "+ddp.suggested_communication_unit_size=4",  # int = None by default: '+' adds it
        "+model.params_dtype=bf16",  # a dtype Bridge leaves out of its OmegaConf view
        "model.moe_token_dispatcher_type=alltoall model.moe_flex_dispatcher_backend=deep",  # never read
        "+model.moe_router_dtype=fp32",  # an Optional field may be unset in the recipe: '+' may add it
        "+peft.dim=8",  # peft may be null: the PEFT findings judge it
        "model.recompute_modules=moe",  # without selective recompute MCore never reads it
        "mixed_precision=bf16-with-mxfp8-mixed",  # the hyphenated name Bridge registers too
        "model.recompute_granularity=selective model.recompute_modules=[moe]",
    ],
)
def test_what_they_accept_is_read(overrides):
    r = _lint(overrides)
    assert r.model == "deepseek-v3"


def test_an_inline_model_whose_heads_do_not_split_over_its_kv_heads_is_refused():
    config = {"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 32,
              "num_key_value_heads": 5, "head_dim": 64, "intermediate_size": 2048, "moe_intermediate_size": 256,
              "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1000, "tie_word_embeddings": False}  # fmt: skip
    with pytest.raises(
        InputError, match=r"^model: num_attention_heads=32 is not a multiple of num_query_groups=5"
    ):
        load_model(config)


@pytest.mark.parametrize(
    ("tp", "num_gpus", "message"),
    [(256, None, r"tp=256 is not allowed: a TP that divides the query heads.*\(128, 128\)"),
     (3, 8, r"tp=3 is not allowed: a divisor of num_gpus=8")],
)  # fmt: skip
def test_size_cp_refuses_a_tp_megatron_refuses(tp, num_gpus, message):
    with pytest.raises(InputError, match=message):
        size_cp(SizeCpRequest(model="deepseek-v3", gpu="h100", seq_len=131072, tp=tp, num_gpus=num_gpus))


def test_plan_refuses_a_dispatcher_the_gpu_does_not_run():
    with pytest.raises(
        InputError, match=r"dispatcher='flex-deepep' is not allowed: one of \[.*'flex-hybridep'"
    ):
        plan_layout(PlanLayoutRequest(model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072,
                                      dispatcher="flex-deepep"))  # fmt: skip


@pytest.mark.parametrize("sizes", ["2,4", "2 4", "[2, 4]", "[2,4]"])
def test_list_flags_take_every_written_form(sizes, capsys):
    """The help's own example ([8, 4]) and a JSON list are read as the list, not split into '[2' and '4]'."""
    code = main(["estimate-throughput", "--model", "deepseek-v3", "--gpu", "h100", "--num-gpus", "256",
                 "--seq-len", "131072", "--gbs", "64", "--tp", "4", "--cp", "8", "--pp", "8", "--pipeline-layout", "Et|(tt|)*30mL",
                 "--ep", "32", "--cp-comm-type", "a2a+p2p", "--hierarchical-cp-sizes", sizes,
                 "--recompute-granularity", "selective", "--recompute-modules", '["moe", "mlp"]', "--json"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and '"step_s": ' in out


def test_an_override_without_a_value_is_named_as_such(capsys):
    code = main(["lint", "--model", "deepseek-v3", "--gpu", "h100", "--num-gpus", "256", "--bridge-overrides",
                 "model.tensor_model_parallel_size"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "an override is key=value (model.tensor_model_parallel_size=VALUE)" in err


def test_an_a2a_level_across_nodes_is_named_with_the_one_inside():
    """DeepSeek-V3 TP4 CP8 with a2a+p2p [4, 2]: the a2a level is 16 ranks over two 8-GPU nodes; [2, 4] keeps
    it inside one. The EP group of 32 spans at least 4 nodes."""
    from moe_long_context.tools.estimate_throughput import EstimateThroughputRequest, estimate_throughput

    job = dict(model="deepseek-v3", gpu="h100", num_gpus=256, seq_len=131072, gbs=64, tp=4, cp=8, pp=8, ep=32,
               pipeline_layout="Et|(tt|)*30mL", cp_comm_type="a2a+p2p")  # fmt: skip
    across = estimate_throughput(EstimateThroughputRequest(**job, hierarchical_cp_sizes=[4, 2]))
    found = {f.code: f for f in across.findings}
    assert "hierarchical_cp_sizes=[2, 4]" in found["CP_OUTSIDE_NVLINK"].fix
    assert "spans at least 4 NVLink domains" in found["EP_OUTSIDE_NVLINK"].message
    inside = estimate_throughput(EstimateThroughputRequest(**job, hierarchical_cp_sizes=[2, 4]))
    assert "CP_OUTSIDE_NVLINK" not in {f.code for f in inside.findings}
    assert inside.terms_s["cp_comm"] < across.terms_s["cp_comm"]


def test_lint_says_when_the_launch_does_not_fit_or_memory_was_not_estimated():
    """DeepSeek-V3 unsharded on 8 H100 does not fit by thousands of GiB: lint warns as estimate_memory does; a
    launch without a sequence length says its memory was not estimated, rather than nothing."""
    r = lint_config(LintConfigRequest(bridge_overrides="model.seq_length=4096 dataset.seq_length=4096",
                                      model="deepseek-v3", gpu="h100", num_gpus=8))  # fmt: skip
    over = next(f for f in r.findings if f.code == "MEMORY_OVER_BUDGET")
    assert over.severity == "warning" and "MEMORY_OVER_BUDGET" in r.remaining_errors
    r = _lint("model.tensor_model_parallel_size=2 model.context_parallel_size=8")
    assert r.corrected_memory is None and "MEMORY_NEEDS_SEQ_LEN" in {f.code for f in r.findings}


@pytest.mark.parametrize(
    ("pattern", "error"),
    [("([0]*3+[1]*50)", True), ("([0]*3+[1]*58)", False), ("[0,0,0]+[1]*58", False), ("1", False)],
)
def test_a_moe_layer_pattern_needs_one_entry_per_layer(pattern, error):
    """MCore gpt_layer_specs.py:653 asserts len(pattern) == num_layers (DeepSeek-V3: 61)."""
    from moe_long_context.dialects.overrides import architecture_flags, drop_flags

    shapes = drop_flags(architecture_flags(load_model("deepseek-v3")), {"--moe-layer-freq"})
    launch = [*shapes, "--moe-layer-freq", pattern, "--micro-batch-size", "1", "--global-batch-size", "64",
              "--seq-length", "4096", "--tensor-model-parallel-size", "8", "--sequence-parallel"]  # fmt: skip
    r = lint_config(LintConfigRequest(megatron_args=launch, gpu="h100", num_gpus=1024))
    found = [f for f in r.findings if f.code == "MOE_LAYER_FREQ_LENGTH"]
    assert bool(found) is error
    if error:
        assert found[0].severity == "error" and "53 entries for 61 decoder layers" in found[0].message
        assert "'([0]*3+[1]*58)'" in found[0].fix


def test_the_launchs_world_size_is_read_and_a_different_one_is_named():
    """torchrun without --nnodes runs one node (its default); a num_gpus that differs from the launch's own world
    size is checked, and lint says it replaced the launch's."""
    launch = ("torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 8 --sequence-parallel "
              "--seq-length 4096 --micro-batch-size 1 --global-batch-size 8")  # fmt: skip
    r = lint_config(LintConfigRequest(megatron_args=launch, model="deepseek-v3", gpu="h100"))
    assert r.num_gpus == 8 and "NUM_GPUS_DIFFERS" not in {f.code for f in r.findings}
    r = lint_config(LintConfigRequest(megatron_args=launch, model="deepseek-v3", gpu="h100", num_gpus=16))
    differs = next(f for f in r.findings if f.code == "NUM_GPUS_DIFFERS")
    assert r.num_gpus == 16 and "launch's own world size of 8 GPUs" in differs.message


@pytest.mark.parametrize(("config", "message"), [('{"model": 5}', r"config.model=5 is not allowed: an object"),
                                                 ('{"model": {}, "train": "abc"}', r"config.train='abc'")])  # fmt: skip
def test_a_config_section_that_is_not_an_object_is_refused(config, message):
    with pytest.raises(InputError, match=message):
        lint_config(LintConfigRequest(config=config, **WHERE))


def test_cli_flag_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--num-gpus"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.count("\n") == 1 and "moe-lc plan: argument --num-gpus: expected one argument" in err
    assert (
        main(["estimate-memory", "--model", "deepseek-v3", "--num-gpus", "8", "--pipeline-layout", ""]) == 2
    )
    assert "pipeline_layout='' is not allowed" in capsys.readouterr().err


def test_a_lora_throughput_says_what_it_counts():
    from moe_long_context.tools.estimate_throughput import EstimateThroughputRequest, estimate_throughput

    r = estimate_throughput(EstimateThroughputRequest(model="qwen3-30b-a3b", gpu="h100", num_gpus=8, seq_len=4096,
                                                      ep=8, gbs=64, lora_dim=16))  # fmt: skip
    assert any(a.startswith("LoRA rank 16: the frozen base runs its GEMMs forward and input gradient only")
               for a in r.assumptions)  # fmt: skip
