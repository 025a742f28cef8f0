"""estimate_memory and pick_recompute as tools: results, findings, refusals, the CLI."""

from __future__ import annotations

import itertools
import json

import pytest
from pydantic import ValidationError

from conftest import codes, the
from moe_long_context.cli import main
from moe_long_context.engine.config import RECOMPUTE_MODULES
from moe_long_context.errors import InputError
from moe_long_context.faces.registry import TOOLS_BY_NAME
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory
from moe_long_context.tools.estimate_throughput import EstimateThroughputRequest, estimate_throughput
from moe_long_context.tools.pick_recompute import PREFERENCE, PickRecomputeRequest, pick_recompute
from seed_layouts import DSV3_128K, DSV3_SPLIT

DSV3 = dict(
    DSV3_128K,
    gbs=256,
    **DSV3_SPLIT,
    dispatcher="flex-deepep",
    precision="fp8-blockwise",
    use_precision_aware_optimizer=True,
    grad_reduce_in_fp32=False,
    cross_entropy_fusion="te",
)
QWEN3_30B = dict(model="qwen3-30b-a3b", gpu="h100", num_gpus=8, seq_len=32768, tp=2, ep=8, gbs=8)
SMALL_FIT = dict(model="qwen3-30b-a3b", gpu="gb300", num_gpus=8, seq_len=4096, tp=2, ep=8, gbs=8)


def estimate(**kw):
    return estimate_memory(EstimateMemoryRequest(**kw))


def throughput(**kw):
    return estimate_throughput(EstimateThroughputRequest(**kw))


def pick(**kw):
    return pick_recompute(PickRecomputeRequest(**kw))


# --------------------------------------------------------------------------- estimate_memory


def test_breakdown_has_first_last_and_most_loaded_stages_with_named_components():
    r = estimate(
        **DSV3, recompute_granularity="selective", recompute_modules=["mla_up_proj", "layernorm", "moe"]
    )
    roles = [s.role for s in r.breakdown]
    assert roles[0] == "first" and roles[-1] == "last"
    assert r.peak_pp_rank in [s.pp_rank for s in r.breakdown]
    assert max(s.total_gib for s in r.breakdown) == r.peak_gib
    first = r.breakdown[0]
    assert first.decoder_layers == "0, 15-16, 31-32, 47-48" and first.extras == "embedding"
    assert first.layer_kinds == "1 dense + 6 MoE MLP; attention 7 MLA"
    names = [c.component for c in first.components]
    for expected in (
        "parameters",
        "gradients",
        "optimizer states",
        "FP8 weight cache",
        "activations: decoder layers",
        "DeepEP buffers",
        "allocator cache (reserved, not allocated)",
        "memory outside PyTorch (CUDA context, NCCL, comm libraries)",
    ):
        assert expected in names
    for stage in r.breakdown:
        assert stage.total_gib == pytest.approx(sum(c.gib for c in stage.components), abs=0.01)
    assert r.breakdown[-1].extras == "loss, 1 MTP layer(s)"
    assert r.headroom_gib == pytest.approx(r.usable_gib - r.peak_gib)


def test_over_budget_is_a_warning_not_an_error():
    r = estimate(**DSV3)
    assert r.valid and r.fits is False
    f = the(r, "MEMORY_OVER_BUDGET")
    assert f.severity.value == "warning" and f.source.startswith("engine estimate")
    assert f"{r.peak_gib:.1f} GiB" in f.message and "pick_recompute" in f.fix


def test_without_gpu_the_fit_is_not_checked():
    r = estimate(**{**QWEN3_30B, "gpu": None})
    assert r.peak_gib > 0 and r.fits is None and r.usable_gib is None and r.headroom_gib is None
    assert "MEMORY_NO_GPU" in codes(r)


def test_invalid_layout_reports_errors_and_no_estimate():
    r = estimate(**{**DSV3, "pipeline_layout": None})  # 61 layers do not split over PP8 x VPP4
    assert not r.valid and "PP_LAYERS_NOT_DIVISIBLE" in codes(r, "error")
    assert r.peak_gib is None and r.fits is None and r.breakdown == []
    assert "MEMORY_NOT_ESTIMATED" in codes(r)


def test_sequence_length_is_required():
    with pytest.raises(InputError, match="seq_len=None is not allowed: a sequence length"):
        estimate(**{k: v for k, v in QWEN3_30B.items() if k != "seq_len"})


def test_bad_values_are_refused_with_the_field_named():
    with pytest.raises(ValidationError, match="overhead_gib"):
        EstimateMemoryRequest(**QWEN3_30B, overhead_gib=-1)
    with pytest.raises(ValidationError, match="cross_entropy_fusion"):
        EstimateMemoryRequest(**QWEN3_30B, cross_entropy_fusion="fast")
    with pytest.raises(InputError, match="gpu='a100'"):
        estimate(**{**QWEN3_30B, "gpu": "a100"})


def test_rule_errors_travel_with_the_estimate():
    r = estimate(**QWEN3_30B, recompute_granularity="selective", recompute_modules=["up_proj"])
    assert not r.valid and "RECOMPUTE_UNKNOWN_MODULE" in codes(r, "error")
    assert r.peak_gib is not None  # an unknown label frees nothing, the estimate is still given


# --------------------------------------------------------------------------- pick_recompute


def test_fitting_config_needs_no_recompute():
    r = pick(**SMALL_FIT)
    assert r.fits and r.recompute_granularity is None and r.recompute_modules == []
    assert r.bridge_overrides == ["model.recompute_granularity=null", "model.recompute_modules=null"]
    assert r.next_steps == []


def test_the_cheapest_label_set_that_fits_the_budget_is_chosen():
    """DeepSeek-V3 at 128K without optimizer offload, no headroom: layernorm, mla_up_proj, mlp and moe leave 76.3 of
    79.1 GiB (the measured allocator cache and memory outside PyTorch included); mla_up_proj, mlp and moe alone
    leave 84.6 GiB."""
    r = pick(**DSV3, headroom=0.0)
    assert r.fits and r.recompute_granularity == "selective" and r.headroom == 0.0
    assert r.budget_gib == pytest.approx(79.11, abs=1e-3)
    assert r.recompute_modules == ["layernorm", "mla_up_proj", "mlp", "moe"]
    assert r.peak_gib_after == pytest.approx(76.332, abs=0.01) and r.peak_gib_after <= r.budget_gib
    assert [g.label for g in r.gains] == r.recompute_modules
    assert sum(g.gib_saved for g in r.gains) == pytest.approx(r.peak_gib_before - r.peak_gib_after, abs=0.01)
    assert r.bridge_overrides == [
        "model.recompute_granularity=selective",
        "model.recompute_modules=[layernorm,mla_up_proj,mlp,moe]",
    ]
    assert r.megatron_lm_flags == [
        "--recompute-granularity selective",
        "--recompute-modules layernorm mla_up_proj mlp moe",
    ]
    # no label set Megatron accepts that fits the budget costs less recompute time (checked by brute force with
    # estimate_memory and estimate_throughput, the same models the tool uses)
    chosen = throughput(**DSV3, recompute_granularity="selective", recompute_modules=r.recompute_modules)
    assert r.recompute_s == pytest.approx(chosen.terms_s["recompute"], abs=1e-3)
    labels = ["layernorm", "moe_act", "mla_up_proj", "mlp", "shared_experts", "moe"]
    for n in range(1, len(labels) + 1):
        for combo in itertools.combinations(labels, n):
            cfg = {**DSV3, "recompute_granularity": "selective", "recompute_modules": list(combo)}
            mem = estimate_memory(EstimateMemoryRequest(**cfg))
            if mem.peak_gib <= r.budget_gib:
                assert throughput(**cfg).terms_s["recompute"] >= r.recompute_s - 1e-3, combo
    cheaper, safer = r.alternatives
    assert cheaper.kind == "cheaper" and not cheaper.fits and cheaper.recompute_s < r.recompute_s
    assert cheaper.recompute_modules == ["mla_up_proj", "mlp", "moe"] and cheaper.peak_gib > r.budget_gib
    assert safer.kind == "safer" and safer.fits and safer.peak_gib < r.peak_gib_after
    assert safer.recompute_granularity == "full" and safer.recompute_s > r.recompute_s


def test_the_default_headroom_needs_full_recompute_without_offload():
    """With the 5 % headroom (75.15 GiB) no selective set fits DeepSeek-V3 at 128K without optimizer offload, so full
    recompute (69.0 GiB) is chosen: as the Bridge long-context skill says, these layouts need optimizer offload."""
    r = pick(**DSV3)
    assert (
        r.fits and r.recompute_granularity == "full" and r.peak_gib_after == pytest.approx(68.953, abs=0.01)
    )
    assert r.peak_gib_after <= r.budget_gib < 76.332


def test_never_core_attn_and_preference_starts_with_output_discarding_labels():
    assert "core_attn" not in PREFERENCE
    assert PREFERENCE[:3] == ("layernorm", "moe_act", "mla_up_proj") and PREFERENCE[-1] == "moe"


def test_rejected_labels_are_skipped_with_the_rule_named():
    # FP8 delayed scaling forbids layernorm and moe_act recompute; a TE moe_router graph forbids moe.
    r = pick(
        **{**DSV3, "precision": "fp8-delayed"},
        cuda_graph_impl="transformer_engine",
        cuda_graph_modules=["attn", "moe_router", "moe_preprocess"],
    )
    assert not {"layernorm", "moe_act", "moe"} & set(r.recompute_modules)
    skipped = [f.message for f in r.findings if f.code == "RECOMPUTE_PICK_SKIPPED"]
    assert any("'layernorm'" in m and "RECOMPUTE_FP8_DELAYED" in m for m in skipped)
    assert any("'moe'" in m and "GRAPH_MOE_RECOMPUTE_ROUTER" in m for m in skipped)
    assert not codes(r, "error")


def test_full_recompute_last_with_full_iteration_graphs():
    # Without the precision-aware optimizer and with FP32 gradients, selective recompute is not enough.
    cfg = {
        **DSV3,
        "use_precision_aware_optimizer": False,
        "grad_reduce_in_fp32": True,
        "num_gpus": 512,
        "cp": 64,
        "seq_len": 262144,
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_modules": ["attn"],
    }
    r = pick(**cfg)
    assert r.recompute_granularity == "full" and r.recompute_method in ("uniform", "block")
    assert r.other_settings == {
        "cuda_graph_impl": "full_iteration",
        "cuda_graph_modules": None,
        "check_for_nan_in_loss": False,
    }
    assert "model.cuda_graph_impl=full_iteration" in r.bridge_overrides
    assert "--no-check-for-nan-in-loss-and-grad" in r.megatron_lm_flags
    assert not codes(r, "error")


def test_ep_overlap_rules_out_moe_and_full_recompute():
    r = pick(**{**DSV3, "use_precision_aware_optimizer": False, "grad_reduce_in_fp32": True}, ep_overlap=True)
    assert "moe" not in r.recompute_modules and r.recompute_granularity != "full"
    assert not r.fits and "RECOMPUTE_PICK_NO_FIT" in codes(r)
    skipped = " ".join(f.message for f in r.findings if f.code == "RECOMPUTE_PICK_SKIPPED")
    assert "RECOMPUTE_EP_OVERLAP" in skipped


def test_next_steps_in_order_with_the_gib_each_buys():
    r = pick(**{**DSV3, "use_precision_aware_optimizer": False, "grad_reduce_in_fp32": True})
    assert not r.fits and r.next_steps
    actions = [s.action for s in r.next_steps]
    assert actions[0] == "optimizer CPU offload"
    assert actions[1:] == [a for a in ("CP 32 -> 64", "TP 1 -> 2", "PP 8 -> 16") if a in actions[1:]]
    offload = r.next_steps[0]
    assert offload.settings["use_precision_aware_optimizer"] is True
    assert 0 < offload.settings["optimizer_cpu_offload_fraction"] <= 1
    for step in r.next_steps:
        assert step.gib_saved == pytest.approx(r.peak_gib_after - step.peak_gib, abs=0.002)
    if offload.fits:  # the smallest 5 % step that fits
        fraction = offload.settings["optimizer_cpu_offload_fraction"]
        assert fraction == round(fraction, 2)
        less = pick(
            **{
                **DSV3,
                "use_precision_aware_optimizer": True,
                "grad_reduce_in_fp32": True,
                "optimizer_cpu_offload_fraction": round(fraction - 0.05, 2),
            }
        )
        assert less.peak_gib_after > offload.peak_gib
    assert "CP 32 -> 64" in r.findings[[f.code for f in r.findings].index("RECOMPUTE_PICK_NO_FIT")].fix


def test_pick_needs_a_gpu():
    with pytest.raises(InputError, match="gpu=None is not allowed: a GPU catalog id"):
        pick(**{**QWEN3_30B, "gpu": None})


def test_labels_returned_are_real_megatron_labels():
    for model in ("qwen3-30b-a3b", "moonlight-16b-a3b", "gpt-oss-20b"):
        r = pick(
            model=model,
            gpu="h100",
            num_gpus=8,
            seq_len=131072,
            tp=2,
            cp=4,
            ep=8 if model != "gpt-oss-20b" else 4,
            gbs=8,
        )
        assert set(r.recompute_modules) <= set(RECOMPUTE_MODULES)


# --------------------------------------------------------------------------- CLI


LAYOUT_FLAGS = [
    "--model",
    "deepseek-v3",
    "--gpu",
    "h100",
    "--seq-len",
    "131072",
    "--num-gpus",
    "256",
    "--cp",
    "32",
    "--ep",
    "32",
    "--pp",
    "8",
    "--vpp",
    "4",
    "--gbs",
    "256",
    "--pipeline-layout",
    "Et|(tt|)*30mL",
    "--dispatcher",
    "flex-deepep",
    "--precision",
    "fp8-blockwise",
    "--use-precision-aware-optimizer",
    "--no-grad-reduce-in-fp32",
    "--cross-entropy-fusion",
    "te",
]


def test_cli_estimate_memory_table_and_json(capsys):
    assert (
        main(
            [
                "estimate-memory",
                *LAYOUT_FLAGS,
                "--recompute-granularity",
                "selective",
                "--recompute-modules",
                "mla_up_proj,layernorm,moe,mlp",
                "--optimizer-cpu-offload-fraction",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "fits          True" in out and "components:" in out and "DeepEP buffers" in out
    assert max(len(line) for line in out.splitlines()) <= 120
    assert main(["estimate-memory", *LAYOUT_FLAGS, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = (
        TOOLS_BY_NAME["estimate_memory"]
        .call({**DSV3, "pipeline_layout": "Et|(tt|)*30mL"})
        .model_dump(mode="json")
    )
    assert data == expected and data["fits"] is False


def test_cli_pick_recompute(capsys):
    assert main(["pick-recompute", *LAYOUT_FLAGS, "--headroom", "0"]) == 0
    out = capsys.readouterr().out
    assert "recompute_modules:\n  - layernorm\n  - mla_up_proj\n  - mlp\n  - moe\n" in out
    assert "model.recompute_modules=[layernorm,mla_up_proj,mlp,moe]" in out
    assert "  - kind: cheaper\n" in out and "  - kind: safer\n" in out


def test_cli_refuses_missing_gpu_for_pick(capsys):
    assert main(["pick-recompute", "--model", "qwen3-30b-a3b", "--num-gpus", "8", "--seq-len", "4096"]) == 2
    assert "gpu=None is not allowed" in capsys.readouterr().err


def test_errors_unrelated_to_recompute_stay_visible_and_make_the_result_invalid(capsys):
    # Capturing the whole MoE block needs drop-and-pad MoE: an error the pick cannot fix, and must not hide.
    # (no headroom, so a selective set fits and the graphs stay per-layer; full recompute would move them to
    # full_iteration, which drops the moe scope and so the error)
    r = pick(**DSV3, cuda_graph_impl="transformer_engine", cuda_graph_modules=["moe"], headroom=0.0)
    assert not r.valid and "GRAPH_MOE_NEEDS_DROP_PAD" in codes(r, "error")
    assert set(codes(r, "error")) == {"GRAPH_MOE_NEEDS_DROP_PAD"}
    flags = [
        *LAYOUT_FLAGS,
        "--cuda-graph-impl",
        "transformer_engine",
        "--cuda-graph-modules",
        "moe",
        "--headroom",
        "0",
    ]
    assert main(["pick-recompute", *flags]) == 1
    assert "GRAPH_MOE_NEEDS_DROP_PAD" in capsys.readouterr().out
