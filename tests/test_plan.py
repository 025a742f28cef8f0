"""plan_layout: every plan passes the engine's rules and fits memory; the search is fast and explains itself."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.errors import InputError
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout


def plan(**kw):
    return plan_layout(PlanLayoutRequest(**kw))


def _settings(p) -> dict:
    return {k: v for k, v in p.settings.items() if k in TrainingConfig.model_fields}


def assert_plan_is_sound(p, gpu: str, num_gpus: int):
    """A plan lints clean in both dialects, and estimate_memory agrees that it fits."""
    cfg = _settings(p)
    mem = estimate_memory(EstimateMemoryRequest(**cfg))
    assert mem.valid and mem.fits, (p.layout, [f.code for f in mem.findings])
    assert abs(mem.peak_gib - p.memory.peak_gib) < 0.01
    bridge = lint_config(LintConfigRequest(bridge_overrides=p.bridge_overrides, model=cfg["model"], gpu=gpu,
                                           num_gpus=num_gpus))  # fmt: skip
    assert bridge.valid, (
        p.layout,
        [(f.code, f.message) for f in bridge.findings if f.severity.value == "error"],
    )
    script = "torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py " + shlex.join(p.megatron_args)
    lm = lint_config(LintConfigRequest(megatron_args=script, model=cfg["model"], gpu=gpu, num_gpus=num_gpus))
    assert lm.valid, (p.layout, [(f.code, f.message) for f in lm.findings if f.severity.value == "error"])


@pytest.mark.parametrize(
    ("model", "gpu", "num_gpus", "seq_len"),
    [
        ("deepseek-v3", "h100", 256, 131072),
        ("qwen3-235b-a22b", "gb200", 128, 131072),
        ("qwen3-30b-a3b", "h100", 16, 32768),
    ],
)
def test_plans_are_sound_and_ranked(model, gpu, num_gpus, seq_len):
    r = plan(model=model, gpu=gpu, num_gpus=num_gpus, seq_len=seq_len, top_n=3)
    assert r.plans and r.feasible >= len(r.plans)
    speeds = [p.throughput.tokens_per_s / p.settings["gbs"] for p in r.plans]
    per_token = [p.throughput.step_s / (p.settings["gbs"] * seq_len) for p in r.plans]
    assert per_token == sorted(per_token), speeds
    for p in r.plans:
        assert_plan_is_sound(p, gpu, num_gpus)
        assert p.why and "TFLOP/s" in p.why[0]
        assert 0 < p.throughput.mfu < 1


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(
        ["qwen3-30b-a3b", "gpt-oss-20b", "moonlight-16b-a3b", "mixtral-8x22b", "qwen3-235b-a22b"]
    ),
    gpu=st.sampled_from(["h100", "h200", "b200", "gb200"]),
    num_gpus=st.sampled_from([16, 32, 64, 128]),
    seq_len=st.sampled_from([8192, 32768, 65536]),
)
def test_every_plan_lints_clean_and_fits(model, gpu, num_gpus, seq_len):
    try:
        r = plan(model=model, gpu=gpu, num_gpus=num_gpus, seq_len=seq_len, top_n=2)
    except InputError:
        return  # no layout fits this job: refused with a reason, never a wrong plan
    for p in r.plans:
        assert_plan_is_sound(p, gpu, num_gpus)


def test_megatron_lm_plans_leave_vpp_to_the_layout_string():
    """Megatron-LM refuses --num-virtual-stages-per-pipeline-rank next to a layout: plans must not write both."""
    r = plan(model="deepseek-v3", gpu="h100", num_gpus=256, seq_len=131072, top_n=2, launcher="megatron-lm")
    assert r.plans
    for p in r.plans:
        assert_plan_is_sound(p, "h100", 256)
        if p.settings.get("pipeline_layout"):
            assert (
                p.settings.get("vpp") is None
                and "--num-virtual-stages-per-pipeline-rank" not in p.megatron_args
            )
    (ref,) = [x for x in r.references if x.id == "deepseek-v3-128k-h100"]
    assert ref.valid and ref.layout.startswith("TP1 CP32 PP8 VPP4")  # VPP still read from the layout


def test_more_overhead_gives_plans_with_that_much_more_headroom():
    job = dict(model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072, top_n=2)
    default, roomy = plan(**job), plan(**job, overhead_gib=10.0)
    before = {p.layout: p for p in default.plans}
    same = [p for p in roomy.plans if p.layout in before]
    # these jobs have room to spare: the layouts stay, with 10 GiB in place of the measured overhead
    assert same
    for p in roomy.plans:
        assert p.settings["overhead_gib"] == 10.0
        assert_plan_is_sound(p, "gb200", 128)  # estimate_memory with the same 10 GiB says it fits
    unchanged = [p for p in same if _knobs(p) == _knobs(before[p.layout])]
    # same recompute and graphs: the measured overhead (cache + outside PyTorch) becomes 10 GiB
    assert unchanged
    for p in unchanged:
        measured = estimate_memory(EstimateMemoryRequest(**_settings(before[p.layout]))).overhead_gib
        assert (
            8.94 + 0.02 * 150 < measured < 8.94 + 0.03 * 180
        )  # 8.94 GiB outside PyTorch, 2.57 % of the tensors
        expected = before[p.layout].memory.peak_gib - measured + 10.0
        assert p.memory.peak_gib == pytest.approx(expected, abs=0.01)


def _knobs(p) -> dict:
    return {k: v for k, v in p.settings.items() if k != "overhead_gib"}


def test_bad_requests_are_refused():
    with pytest.raises(InputError, match="precision"):
        plan(model="deepseek-v3", gpu="h100", num_gpus=256, seq_len=131072, precision="mxfp8")
    with pytest.raises(ValidationError, match="headroom"):
        plan(model="deepseek-v3", gpu="h100", num_gpus=256, seq_len=131072, headroom=0.9)


def test_a_job_without_plans_says_why():
    """Three H100 cannot hold DeepSeek-V3's weights at any layout: no plan, not valid, and the counts say why."""
    r = plan(model="deepseek-v3", gpu="h100", num_gpus=3, seq_len=131072)
    assert not r.valid and r.plans == []
    assert r.no_plan_reason.startswith("no candidate passes every rule and fits the budget")
    assert r.excluded["memory: BF16 weights alone fill the GPU"] > 0
    assert r.candidates == sum(r.excluded.values())
    # the lever that helps, not BF16 (which keeps those weights): 2 B x 671.0B over 80 % of 79.11 GiB is 19.8
    assert "the weights alone need at least 20 GPUs" in r.no_plan_reason
    assert "set precision bf16" not in r.no_plan_reason


SEEDS = [
    ("deepseek-v3-128k-h100", dict(model="deepseek-v3", gpu="h100", num_gpus=256, seq_len=131072)),
    ("deepseek-v3-256k-h100", dict(model="deepseek-v3", gpu="h100", num_gpus=512, seq_len=262144)),
    # 179.2 GiB of the 184 a GB200 can allocate with the measured overhead: inside the GPU, not inside 5 % headroom
    (
        "qwen3-235b-a22b-128k-gb200",
        dict(model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072, headroom=0.0),
    ),
]


@pytest.mark.parametrize(("seed", "job"), SEEDS, ids=[s[0] for s in SEEDS])
def test_published_layout_is_feasible_and_the_top_plan_at_least_as_fast(seed, job):
    r = plan(**job, top_n=3)
    (ref,) = [x for x in r.references if x.id == seed]
    assert ref.valid and ref.fits and ref.rank is not None  # among the feasible plans
    assert r.plans[0].throughput.tflops_per_gpu >= ref.tflops_per_gpu
    if ref.rank > 1:  # the tool prefers another layout and says why, term by term
        assert "faster per token" in ref.verdict and " s vs " in ref.verdict
    assert ref.rank <= r.feasible


def test_a_published_layout_over_the_headroom_is_compared_not_ranked():
    # the published run fits with the measured overheads; with 10 GiB outside the tensors it is over the budget
    # (the 5 % headroom) though under the device's 184 GiB: compared, with the verdict, not offered as a plan
    r = plan(model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072, top_n=1, overhead_gib=10.0)
    (ref,) = r.references
    assert ref.valid and not ref.fits and ref.rank is None and ref.peak_gib < 184.0
    assert "above the 174.8 GiB budget (184 GiB usable less the headroom)" in ref.verdict


def test_cli_reads_launches_from_files_and_stdin(tmp_path, monkeypatch, capsys):
    import io

    from moe_long_context.cli import main

    script = tmp_path / "launch.sh"
    script.write_text("--tensor-model-parallel-size 2 --context-parallel-size 4 --sequence-parallel --bf16")
    args = ["lint", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "16", "--json"]
    assert main([*args[:1], "--megatron-args", str(script), *args[1:]]) in (0, 1)
    assert '"tp": 2' in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO(script.read_text()))
    assert main([*args[:1], "--megatron-args", "-", *args[1:]]) in (0, 1)
    assert '"cp": 4' in capsys.readouterr().out


def test_pp_over_every_divisor_gives_gpt_oss_120b_plans_on_48_h100():
    """TP2 CP4 PP6 EP4 ran there; PP 3 and 6 are divisors of 48 that are not powers of two."""
    r = plan(model="gpt-oss-120b", gpu="h100", num_gpus=48, seq_len=32768, top_n=5)
    assert r.valid and r.plans
    assert {p.settings["pp"] for p in r.plans} & {3, 6}
    for p in r.plans:
        assert_plan_is_sound(p, "h100", 48)


def test_tp_goes_up_to_the_nvlink_domain():
    from moe_long_context.model.catalog import load_gpu, load_model
    from moe_long_context.tools.plan_search import enumerate_candidates

    def tps(model, gpu, num_gpus):
        req = PlanLayoutRequest(model=model, gpu=gpu, num_gpus=num_gpus, seq_len=131072)
        m = load_model(model)
        return {c.tp for c in enumerate_candidates(m, load_gpu(gpu), req, m.mtp_num_layers, 64, {})}

    assert 16 in tps("kimi-k2", "gb200", 128)  # NVL72: Kimi-K2 ran TP16 on GB200
    assert max(tps("deepseek-v3", "h100", 256)) == 8  # an 8-GPU NVLink domain


def test_ties_are_within_the_stated_error_and_vpp_variants_are_one_plan():
    from moe_long_context.engine.stated_error import stated_error

    tie = stated_error("throughput", "deepseek_v3")  # the calibration's spread for the model's family
    assert tie != 0.25  # measured, not the old fixed band
    r = plan(model="deepseek-v3", gpu="h100", num_gpus=1024, seq_len=131072, top_n=5)
    top = r.plans[0].throughput.tokens_per_s
    layouts = [(p.settings.get("tp", 1), p.settings.get("cp", 1), p.settings.get("pp", 1), p.settings.get("ep", 1))
               for p in r.plans]  # fmt: skip
    assert len(set(layouts)) == len(layouts)  # one plan per layout: other VPPs are its variants
    for p in r.plans:
        assert p.settings["gbs"] == r.gbs == 64
        assert p.tied_with_top == (p.throughput.tokens_per_s * (1 + tie) >= top - 0.1)
        for v in p.vpp_variants:
            assert v["tokens_per_s"] <= p.throughput.tokens_per_s and v["vpp"] != (p.settings.get("vpp") or 1)
    rates = [p.throughput.tokens_per_s for p in r.plans]
    assert rates == sorted(rates, reverse=True)  # ranked by tokens per second at the one batch


def test_the_published_layouts_rank_does_not_move_with_top_n():
    job = dict(model="deepseek-v3", gpu="h100", num_gpus=512, seq_len=262144)
    ranks = {n: next(x for x in plan(**job, top_n=n).references if x.id == "deepseek-v3-256k-h100").rank
             for n in (1, 5)}  # fmt: skip
    assert ranks[1] == ranks[5] and ranks[1] > 1


def test_deepep_on_gb200_is_refused_with_the_backends_it_allows():
    """DeepEP does not run on GB200 (Bridge's flex backend check, DISPATCHER_GPU): a DeepEP plan could only be a
    layout without expert parallelism that sidesteps the request, so the request is refused, naming the
    dispatchers the GPU runs, as an unsupported precision is."""
    with pytest.raises(InputError, match=r"dispatcher='flex-deepep' is not allowed: one of \['alltoall', "
                       r"'allgather', 'flex-hybridep', 'flex-ncclep'\] on gb200"):  # fmt: skip
        plan(model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072, dispatcher="flex-deepep")
    assert plan(model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072, dispatcher="flex-hybridep",
                top_n=1).valid  # fmt: skip
