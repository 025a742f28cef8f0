"""lint_config's input: what is not a launch is refused in one line; values are read as argparse and Hydra do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moe_long_context.dialects.argcheck import check_megatron_arguments
from moe_long_context.dialects.bridge_keys import (
    bridge_sections,
    bridge_value_problem,
    layout_from_list,
    unknown_bridge_key,
)
from moe_long_context.dialects.tables import hydra_value, megatron_flags, parse_megatron_args, parse_value
from moe_long_context.errors import InputError
from moe_long_context.faces.cli import looks_like_path, main
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config

DSV3_SCRIPT = (Path(__file__).parent / "data" / "dsv3_128k_h100.sh").read_text()


def lint(**kw):
    return lint_config(LintConfigRequest(**kw))


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"megatron_args": ""}, "megatron_args is empty"),
        ({"megatron_args": "   \n"}, "megatron_args is empty"),
        ({"megatron_args": []}, "megatron_args is empty"),
        ({"megatron_args": "Lorem ipsum"}, "megatron_args has no Megatron-LM flag (read 'Lorem ipsum')"),
        ({"megatron_args": "/nonexistent/path.sh"}, "looks like a file path, which is not read here"),
        ({"megatron_args": "--tensor-model-parallel-size two"},
         "--tensor-model-parallel-size 'two' is not an integer (argparse type int)"),
        ({"megatron_args": "--seq-length 131072 --tensor-model-parallel-size"},
         "--tensor-model-parallel-size needs a value"),
        ({"megatron_args": "--tensor-model-parallel-size --seq-length 4096"},
         "--tensor-model-parallel-size needs a value"),
        ({"megatron_args": "--cuda-graph-impl nonsense"},
         "--cuda-graph-impl 'nonsense' is not one of none, local, transformer_engine, full_iteration"),
        ({"megatron_args": ["--moe-layer-freq", '"([0]*3+[1]*58)"']}, "--moe-layer-freq '\"([0]*3+[1]*58)\"' is not"),
        ({"megatron_args": "--moe-layer-freq '([0]*3 + [1]*58)'"}, "(argparse type moe_freq_type)"),
        ({"megatron_args": "--tensor-model-parallel-size 2 3"}, "'3' follows the Megatron flags"),
        ({"megatron_args": "--bf16=1"}, "it is a switch and takes no value"),
        ({"megatron_args": "--attention-backend bogus"}, "--attention-backend 'bogus' is not one of flash, fused"),
        ({"megatron_args": "--lr fast"}, "--lr 'fast' is not a number (argparse type float)"),
        ({"megatron_args": "--hierarchical-context-parallel-sizes 8 x"}, "'x' is not an integer"),
        ({"megatron_args": "--pipeline-model-parallel-layout 'Et|tL"}, "unterminated ' quote"),
        ({"bridge_overrides": ""}, "bridge_overrides is empty"),
        ({"bridge_overrides": "model.tensor_model_parallel_size=2,4"}, "is a Hydra sweep"),
        ({"bridge_overrides": "model.tensor_model_parallel_size=two"},
         "model.tensor_model_parallel_size='two' is a string, but model.tensor_model_parallel_size takes an integer"),
        ({"bridge_overrides": "model.tensor_model_parallel_size=2.0"}, "=2.0 is a float, but"),
        ({"bridge_overrides": "model.moe_grouped_gemm=yes"}, "'yes' is a string, but model.moe_grouped_gemm takes true or false"),
        ({"bridge_overrides": "model.tensor_model_parallel_size=null"}, "takes an integer and cannot be null"),
        ({"config": {"model": {"tensor_model_parallel_size": "ten"}}},
         "config: model.tensor_model_parallel_size='ten' is a string"),
        ({"config": "{}"}, "config has no ConfigContainer section"),
    ],
)  # fmt: skip
def test_input_that_is_not_a_launch_is_refused_in_one_line(kw, message):
    kw = {"model": "deepseek-v3", "num_gpus": 8, **kw}
    with pytest.raises(InputError) as exc:
        lint(**kw)
    text = str(exc.value)
    assert message in text and "\n" not in text


def test_every_value_flag_of_the_inventory_has_its_argparse_type():
    flags = megatron_flags()
    typed = [f for f, spec in flags.items() if spec["kind"] == "value"]
    assert typed and all("type" in flags[f] for f in typed)
    assert flags["--tensor-model-parallel-size"]["type"] == "int"
    assert flags["--moe-layer-freq"]["type"] == "moe_freq_type"


def test_values_argparse_accepts_pass():
    parsed = parse_megatron_args(
        "--moe-layer-freq '([0]*3+[1]*58)' --attention-backend flash --lr 1e-4 --cp-comm-type a2a+p2p "
        "--cuda-graph-modules attn moe_router --tensor-model-parallel-size +2"
    )
    check_megatron_arguments(parsed)  # no InputError


@pytest.mark.parametrize(
    "source", ["", "Lorem ipsum", "/nonexistent/path.sh", "--tensor-model-parallel-size two"], ids=repr
)
def test_cli_exits_2_with_one_line(source, capsys):
    rc = main(["lint", "--megatron-args", source, "--model", "deepseek-v3", "--num-gpus", "8"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("moe-lc lint: ") and "\n" not in err and "Traceback" not in err


def test_cli_long_inline_text_is_not_looked_up_on_disk(capsys):
    text = "--tensor-model-parallel-size 1 " * 30 + "--seq-length 4096"
    assert len(text) > 255 and not looks_like_path(text)
    rc = main(["lint", "--megatron-args", text, "--model", "qwen3-30b-a3b", "--num-gpus", "8", "--json"])
    assert rc in (0, 1) and json.loads(capsys.readouterr().out)["dialect"] == "megatron-lm"


def test_cli_refuses_undecodable_and_unreadable_files(tmp_path, capsys):
    bad = tmp_path / "launch.sh"
    bad.write_bytes(b"\xff\xfe--tensor-model-parallel-size 2")
    assert main(["lint", "--megatron-args", str(bad), "--model", "dsv3", "--num-gpus", "8"]) == 2
    assert "not UTF-8 text (byte 0)" in capsys.readouterr().err
    assert main(["lint", "--megatron-args", str(tmp_path), "--model", "dsv3", "--num-gpus", "8"]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_plan_report_to_a_missing_folder_is_refused(capsys):
    rc = main(["plan", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "8", "--seq-len", "32768",
               "--top-n", "1", "--report", "/nonexistent/dir/x.html"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "--report /nonexistent/dir/x.html: cannot write it (No such file or directory)" in err


# --------------------------------------------------------------------------- Hydra values (Bridge overrides)


@pytest.mark.parametrize(
    ("text", "value"),
    [("null", None), ("NULL", None), ("none", "none"), ("None", "None"), ("true", True), ("False", False),
     ("yes", "yes"), ("1_000", 1000), ("01", "01"), ("1e3", 1000.0), ("[a, b]", ["a", "b"]),
     ("[[embedding,decoder],[decoder,loss]]", [["embedding", "decoder"], ["decoder", "loss"]]),
     ("'Et|(tt|)*30mL'", "Et|(tt|)*30mL"), ("'1'", "1"), ("a2a+p2p", "a2a+p2p")],
)  # fmt: skip
def test_override_values_read_as_hydra_reads_them(text, value):
    assert parse_value(text) == value
    assert parse_value(hydra_value(value)) == value


def test_cuda_graph_impl_none_is_the_string_bridge_means():
    r = lint(bridge_overrides=["model.cuda_graph_impl=none", "model.seq_length=4096"], model="qwen3-30b-a3b",
             num_gpus=8, gpu="h100")  # fmt: skip
    assert r.effective_config["cuda_graph_impl"] == "none" and r.valid


def test_list_form_pipeline_layout_of_the_deepseek_recipes_is_accepted():
    stages = [["embedding", *["decoder"] * 8], *[["decoder"] * 8] * 6, ["decoder"] * 5 + ["mtp", "loss"]]
    assert layout_from_list(stages) == "E" + "t" * 8 + "|" + "|".join(["t" * 8] * 6) + "|tttttmL"
    text = json.dumps(stages).replace(" ", "")
    r = lint(bridge_overrides=[f"model.pipeline_model_parallel_layout={text}", "model.pipeline_model_parallel_size=8",
                               "model.expert_model_parallel_size=32", "model.context_parallel_size=32",
                               "model.seq_length=131072", "train.global_batch_size=256"],
             model="deepseek-v3", gpu="h100", num_gpus=256)  # fmt: skip
    assert r.effective_config["pipeline_layout"] == layout_from_list(stages)
    assert not [f.code for f in r.findings if f.code.startswith("PP_") and f.severity.value == "error"]


# --------------------------------------------------------------------------- Bridge keys


def test_bridge_keys_are_the_containers_fields():
    sections = bridge_sections()
    assert "tensor_model_parallel_size" in sections["model"] and "fp8_recipe" in sections["mixed_precision"]
    assert "delay_wgrad_compute" in sections["comm_overlap"] and "micro_batch_size" in sections["train"]
    assert unknown_bridge_key("model.tensor_model_parallel_size") == (False, None)
    assert unknown_bridge_key("env_vars.NCCL_DEBUG") == (False, None)
    assert unknown_bridge_key("dataset.offline_packing_specs.pad_cu_seqlens") == (False, None)
    assert unknown_bridge_key("model.tensor_model_parallel_sz") == (True, "model.tensor_model_parallel_size")
    assert unknown_bridge_key("trian.micro_batch_size") == (True, "train.micro_batch_size")


def test_bridge_key_typo_is_an_error_with_did_you_mean_and_is_renamed():
    r = lint(bridge_overrides=["model.tensor_model_parallel_sz=2", "model.seq_length=4096",
                               "model.expert_model_parallel_size=8"], model="qwen3-30b-a3b", num_gpus=32, gpu="h100")  # fmt: skip
    bad = [f for f in r.findings if f.code == "BRIDGE_UNKNOWN_KEY"]
    assert not r.valid and len(bad) == 1
    assert bad[0].keys == ["model.tensor_model_parallel_sz"]
    assert bad[0].fix == "Did you mean model.tensor_model_parallel_size?"
    assert "model.tensor_model_parallel_size=2" in r.corrected
    assert r.remaining_errors == []


# --------------------------------------------------------------------------- every modelled field, both ways

FIELD_VALUES = {
    "tp": [1, 2, 8], "pp": [1, 4], "cp": [1, 16], "ep": [1, 32], "etp": [None, 1, 2], "vpp": [None, 2],
    "sequence_parallel": [True, False], "pipeline_layout": [None, "Et|(tt|)*30mL"],
    "account_for_embedding_in_pipeline_split": [True, False], "account_for_loss_in_pipeline_split": [True, False],
    "num_layers_in_first_pipeline_stage": [None, 3], "num_layers_in_last_pipeline_stage": [None, 5],
    "mbs": [1, 2], "gbs": [None, 256], "seq_len": [None, 131072], "cp_comm_type": ["p2p", "a2a", "a2a+p2p"],
    "hierarchical_cp_sizes": [None, [8, 4]], "moe_capacity_factor": [None, 1.5],
    "moe_pad_expert_input_to_capacity": [True, False], "moe_grouped_gemm": [True, False],
    "moe_shared_expert_overlap": [True, False], "moe_router_padding_for_quantization": [True, False],
    "ep_overlap": [True, False], "fp8_param_gather": [True, False],
    "recompute_granularity": [None, "selective", "full"], "recompute_modules": [None, ["moe", "layernorm"]],
    "recompute_method": [None, "uniform", "block"], "recompute_num_layers": [None, 2],
    "cuda_graph_impl": ["none", "local", "transformer_engine", "full_iteration"],
    "cuda_graph_modules": [None, ["attn", "moe_router"]], "check_for_nan_in_loss": [True, False],
    "variable_seq_lengths": [True, False], "use_distributed_optimizer": [True, False],
    "use_precision_aware_optimizer": [True, False], "use_megatron_fsdp": [True, False],
    "dispatcher": ["alltoall", "allgather", "flex-deepep", "flex-hybridep"],
    "precision": ["bf16", "fp8-delayed", "fp8-tensorwise", "fp8-blockwise", "mxfp8", "nvfp4"],
    "optimizer_cpu_offload_fraction": [0.0, 0.5, 1.0], "activation_offload": [None, ["core_attn", "attn_proj"]],
    "cross_entropy_fusion": ["none", "native", "te"], "grad_reduce_in_fp32": [True, False],
    "reuse_grad_buf_for_mxfp8_param_ag": [True, False], "packed_sequences": [True, False],
    "pad_to_max_length": [True, False], "pad_cu_seqlens": [True, False], "calculate_per_token_loss": [True, False],
    "tp_comm_overlap": [True, False], "delay_wgrad_compute": [True, False],
    # w3-b: TransformerConfig / ModelParallelConfig settings
    "overlap_dispatch_backward_with_experts_wgrad": [True, False], "ep_overlap_early_attn_memory_release": [True, False],
    "moe_expert_rank_capacity_factor": [None, 1.5], "use_transformer_engine_op_fuser": [True, False],
    "moe_paged_stash": [True, False], "moe_single_grouped_weight": [True, False], "moe_single_grouped_bias": [True, False],
    "cpu_offloading": [True, False], "cpu_offloading_num_layers": [0, 4], "min_offloaded_tensor_size": [1048576, 0],
    "activation_offload_fraction": [1.0, 0.5], "delta_offload_bytes_across_pp_ranks": [0, 1024],
    "cuda_graph_warmup_steps": [3, 1], "fine_grained_offloading_max_inflight_offloads": [None, 2],
    "first_last_layers_bf16": [True, False], "num_layers_at_start_in_bf16": [1, 2], "num_layers_at_end_in_bf16": [1, 2],
    "distribute_saved_activations": [True, False], "rotary_interleaved": [True, False],
    "defer_embedding_wgrad_compute": [True, False], "wgrad_deferral_limit": [0, 2],
    "tensor_parallel_num_weight_shards": [None, 8], "batch_invariant_mode": [True, False],
    "flash_attention_version": [None, 3], "apply_rope_fusion": [True, False],
    "moe_router_enable_expert_bias": [True, False], "moe_router_score_function": ["softmax", "sigmoid"],
    "fused_residual_rmsnorm": [True, False], "fused_single_qkv_rope": [True, False], "use_mup": [True, False],
    "mup_base_hidden_size": [None, 1024],
    "fp8_output_proj": [True, False], "fp4_param": [True, False], "gradient_accumulation_fusion": [True, False],
    "moe_input_jitter_eps": [None, 0.01], "moe_router_topk_limited_devices": [None, 4],
    "overlap_p2p_comm_warmup_flush": [True, False], "overlap_p2p_comm": [True, False], "batch_p2p_comm": [None, True],
    "moe_router_load_balancing_type": ["aux_loss", "sinkhorn", ["seq_aux_loss", "global_aux_loss"]],
    "moe_aux_loss_coeff": [0.0, 0.001, [0.001, 0.0001]],
    "moe_router_pre_softmax": [True, False],
    "peft": ["none", "lora"], "lora_dim": [32, 64],
    "lora_target_modules": [["linear_qkv", "linear_proj"], ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]],
}  # fmt: skip


def _table():
    from moe_long_context.dialects.tables import dialect_table

    return dialect_table()["fields"]


def test_the_field_table_covers_every_modelled_field():
    from moe_long_context.engine.config import TrainingConfig

    table = {n for n in _table() if n in TrainingConfig.model_fields and n != "mtp_num_layers"}
    assert table == set(FIELD_VALUES)


@pytest.mark.parametrize("name", sorted(FIELD_VALUES))
def test_every_field_reads_back_from_both_dialects(name):
    from moe_long_context.dialects.launch import understand_bridge, understand_megatron
    from moe_long_context.dialects.overrides import megatron_defaults
    from moe_long_context.dialects.tables import (
        bridge_items,
        megatron_tokens,
        parse_bridge_overrides,
        render_bridge,
        render_megatron,
    )
    from moe_long_context.engine.config import TrainingConfig

    m = _table()[name].get("megatron", {})
    lm_has_it = bool(m.get("flag") or m.get("flags"))
    for value in FIELD_VALUES[name]:
        tokens = megatron_tokens(name, value)
        if not lm_has_it:  # Megatron-LM has no flag for it: nothing is written
            assert tokens == []
            seen = {}
        elif tokens:
            parsed = parse_megatron_args(render_megatron(tokens))
            check_megatron_arguments(parsed)
            seen = {**megatron_defaults(), **understand_megatron(parsed).fields}
        else:  # not written: Megatron-LM's default must be the value
            seen = megatron_defaults()
        default = TrainingConfig.model_fields[name].default
        if lm_has_it:  # compared as the engine takes it (a CLI string list becomes ints)
            read = TrainingConfig(model="deepseek-v3", num_gpus=8, **{name: seen.get(name, default)})
            assert getattr(read, name) == value, ("megatron", name, value, tokens)
        items = bridge_items(name, value)
        if name == "peft" and value == "lora":  # LoRA is written as its fields (for a PEFT recipe's object)
            assert items == {}
            items = bridge_items("lora_dim", 32)
        keys = parse_bridge_overrides(render_bridge(items))
        assert understand_bridge(keys).fields.get(name, default) == value, ("bridge", name, value, items)
        assert all(bridge_value_problem(k, v) is None for k, v in keys.items()), keys  # the types Bridge has


def test_arguments_passed_on_with_a_variable_are_not_checked_not_refused():
    script = DSV3_SCRIPT.replace("--lr 1.0e-4", '"$@" --lr 1.0e-4')
    r = lint(megatron_args=script, gpu="h100")
    assert r.valid and any(
        n.keys == ["$@"] and n.requires == "unresolved shell variable" for n in r.not_checked
    )
    assert r.corrected == script


def test_words_after_the_command_are_not_megatron_flags():
    script = DSV3_SCRIPT.replace("   # data and", " 2>&1 | tee train.log   # data and") + "echo done\n"
    r = lint(megatron_args=script, gpu="h100")
    assert r.valid and r.corrected == script
