"""The grader: right, wrong and right-but-invented answers, the readers it is built on, determinism."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from moe_long_context.errors import InputError
from moe_long_context.evals import extract
from moe_long_context.evals.grader import grade, grade_records, read_answers, task_passed
from moe_long_context.evals.tasks import is_positive, load_tasks

TASKS = {t["id"]: t for t in load_tasks()}


def graded(task_id: str, answer: str, tools=(), used_skill=None) -> dict:
    record = {"id": task_id, "answer": answer, "tool_calls": [{"name": t, "arguments": {}} for t in tools]}
    if used_skill is not None:
        record["used_skill"] = used_skill
    return grade(TASKS[task_id], record)


def failed(g: dict) -> list[str]:
    return [e["text"] for e in g["expectations"] if not e["passed"]]


# --------------------------------------------------------------------------- CP sizing

CP_RIGHT = """size_cp: CP = 32, not 64: Megatron needs seq_len % (2 x CP) == 0 and 200000 is not divisible by 128.
That leaves 6250 tokens per CP rank. cp_comm_type a2a+p2p with hierarchical_context_parallel_sizes [4, 8]."""


def test_cp_right_wrong_and_invented():
    assert task_passed(graded("cp-qwen3-235b-200k-h100", CP_RIGHT, ["size_cp"]))
    wrong = graded(
        "cp-qwen3-235b-200k-h100",
        "200000 / 4096 is about 49, so use CP = 64 with the p2p ring: 3125 tokens per CP rank.",
        ["size_cp"],
    )
    assert set(failed(wrong)) >= {
        "States CP = 32",
        "States 6250 tokens per CP rank",
        "Does not recommend CP = 64 for 200000 tokens",
    }
    invented = CP_RIGHT.replace("cp_comm_type", "Remember TP x CP x EP x PP <= GPUs. cp_comm_type")
    g = graded(
        "cp-dsv3-128k-h100",
        invented.replace("32", "32").replace("6250", "4096").replace("[4, 8]", "[8, 4]"),
        ["size_cp"],
    )
    assert failed(g) == [
        "Does not give the product rule (TP x CP x EP x PP <= GPUs) as a constraint; under MoE parallel folding EP folds into DP x CP"
    ]


def test_a_number_counts_only_next_to_its_label():
    # 32 appears (EP=32), but CP is 16: the CP check must not take EP's number
    g = graded(
        "cp-dsv3-128k-h100",
        "Use TP=1 CP=16 EP=32 PP=8; 8192 tokens per CP rank; a2a+p2p [8, 4].",
        ["size_cp"],
    )
    assert "States CP = 32" in failed(g)
    found, others = extract.find_number("CP=16 EP=32", 32, 0, 0, r"\bCP(?![A-Za-z_])")
    assert found is None and others
    assert extract.find_number("with CP32 and EP 8", 32, 0, 0, r"\bCP(?![A-Za-z_])")[0]
    # GB200 is not 200 GB: a label cut by the window does not count
    assert extract.find_number("HybridEP on GB200 here", 195, 0, 0.1, r"GiB|GB\b")[0] is None
    assert extract.find_number("peak 55.0 GiB on rank 7", 52.863, 0, 0.1, r"GiB|GB\b|peak")[0]
    assert extract.find_number("peak 60 GiB", 52.863, 0, 0.1, r"GiB|GB\b|peak")[0] is None
    assert extract.find_number("it holds 1,024 tokens per rank", 1024, 0, 0, r"tokens per rank")[0]


# --------------------------------------------------------------------------- memory with a tolerance


@pytest.mark.parametrize(
    "peak, ok", [("60.7", True), ("66", True), ("55", True), ("67", False), ("54", False)]
)
def test_memory_within_ten_percent(peak, ok):
    answer = f"estimate_memory: peak {peak} GiB on PP rank 7, under the 79.11 GiB usable: it fits."
    g = graded("mem-dsv3-128k-seed", answer, ["estimate_memory"])
    assert ("States the peak, 60.194 GiB (within 10%)" not in failed(g)) == ok


# --------------------------------------------------------------------------- layouts


PLAN_RIGHT = """plan_layout #3: TP2 CP16 PP4 VPP8 EP64 ETP1 DP2 EDP1, cp_comm_type a2a+p2p, selective recompute
(layernorm, mla_up_proj, mlp, moe), 100% optimizer CPU offload, peak 74.8 GiB of 79.11 GiB.
```
model.tensor_model_parallel_size=2
model.pipeline_model_parallel_size=4
model.context_parallel_size=16
model.expert_model_parallel_size=64
model.virtual_pipeline_model_parallel_size=8
model.pipeline_model_parallel_layout=Et|(tt|)*30mL
train.global_batch_size=64
```"""


def test_layouts_must_pass_the_engine_and_fit_memory():
    g = graded("plan-deepseek-v3", PLAN_RIGHT, ["plan_layout"])
    assert task_passed(g), failed(g)
    check = "Every layout recommended passes check_dp_budget and fits GPU memory with a recompute/offload setting the engine accepts"
    # the published layout without its pipeline split: 61 layers do not divide over PP 8 x VPP 4
    no_split = "Use TP=1 CP=32 EP=32 PP=8 VPP=4 with selective recompute; peak about 70 GiB; model.context_parallel_size=32"
    g = graded("plan-deepseek-v3", no_split, ["plan_layout"])
    assert check in failed(g) and "PP_LAYERS_NOT_DIVISIBLE" in g["expectations"][0]["evidence"]
    # a world that does not factor
    g = graded("plan-deepseek-v3", PLAN_RIGHT.replace("TP2 CP16 PP4", "TP2 CP12 PP4"), ["plan_layout"])
    assert check in failed(g)
    # legal, but 671B parameters over PP 4 x EP 8 cannot fit 80 GB whatever the recompute and offload
    heavy = "TP1 CP4 PP4 EP8 with num_layers_in_first_pipeline_stage=14 and num_layers_in_last_pipeline_stage=15, 75 GiB, model.context_parallel_size=4"
    g = graded("plan-deepseek-v3", heavy, ["plan_layout"])
    assert check in failed(g) and "does not fit" in g["expectations"][0]["evidence"]
    # a wrong DP next to a right layout
    g = graded("plan-deepseek-v3", PLAN_RIGHT.replace("DP2 EDP1", "DP4 EDP1"), ["plan_layout"])
    assert "engine derives DP=2" in g["expectations"][0]["evidence"]


def test_layout_mentions():
    text = (
        "Try TP1 CP32 PP8 VPP4 EP32 ETP1 DP1 EDP1 or TP=2 CP=16 PP=8 EP=32; TP x CP x EP x PP = 8192 is fine."
    )
    mentions = extract.layout_mentions(text)
    assert [m.dims for m in mentions] == [
        {"tp": 1, "cp": 32, "pp": 8, "vpp": 4, "ep": 32, "etp": 1, "dp": 1, "edp": 1},
        {"tp": 2, "cp": 16, "pp": 8, "ep": 32},
    ]
    block = "```\n--tensor-model-parallel-size 2\n--context-parallel-size 4\n--pipeline-model-parallel-size 16\n--expert-model-parallel-size 8\n```"
    assert extract.layout_mentions(block)[0].dims == {"tp": 2, "cp": 4, "pp": 16, "ep": 8}
    assert extract.layout_mentions("model.expert_tensor_parallel_size=1 and CP=4") == []
    splits = extract.pipeline_splits("use 'Et|(tt|)*30mL' or account_for_loss_in_pipeline_split")
    assert {"pipeline_layout": "Et|(tt|)*30mL"} in splits and splits[0] == {}


# --------------------------------------------------------------------------- lint: recall and precision

LINT_RIGHT = """lint_config finds five errors:
- LM_UNKNOWN_FLAG: --tensor-parallel-size is not a Megatron-LM argument; use --tensor-model-parallel-size.
- PRECISION_GPU: --fp8-recipe mxfp8 needs Blackwell; use blockwise on H100.
- CP_MLA_COMM_TYPE: MLA supports CP only over p2p or a2a+p2p, so change --cp-comm-type a2a.
- GRAPH_MOE_RECOMPUTE_ROUTER: moe in --recompute-modules conflicts with the moe_router graph.
- OFFLOAD_NEEDS_PRECISION_AWARE: --optimizer-cpu-offload needs --use-precision-aware-optimizer.
--cuda-graph-modules is the correct Megatron Core 0.19 flag, and DP_ONE is only a warning."""

LINT_BY_FLAGS = """Five problems. --tensor-parallel-size is not a valid Megatron-LM flag. The --fp8-recipe mxfp8 setting is
refused on H100. The --cp-comm-type a2a value is wrong for MLA. Recomputing moe in --recompute-modules fails
with the moe_router graph. --optimizer-cpu-offload requires the precision-aware optimizer and raises otherwise."""


def test_lint_recall_and_precision():
    g = graded("lint-dsv3-megatron-lm", LINT_RIGHT, ["lint_config"])
    assert task_passed(g), failed(g)
    assert g["lint"] == {"errors": 5, "found": 5, "false_claims": 0}
    g = graded("lint-dsv3-megatron-lm", LINT_BY_FLAGS, ["lint_config"])
    assert g["lint"]["found"] == 5 and g["lint"]["false_claims"] == 0, failed(g)
    partial = "\n".join(LINT_RIGHT.splitlines()[:3])
    g = graded("lint-dsv3-megatron-lm", partial, ["lint_config"])
    assert g["lint"] == {"errors": 5, "found": 2, "false_claims": 0}
    assert not task_passed(g)


def test_lint_invented_errors_fail_precision_but_keep_recall():
    invented = LINT_RIGHT.replace(
        "--cuda-graph-modules is the correct Megatron Core 0.19 flag, and DP_ONE is only a warning.",
        "Also, --cuda-graph-modules is not a valid flag (use --cuda-graph-scope). SEQ_CP_DIVISIBILITY: 131072 "
        "does not split over CP. The --moe-grouped-gemm flag is unknown in this version.",
    )
    g = graded("lint-dsv3-megatron-lm", invented, ["lint_config"])
    assert g["lint"]["found"] == 5 and g["lint"]["false_claims"] >= 3
    assert failed(g) == [
        "Claims no error the engine does not report (no other rule code, no clean flag called wrong, none of the known inventions)"
    ]
    evidence = next(e["evidence"] for e in g["expectations"] if not e["passed"])
    assert (
        "SEQ_CP_DIVISIBILITY" in evidence
        and "--moe-grouped-gemm" in evidence
        and "cuda-graph-modules" in evidence
    )


def test_a_sentence_about_a_real_error_may_name_clean_flags():
    answer = (
        LINT_RIGHT
        + "\nThe --recompute-modules moe with --cuda-graph-modules moe_router combination is refused."
    )
    g = graded("lint-dsv3-megatron-lm", answer, ["lint_config"])
    assert g["lint"]["false_claims"] == 0


# --------------------------------------------------------------------------- tools, skill use, negatives


def test_tool_checks_read_the_calls_with_client_prefixes():
    g = graded("cp-dsv3-128k-h100", "CP = 32", ["mcp__nemo-mbridge-perf-moe-long-context__size_cp"])
    assert "Called size_cp" not in failed(g)


def test_negative_tasks():
    decline = (
        "The nemo-mbridge-perf-moe-long-context skill does not apply: this is vLLM serving, not MoE training."
    )
    assert task_passed(graded("neg-vllm-llama-70b-serving", decline))
    direct = "Use vLLM with --tensor-parallel-size 8 and --max-model-len 32768; the KV cache fits easily."
    assert task_passed(graded("neg-vllm-llama-70b-serving", direct))
    g = graded("neg-vllm-llama-70b-serving", direct, ["plan_layout"])
    assert "Does not use the nemo-mbridge-perf-moe-long-context skill" in failed(g)
    g = graded("neg-vllm-llama-70b-serving", direct, used_skill=True)
    assert "Does not use the nemo-mbridge-perf-moe-long-context skill" in failed(g)
    assert graded("neg-vllm-llama-70b-serving", "")["summary"]["pass_rate"] == 0.0


# --------------------------------------------------------------------------- discrimination and determinism

GENERIC = """For long-context MoE training on Megatron Bridge, start from a proven recipe and adjust it.
- Size context parallelism from the sequence length so that each rank holds a few thousand tokens, and prefer
  hierarchical a2a+p2p context parallelism across nodes with the p2p ring for large groups.
- Keep tensor parallelism inside the NVLink domain and use expert parallelism for the experts; parallel folding
  lets EP live inside DP x CP. Make sure the sizes divide the GPU count and the number of experts.
- Split uneven layer counts with a pipeline layout string or the account-for-embedding and loss flags.
- Prefer selective recompute (layernorm, moe_act, mla_up_proj, moe) to full recompute and avoid core_attn.
- With dropless MoE capture only moe_router and moe_preprocess in CUDA graphs; full recompute needs full_iteration
  graphs; cuda_graph_modules replaces cuda_graph_scope in Megatron Core.
- Use DeepEP on Hopper and HybridEP on NVL72 systems; FP8 blockwise on Hopper and MXFP8 on Blackwell.
- Optimizer CPU offload needs the precision-aware optimizer and works with CUDA graphs.
Check memory before launching and fix whatever Megatron reports."""


def mean_score(answer_for, tasks) -> float:
    rates = [grade(t, {"id": t["id"], "answer": answer_for(t)})["summary"]["pass_rate"] for t in tasks]
    return sum(rates) / len(rates)


@pytest.mark.parametrize("name, answer", [("empty", ""), ("generic", GENERIC)])
def test_empty_and_generic_answers_score_at_most_20_percent(name, answer):
    assert not re.search(r"(?<![\w+.])\d+(?![\w+])", answer)  # names like FP8 or a2a+p2p, but no numbers
    tasks = list(TASKS.values())
    positive = [t for t in tasks if is_positive(t)]
    assert mean_score(lambda t: answer, positive) <= 0.20
    assert mean_score(lambda t: answer, tasks) <= 0.20
    assert not any(task_passed(grade(t, {"id": t["id"], "answer": answer})) for t in positive)


def test_grading_is_deterministic_and_json():
    records = [
        {
            "id": "lint-dsv3-megatron-lm",
            "answer": LINT_RIGHT,
            "tool_calls": [{"name": "lint_config", "arguments": {"x": 1}}],
        },
        {"id": "plan-deepseek-v3", "answer": PLAN_RIGHT, "tool_calls": [{"name": "plan_layout"}]},
    ]
    first = [json.dumps(g, sort_keys=True) for _, g in grade_records(TASKS.values(), records)]
    again = [
        json.dumps(g, sort_keys=True)
        for _, g in grade_records(reversed(list(TASKS.values())), json.loads(json.dumps(records)))
    ]
    assert first == again
    g = json.loads(first[0])
    assert set(g["expectations"][0]) == {"text", "passed", "evidence", "kind"}
    assert set(g["summary"]) == {"passed", "failed", "total", "pass_rate", "outcome", "process"}


def test_answer_files_are_checked(tmp_path):
    good = tmp_path / "a.jsonl"
    good.write_text(json.dumps({"id": "cp-dsv3-128k-h100", "answer": "CP = 32"}) + "\n\n")
    assert read_answers(good)[0]["id"] == "cp-dsv3-128k-h100"
    for text, words in [
        ("{not json\n", "a.jsonl:1: not JSON"),
        ('["a"]\n', "expected an object"),
        ('{"id": "x", "answer": 3}\n', "'answer' must be a string"),
        ('{"id": "x", "tool_calls": [1]}\n', "'tool_calls' must be a list"),
    ]:
        good.write_text(text)
        with pytest.raises(InputError, match=words):
            read_answers(good)
    with pytest.raises(InputError, match="unknown task id 'nope'"):
        grade_records(TASKS.values(), [{"id": "nope", "answer": ""}])
    with pytest.raises(InputError, match="readable JSONL"):
        read_answers(tmp_path / "missing.jsonl")


def test_the_grader_does_not_import_the_mcp_sdk():
    code = (
        "import sys, moe_long_context.evals.grader, moe_long_context.evals.build; print('mcp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_claim_is_attributed_to_the_error_named_just_before_it():
    answer = LINT_RIGHT + (
        "\n- GRAPH_EXPANDABLE_SEGMENTS does not apply here. PRECISION_GPU again. "
        "The --cuda-graph-impl transformer_engine setting fails with it."
    )
    assert graded("lint-dsv3-megatron-lm", answer, ["lint_config"])["lint"]["false_claims"] == 0
    violated = LINT_RIGHT + "\n- SEQ_CP_DIVISIBILITY is violated by --seq-length 131072."
    assert (
        graded("lint-dsv3-megatron-lm", violated, ["lint_config"])["lint"]["false_claims"] == 2
    )  # code and flag
    alone = LINT_RIGHT + "\n- Separately, the --cuda-graph-impl transformer_engine setting fails."
    assert graded("lint-dsv3-megatron-lm", alone, ["lint_config"])["lint"]["false_claims"] == 1


@pytest.mark.parametrize(
    "text, claims",
    [
        ("Keep CP x EP x TP x PP <= GPUs.", True),
        ("Rule: CP × EP × TP × PP ≤ total GPUs", True),
        ("TP*CP*EP*PP must not exceed the number of GPUs", True),
        ("the product of all parallel sizes must not exceed the GPU count", True),
        ("TP x CP x EP x PP = 8192 exceeds num_gpus=256, which is fine: experts fold into DP x CP", False),
        ("TP x CP x PP must divide the GPU count", False),
        ("the product of all parallel sizes may exceed the GPU count", False),
    ],
)
def test_the_product_rule_is_recognised_in_its_usual_forms(text, claims):
    check = next(c for c in TASKS["cp-dsv3-128k-h100"]["checks"] if c["type"] == "forbidden")
    assert bool(re.search(check["pattern"], text, re.I | re.M)) == claims
