"""The grader reads answers as an expert would: one case (and its counter-case) for each failure class the human
calibration found, written for this project rather than copied from the calibration answers."""

from __future__ import annotations

import re

from moe_long_context.evals import reading
from moe_long_context.evals.grader import grade
from moe_long_context.evals.tasks import load_tasks

TASKS = {t["id"]: t for t in load_tasks()}


def expectation(task_id: str, text_start: str, answer: str, tools=()) -> dict:
    record = {"id": task_id, "answer": answer, "tool_calls": [{"name": t, "arguments": {}} for t in tools]}
    graded = grade(TASKS[task_id], record)
    (found,) = [e for e in graded["expectations"] if e["text"].startswith(text_start)]
    return found


# --------------------------------------------------------------------------- 1. a worked formula's final value


def test_the_last_value_of_a_worked_formula_is_the_stated_value():
    answer = (
        "With this layout the data-parallel size is 128 / (4 x 4 x 4) = **2**, and the expert data-parallel "
        "size works out as EDP = 128 / (1 x 32 x 4) = 1.\n"
        "Microbatches per step: 64 / (MBS 1 x DP 2) = 32."
    )
    assert expectation("dp-qwen3-235b-128-gb200", "States DP = 2", answer)["passed"]
    assert expectation("dp-qwen3-235b-128-gb200", "States EDP = 1", answer)["passed"]
    assert expectation("dp-qwen3-235b-128-gb200", "States 32 microbatches", answer)["passed"]


def test_a_formula_that_ends_elsewhere_does_not_state_the_operand():
    wrong = "DP = 2 x 3 = 6 here, since the world is larger than it looks."
    assert not expectation("dp-qwen3-235b-128-gb200", "States DP = 2", wrong)["passed"]
    label = re.compile(r"\bDP\b")
    assert [v for v, _, _ in reading.values_for("DP = 256 / (8 x 16) = 2, EP = 32", label)] == [2.0]


def test_a_number_glued_to_another_unit_is_not_a_value():
    label = re.compile(r"GiB|GB")
    assert reading.values_for("peaks in the high-70s GB on rank 0", label) == []
    assert reading.values_for("its 14.8B expert parameters need 23 GB", label)[0][0] == 23.0


# --------------------------------------------------------------------------- 2. the value given, not a rejected one


def test_a_rejected_neighbour_is_not_the_value_the_answer_gives():
    recommends_8 = (
        "Use CP = 8: every rank then holds 6144 tokens.\n"
        "- A CP of 16 would leave 3072 tokens per rank, too few to keep the GEMMs busy."
    )
    assert not expectation("cp-qwen3-30b-48k-h100", "States CP = 16", recommends_8)["passed"]
    assert not expectation("cp-qwen3-30b-48k-h100", "States 3072 tokens", recommends_8)["passed"]
    recommends_16 = (
        "Use CP = 16: each CP rank holds 3072 tokens (49152 / 16).\n- Alternatives: CP = 8 gives 6144."
    )
    assert expectation("cp-qwen3-30b-48k-h100", "States CP = 16", recommends_16)["passed"]
    assert expectation("cp-qwen3-30b-48k-h100", "States 3072 tokens", recommends_16)["passed"]


def test_a_bullet_lead_marks_every_sentence_of_the_bullet():
    answer = "Pick CP = 50.\n- Other options: CP = 40 gives 5000 tokens per rank. CP = 32 gives 6250 tokens per rank."
    values = [(s.value, s.alternative) for s in reading.stated_values(answer, r"\bCP\b")]
    assert values == [(50.0, False), (40.0, True), (32.0, True)]


def test_a_recommendation_counts_where_the_answer_recommends_it():
    fallback = (
        "Start with cp_comm_type p2p for the 32 CP ranks.\n"
        "- If the ring shows up in profiles, a second option is a2a+p2p with [8, 4]."
    )
    assert not expectation("cp-dsv3-128k-h100", "Recommends cp_comm_type", fallback)["passed"]
    chosen = "Set cp_comm_type a2a+p2p with hierarchical_context_parallel_sizes [8, 4]: a2a inside each node."
    assert expectation("cp-dsv3-128k-h100", "Recommends cp_comm_type", chosen)["passed"]


# --------------------------------------------------------------------------- 3. a split applied to the user's layout


def test_a_split_for_the_users_layout_is_judged_on_that_layout():
    split_only = (
        "Turn on account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split: 94 + 2 = 96 "
        "slots, 24 per PP rank, so the ranks hold 23, 24, 24 and 23 decoder layers."
    )
    ok = expectation("pp-qwen3-235b-94-layers", "Every layout stated", split_only)
    assert ok["passed"] and "the question's layout" in ok["evidence"]
    no_split = "Keep the plain split; Megatron will spread the layers as it sees fit."
    assert not expectation("pp-qwen3-235b-94-layers", "Every layout stated", no_split)["passed"]


# --------------------------------------------------------------------------- 4. quoted wrong rules, flags not checked


def test_a_rule_quoted_to_call_it_wrong_is_not_claimed():
    text = "Does not give the product rule"
    refuted = (
        "DP = 1 and EDP = 1. The rule that TP x CP x EP x PP must not exceed the GPU count is a myth under MoE "
        "parallel folding: EP folds into DP x CP."
    )
    assert expectation("dp-dsv3-256-h100-folding", text, refuted, ["check_dp_budget"])["passed"]
    claimed = "DP = 1 and EDP = 1, and TP x CP x EP x PP must not exceed the GPU count."
    assert not expectation("dp-dsv3-256-h100-folding", text, claimed, ["check_dp_budget"])["passed"]


LINT_ERRORS_NAMED = (
    "EP_DIVIDES_EXPERTS, EXPERT_WORLD_DIVISIBILITY, GRAPH_EXPANDABLE_SEGMENTS and RECOMPUTE_UNKNOWN_MODULE: "
    "use --expert-model-parallel-size 8, set NCCL_GRAPH_REGISTER=0 and write layernorm.\n"
)


def test_flags_listed_as_not_checked_are_not_called_wrong():
    listed = (
        LINT_ERRORS_NAMED + "\n**Not checked (not errors):**\n- `--qk-layernorm`\n- `--lr`, `--data-path`\n"
    )
    assert expectation("lint-qwen3-30b-megatron-lm", "Claims no error", listed, ["lint_config"])["passed"]
    called = LINT_ERRORS_NAMED + "\n- `--lr` is invalid for this model and must be removed.\n"
    assert not expectation("lint-qwen3-30b-megatron-lm", "Claims no error", called, ["lint_config"])["passed"]


# --------------------------------------------------------------------------- 5. paraphrases under a heading


def test_content_under_a_heading_is_read_with_the_heading():
    answer = (
        "Each layer captures [8192, 1, 4096].\n\n"
        "**Hold constant for the whole job:**\n- Sequence length (131072) and micro batch (1).\n- The layout."
    )
    assert expectation("cg-captured-shapes-qwen3-gb200", "Says seq_len and micro batch", answer)["passed"]
    unrelated = "Each layer captures [8192, 1, 4096].\n\n**Tuning ideas:**\n- Sequence length can grow later."
    assert not expectation("cg-captured-shapes-qwen3-gb200", "Says seq_len and micro batch", unrelated)[
        "passed"
    ]


def test_per_rank_counts_written_rank_by_rank_are_the_list():
    answer = "- Rank 0: 7 decoder layers\n- Ranks 1-6: 8 decoder layers each\n- Rank 7: 6 decoder layers"
    assert reading.rank_lists(answer) == ["[7, 8, 8, 8, 8, 8, 8, 6]"]
    assert expectation("pp-dsv3-61-layers", "States the decoder layers per PP rank", answer)["passed"]


# --------------------------------------------------------------------------- 6. lint errors in plain words


def test_a_lint_error_named_in_plain_words_counts_with_the_flag_and_the_fault():
    plain = "The expert model parallel size of 12 must divide the 128 experts; 8 does."
    assert expectation("lint-qwen3-30b-megatron-lm", "Reports EP_DIVIDES_EXPERTS", plain, ["lint_config"])[
        "passed"
    ]
    no_fault = "The expert model parallel size is 12."
    assert not expectation("lint-qwen3-30b-megatron-lm", "Reports EP_DIVIDES_EXPERTS", no_fault)["passed"]
    assert reading.plain_mention("TP comm overlap needs sequence parallel", "--tp-comm-overlap")
    assert not reading.plain_mention("overlap the TP ranks", "--tp-comm-overlap")


def test_an_invented_error_is_caught_across_a_line_break_and_under_a_heading():
    after_line = (
        LINT_ERRORS_NAMED
        + "\n```\n--cuda-graph-modules attn moe_router\n```\nThat flag does not exist in 0.19.\n"
    )
    under_heading = (
        LINT_ERRORS_NAMED + "\n### `--cuda-graph-modules`\nIt is not a valid flag in Megatron Core 0.19.\n"
    )
    for answer in (after_line, under_heading):
        assert not expectation("lint-qwen3-30b-megatron-lm", "Claims no error", answer, ["lint_config"])[
            "passed"
        ]
    assert expectation("lint-qwen3-30b-megatron-lm", "Claims no error", LINT_ERRORS_NAMED, ["lint_config"])[
        "passed"
    ]


# --------------------------------------------------------------------------- outcome and process


def test_grading_reports_outcome_apart_from_process():
    answer = "size_cp: CP = 32; 6250 tokens per CP rank; 200000 % (2 x 64) != 0; a2a+p2p with [4, 8]."
    without_tools = grade(
        TASKS["cp-qwen3-235b-200k-h100"], {"id": "cp-qwen3-235b-200k-h100", "answer": answer}
    )
    s = without_tools["summary"]
    assert s["outcome"]["pass_rate"] == 1.0 and s["process"] == {"passed": 0, "total": 1, "pass_rate": 0.0}
    assert {e["kind"] for e in without_tools["expectations"]} == {"outcome", "process"}
    assert s["passed"] == s["outcome"]["passed"] + s["process"]["passed"]
