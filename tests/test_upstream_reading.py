"""Values read as upstream reads them (issue 23): what Bridge and Megatron-LM accept is never refused.

Bridge 0.6.2 applies overrides with no conversion or type check (training/utils/omegaconf_utils.py:
OmegaConf.create from a plain dict, Hydra's OverridesParser, then setattr on the dataclasses), so a key the
engine does not read keeps the value its recipe sets. Megatron-LM's validate_args fills in the FFN sizes a
launch leaves out (arguments.py:1280-1289 and 1595-1596) and argparse its defaults.
"""

from __future__ import annotations

import pytest

from moe_long_context.errors import InputError
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config


def lint(**kw):
    return lint_config(LintConfigRequest(**kw))


@pytest.mark.parametrize(
    ("item", "key", "value"),
    [
        ("train.manual_gc_eval=100", "train.manual_gc_eval", 100),  # a bool field; DSV3's recipe sets 5
        ("model.rotary_base=1000000.0", "model.rotary_base", 1000000.0),  # an int field; recipes set floats
        ("model.q_lora_rank=null", "model.q_lora_rank", None),  # an int field; Qwen-style MLA leaves it None
        ("train.train_iters=1e3", "train.train_iters", 1000.0),
    ],
)
def test_values_bridge_keeps_unconverted_are_accepted(item, key, value):
    from moe_long_context.dialects.tables import parse_bridge_overrides

    assert parse_bridge_overrides(item)[key] == value  # the value Bridge would setattr
    r = lint(model="deepseek-v3", num_gpus=16, bridge_overrides=f"model.expert_model_parallel_size=16 {item}")
    assert r.valid and not [f for f in r.findings if f.severity == "error"]
    assert key in [k for n in r.not_checked for k in n.keys]  # accepted as written, not read by the engine


def test_the_three_recipe_values_together_lint_clean():
    r = lint(model="deepseek-v3", num_gpus=16, bridge_overrides=[
        "train.manual_gc_eval=100", "model.rotary_base=1000000.0", "model.q_lora_rank=null",
        "model.expert_model_parallel_size=16"])  # fmt: skip
    assert r.valid and r.effective_config["ep"] == 16


def test_a_value_the_engine_reads_and_megatron_cannot_use_is_still_refused_by_key():
    with pytest.raises(InputError, match=r"model\.tensor_model_parallel_size='two' is a string"):
        lint(model="deepseek-v3", num_gpus=16, bridge_overrides="model.tensor_model_parallel_size=two")


def test_ffn_sizes_are_derived_as_validate_args_derives_them():
    """No --ffn-hidden-size and no --moe-ffn-hidden-size: 4 x 512 = 2048 for both (arguments.py:1289, 1596);
    --moe-router-topk is argparse's default 2."""
    flags = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --num-experts 4 --micro-batch-size 4 "
             "--global-batch-size 32 --seq-length 1024 --max-position-embeddings 1024 "
             "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 "
             "--sequence-parallel --bf16")  # fmt: skip
    r = lint(num_gpus=8, megatron_args=flags)
    assert r.valid and r.model == "custom"
    derived = r.effective_config["derived"]
    assert derived["--ffn-hidden-size"]["value"] == 2048
    assert derived["--moe-ffn-hidden-size"]["value"] == 2048
    assert derived["--moe-router-topk"]["value"] == 2
    assert "arguments.py:1595-1596" in derived["--moe-ffn-hidden-size"]["from"]


def test_swiglu_ffn_size_rounds_down_to_a_multiple_of_64():
    """--swiglu: int(4 x 1000 x 2/3 / 64) x 64 = int(41.67) x 64 = 2624 (arguments.py:1287)."""
    flags = ("--num-layers 4 --hidden-size 1000 --num-attention-heads 8 --num-experts 8 --moe-router-topk 2 "
             "--swiglu --micro-batch-size 1 --seq-length 1024 --max-position-embeddings 1024 --bf16")  # fmt: skip
    r = lint(num_gpus=8, megatron_args=flags)
    assert r.effective_config["derived"]["--ffn-hidden-size"]["value"] == 2624
    assert r.effective_config["derived"]["--moe-ffn-hidden-size"]["value"] == 2624


def test_given_ffn_sizes_are_not_derived():
    flags = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --num-experts 8 --moe-router-topk 2 "
             "--ffn-hidden-size 4096 --moe-ffn-hidden-size 512 --micro-batch-size 1 --seq-length 1024 "
             "--max-position-embeddings 1024 --bf16")  # fmt: skip
    r = lint(num_gpus=8, megatron_args=flags)
    assert "derived" not in r.effective_config


def test_group_query_attention_without_a_count_uses_argparse_default_one_group():
    flags = (
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --group-query-attention --num-experts 8 "
        "--moe-router-topk 2 --micro-batch-size 1 --seq-length 1024 --max-position-embeddings 1024 --bf16"
    )
    r = lint(num_gpus=8, megatron_args=flags)
    assert r.effective_config["derived"]["--num-query-groups"]["value"] == 1


# ------------------------------------------------------------------ LM_LAYERS_PER_VIRTUAL_STAGE

_UNEVEN = ("--num-layers 60 --hidden-size 5120 --num-attention-heads 128 --num-experts 160 --moe-router-topk 6 "
           "--moe-ffn-hidden-size 1536 --ffn-hidden-size 12288 --pipeline-model-parallel-size 16 "
           "--expert-model-parallel-size 8 --decoder-first-pipeline-num-layers 2 "
           "--decoder-last-pipeline-num-layers 2 --micro-batch-size 1 --global-batch-size 1024 --seq-length 4096 "
           "--max-position-embeddings 4096 --bf16")  # fmt: skip


def test_layers_per_virtual_stage_with_an_uneven_split_is_an_error():
    """Megatron-LM arguments.py:919-922: the ModelZoo DeepSeek-V2 launch (PP16 VPP2, first/last 2) fails."""
    r = lint(num_gpus=256, megatron_args=_UNEVEN + " --num-layers-per-virtual-pipeline-stage 2")
    found = [f for f in r.findings if f.code == "LM_LAYERS_PER_VIRTUAL_STAGE"]
    assert found and found[0].severity == "error"
    assert "--num-layers-per-virtual-pipeline-stage" in found[0].keys


def test_virtual_stages_per_rank_with_an_uneven_split_is_no_error():
    r = lint(num_gpus=256, megatron_args=_UNEVEN + " --num-virtual-stages-per-pipeline-rank 2")
    assert "LM_LAYERS_PER_VIRTUAL_STAGE" not in [f.code for f in r.findings]
    even = lint(num_gpus=256, megatron_args=_UNEVEN.replace(" --decoder-first-pipeline-num-layers 2", "").replace(
        " --decoder-last-pipeline-num-layers 2", "").replace("--num-layers 60", "--num-layers 64")
        + " --num-layers-per-virtual-pipeline-stage 2")  # fmt: skip
    assert "LM_LAYERS_PER_VIRTUAL_STAGE" not in [f.code for f in even.findings]


# ------------------------------------------------------------------ rules the corpus found missing

_DSV3 = {"model": "deepseek-v3", "num_gpus": 256}
_BRIDGE = ["model.expert_model_parallel_size=32", "model.pipeline_model_parallel_size=8"]


def _codes(r) -> list[str]:
    return [f.code for f in r.findings if f.severity == "error"]


def test_fast_cache_load_without_a_cache_path_is_an_error_in_both_dialects():
    """MCore blended_megatron_dataset_config.py:101-113: Bridge's GPT-OSS perf recipes set fast_cache_load and
    defer_npy_index_mmap and leave path_to_cache None, and ConfigContainer.validate raises."""
    r = lint(
        **_DSV3,
        bridge_overrides=[*_BRIDGE, "dataset.fast_cache_load=true", "dataset.defer_npy_index_mmap=true"],
    )
    found = [f for f in r.findings if f.code == "DATASET_CACHE_PATH_MISSING"]
    assert found and found[0].severity == "error" and "dataset.path_to_cache" in found[0].keys
    ok = lint(
        **_DSV3, bridge_overrides=[*_BRIDGE, "dataset.fast_cache_load=true", "dataset.path_to_cache=/cache"]
    )
    assert "DATASET_CACHE_PATH_MISSING" not in _codes(ok)
    flags = "--expert-model-parallel-size 32 --pipeline-model-parallel-size 8 --micro-batch-size 1 --seq-length 4096"
    lm = lint(**_DSV3, megatron_args=flags + " --dataloader-fast-cache-load")
    assert "DATASET_CACHE_PATH_MISSING" in _codes(lm)
    lm_ok = lint(**_DSV3, megatron_args=flags + " --dataloader-fast-cache-load --data-cache-path /cache")
    assert "DATASET_CACHE_PATH_MISSING" not in _codes(lm_ok)


def test_deprecated_sm_counts_that_differ_are_an_error_unless_the_unified_count_is_set():
    """MCore transformer_config.py:1617-1632: moe_deepep_num_sms=20 with moe_hybridep_num_sms=32 raises (Bridge's
    Qwen3-235B deepep_dev perf recipe); equal counts, or moe_flex_dispatcher_num_sms, pass."""
    both = [*_BRIDGE, "model.moe_deepep_num_sms=20", "model.moe_hybridep_num_sms=32"]
    assert "MOE_FLEX_SM_KNOBS_CONFLICT" in _codes(lint(**_DSV3, bridge_overrides=both))
    same = [*_BRIDGE, "model.moe_deepep_num_sms=32", "model.moe_hybridep_num_sms=32"]
    assert "MOE_FLEX_SM_KNOBS_CONFLICT" not in _codes(lint(**_DSV3, bridge_overrides=same))
    unified = [*both, "model.moe_flex_dispatcher_num_sms=24"]
    assert "MOE_FLEX_SM_KNOBS_CONFLICT" not in _codes(lint(**_DSV3, bridge_overrides=unified))
    flags = ("--expert-model-parallel-size 32 --pipeline-model-parallel-size 8 --micro-batch-size 1 "
             "--seq-length 4096 --moe-deepep-num-sms 20 --moe-hybridep-num-sms 32")  # fmt: skip
    assert "MOE_FLEX_SM_KNOBS_CONFLICT" in _codes(lint(**_DSV3, megatron_args=flags))
    assert "MOE_FLEX_SM_KNOBS_CONFLICT" not in _codes(
        lint(**_DSV3, megatron_args=flags + " --moe-flex-dispatcher-num-sms 24")
    )


def test_a_new_free_section_key_is_written_as_a_hydra_addition():
    """Bridge applies overrides in Hydra's struct mode: a key env_vars does not have yet needs ++ (add or
    override), or Hydra stops with "Could not override 'env_vars.X'"."""
    from moe_long_context.dialects.tables import parse_bridge_overrides, render_bridge

    items = {
        "env_vars.NCCL_GRAPH_REGISTER": 0,
        "model.tensor_model_parallel_size": 2,
        "dataset.dataset_kwargs.pad": True,
    }
    written = render_bridge(items)
    assert written == ["++env_vars.NCCL_GRAPH_REGISTER=0", "model.tensor_model_parallel_size=2",
                       "++dataset.dataset_kwargs.pad=true"]  # fmt: skip
    assert parse_bridge_overrides(written) == items


def test_qwen3_vl_moe_reads_its_language_model_from_text_config():
    """Bridge's Qwen3VLMoe bridge builds the language model from text_config as a Qwen3 MoE
    (models/qwen_vl/qwen3_vl_bridge.py:232-262): Qwen3-VL-30B-A3B's is Qwen3-30B-A3B's shape (48 layers,
    128 experts, top-8, expert FFN 768), whose counted total is the same 30.53 B."""
    from moe_long_context.model.catalog import load_model
    from moe_long_context.model.hf import spec_from_hf_config
    from moe_long_context.model.params import model_params

    vl = {"architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
          "tie_word_embeddings": False, "vision_config": {"depth": 27},
          "text_config": {"model_type": "qwen3_vl_moe_text", "num_hidden_layers": 48, "hidden_size": 2048,
                          "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                          "num_experts_per_tok": 8, "num_attention_heads": 32, "num_key_value_heads": 4,
                          "head_dim": 128, "vocab_size": 151936, "decoder_sparse_step": 1,
                          "mlp_only_layers": []}}  # fmt: skip
    spec = spec_from_hf_config(vl)
    assert (spec.num_layers, spec.num_experts, spec.moe_router_topk, spec.moe_ffn_hidden_size) == (
        48,
        128,
        8,
        768,
    )
    assert spec.qk_layernorm and spec.num_query_groups == 4
    assert model_params(spec).total == model_params(load_model("qwen3-30b-a3b")).total


def test_megatron_fsdp_checkpoints_need_the_fsdp_dtensor_format():
    """Bridge training/config.py:1097-1101: Bridge's Qwen3.5-VL FSDP SFT recipe saves in torch_dist and fails
    validate; fsdp_dtensor, or no checkpoint path, passes."""
    base = [*_BRIDGE, "ddp.use_megatron_fsdp=true", "checkpoint.save=/ckpt"]
    assert "BRIDGE_FSDP_CKPT_FORMAT" in _codes(lint(**_DSV3, bridge_overrides=base))
    ok = lint(**_DSV3, bridge_overrides=[*base, "checkpoint.ckpt_format=fsdp_dtensor"])
    assert "BRIDGE_FSDP_CKPT_FORMAT" not in _codes(ok)
    no_path = lint(**_DSV3, bridge_overrides=[*_BRIDGE, "ddp.use_megatron_fsdp=true"])
    assert "BRIDGE_FSDP_CKPT_FORMAT" not in _codes(no_path)


def test_the_correction_drops_layers_per_virtual_stage_beside_an_uneven_split():
    r = lint(num_gpus=256, megatron_args=_UNEVEN + " --num-layers-per-virtual-pipeline-stage 1")
    assert "--num-layers-per-virtual-pipeline-stage" not in r.corrected
    assert [f.code for f in r.fixes] == ["LM_LAYERS_PER_VIRTUAL_STAGE"]
    assert "LM_LAYERS_PER_VIRTUAL_STAGE" not in r.remaining_errors


def test_the_correction_exports_nvte_cpu_offload_v1_for_activation_offload():
    """LM arguments.py:1857-1859: fine-grained offload needs NVTE_CPU_OFFLOAD_V1=1 (ModelZoo's Qwen3-235B GB200
    launch offloads without it); the corrected script exports it and lints clean of it."""
    script = ("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\npython pretrain_gpt.py "
              "--expert-model-parallel-size 32 --pipeline-model-parallel-size 8 --micro-batch-size 1 "
              "--seq-length 4096 --fine-grained-activation-offloading --offload-modules expert_fc1")  # fmt: skip
    r = lint(**_DSV3, megatron_args=script)
    assert "OFFLOAD_ENV_MISSING" in _codes(r)
    assert "export NVTE_CPU_OFFLOAD_V1=1" in r.corrected
    assert "OFFLOAD_ENV_MISSING" not in r.remaining_errors
