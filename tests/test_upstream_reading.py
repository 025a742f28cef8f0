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
    assert key in r.not_checked  # accepted as written, not read by the engine


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
