"""Seeded generator of training configurations: about half valid, half breaking exactly one rule.

The generator builds valid configurations constructively from its own arithmetic (it never asks the engine
whether a configuration is valid), then applies one mutation that is meant to break one rule and labels
the case with that rule's family. The label is an intention, not a verdict: the oracle (Megatron) and the
engine each decide for themselves, and the report compares the two.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from moe_long_context.model.catalog import load_gpu, load_model
from moe_long_context.model.specs import GpuSpec, ModelSpec

MODELS = (
    "deepseek-v3",
    "kimi-k2",
    "qwen3-235b-a22b",
    "qwen3-30b-a3b",
    "qwen3-next-80b-a3b",
    "gpt-oss-120b",
    "gpt-oss-20b",
    "mixtral-8x22b",
    "moonlight-16b-a3b",
)
GPUS = (None, "h100", "h200", "b200", "gb200", "gb300")
SEQ_LENS = (4096, 8192, 16384, 32768, 65536, 131072)
DEFAULT_SEED = 20260
DEFAULT_COUNT = 2400


@dataclass
class Case:
    id: str
    family: str  # the engine rule family the mutation targets, or "valid"
    target: str  # which rule the mutation targets ("valid:<variation>" for valid cases)
    config: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "family": self.family, "target": self.target, "config": self.config}


@cache
def model(name: str) -> ModelSpec:
    return load_model(name)


@cache
def gpu(name: str) -> GpuSpec:
    return load_gpu(name)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# ---------------------------------------------------------------------- valid base configurations


def effective_etp(cfg: dict[str, Any]) -> int:
    """ETP as the launcher resolves an unset value: Bridge 1 when EP > 1, Megatron-LM always TP."""
    if cfg.get("etp") is not None:
        return cfg["etp"]
    if cfg["launcher"] == "bridge" and cfg["ep"] > 1:
        return 1
    return cfg["tp"]


def layout_string(num_layers: int, pp: int, vpp: int, mtp: int) -> str:
    """An explicit layout: E on the first stage, L (and the MTP layers) on the last, decoders spread evenly."""
    stages = pp * vpp
    base, extra = divmod(num_layers, stages)
    counts = [base + (1 if i >= stages - extra else 0) for i in range(stages)]
    parts = []
    for i, count in enumerate(counts):
        text = ("E" if i == 0 else "") + ("t" * count) + (("m" * mtp + "L") if i == stages - 1 else "")
        parts.append(text)
    return "|".join(parts)


@dataclass
class Split:
    pp: int
    vpp: int | None
    settings: dict[str, Any] = field(default_factory=dict)
    method: str = "plain"


def valid_splits(num_layers: int, mtp: int) -> list[Split]:
    out = [Split(1, None)]
    for pp in (2, 4, 8):
        for vpp in (None, 2, 3, 4):
            v = vpp or 1
            if num_layers % (pp * v) == 0:
                out.append(Split(pp, vpp))
            for emb, loss in ((True, True), (True, False), (False, True)):
                total = num_layers + emb + loss
                if total % pp == 0 and (total // pp) % v == 0 and total // pp // v >= 2:
                    settings = {}
                    if emb:
                        settings["account_for_embedding_in_pipeline_split"] = True
                    if loss:
                        settings["account_for_loss_in_pipeline_split"] = True
                    out.append(Split(pp, vpp, settings, "account_for"))
            for first in range(v, num_layers, v):
                rest = num_layers - first
                # first given, last given: the middle (pp - 2 ranks) takes an even share
                for last in range(v, rest + 1, v):
                    middle = rest - last
                    if (pp == 2 and middle == 0) or (pp > 2 and middle > 0 and middle % (pp - 2) == 0):
                        if pp > 2 and (middle // (pp - 2)) % v:
                            continue
                        if pp > 2 and not (first < middle // (pp - 2) and last < middle // (pp - 2)):
                            continue
                        out.append(
                            Split(
                                pp,
                                vpp,
                                {
                                    "num_layers_in_first_pipeline_stage": first,
                                    "num_layers_in_last_pipeline_stage": last,
                                },
                                "uneven",
                            )
                        )
            if num_layers + 2 >= pp * v * 2:
                out.append(
                    Split(pp, vpp, {"pipeline_layout": layout_string(num_layers, pp, v, mtp)}, "layout")
                )
    return out


@cache
def splits_for(name: str, mtp: int) -> tuple[Split, ...]:
    return tuple(valid_splits(model(name).num_layers, mtp))


def tp_options(m: ModelSpec) -> list[int]:
    g = m.num_query_groups
    return [t for t in (1, 2, 4, 8) if m.num_attention_heads % t == 0 and (g % t == 0 or t % g == 0)]


def kv_heads_per_rank(m: ModelSpec, tp: int) -> int:
    if m.is_mla:
        return m.num_attention_heads // tp
    return max(m.num_query_groups // tp, 1)


def cp_options(m: ModelSpec, seq: int, tp: int) -> list[int]:
    out = []
    for cp in (1, 2, 4, 8, 16):
        if seq % (2 * cp) or seq % (cp * tp):
            continue
        if m.has_linear_attention and (
            m.linear_num_key_heads % (tp * cp) or m.linear_num_value_heads % (tp * cp)
        ):
            continue
        if m.softmax_sinks and cp > 1 and kv_heads_per_rank(m, tp) % cp:
            continue  # learned sinks need a2a CP, which needs the heads per TP rank divisible by CP
        out.append(cp)
    return out


def base_config(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(MODELS)
    m = model(name)
    launcher = rng.choice(("bridge", "megatron-lm"))
    seq = rng.choice(SEQ_LENS)
    tp = rng.choice(tp_options(m))
    split = rng.choice(splits_for(name, m.mtp_num_layers))
    # keep the world at most 1024 GPUs: initialize_model_parallel's cost grows with it
    cp = rng.choice([c for c in cp_options(m, seq, tp) if tp * c * split.pp <= 256] or [1])
    dp = rng.choice([d for d in (1, 2, 4, 8) if tp * cp * split.pp * d <= 1024])
    world = tp * cp * split.pp * dp
    cfg: dict[str, Any] = {
        "model": name,
        "launcher": launcher,
        "num_gpus": world,
        "seq_len": seq,
        "tp": tp,
        "cp": cp,
        "pp": split.pp,
        **split.settings,
    }
    if split.vpp is not None and "pipeline_layout" not in split.settings:
        cfg["vpp"] = split.vpp
    if m.softmax_sinks and cp > 1:
        cfg["cp_comm_type"] = "a2a"
    # Experts: ETP explicit or left to the launcher, EP dividing the experts and the expert world.
    etp_choice = rng.choice((None, None, 1, tp))
    if m.add_bias_linear and tp > 1:
        etp_choice = 1 if launcher == "megatron-lm" or rng.random() < 0.5 else None
    cfg["etp"] = etp_choice
    eps = []
    for ep in divisors(m.num_experts):
        cfg["ep"] = ep
        etp = effective_etp(cfg)
        if world % (etp * ep * split.pp) == 0 and (not m.add_bias_linear or etp == 1):
            eps.append(ep)
    cfg["ep"] = rng.choice(eps[-4:]) if eps else 1
    if cfg["etp"] is None:
        del cfg["etp"]
    if tp > 1 and rng.random() < 0.3:
        cfg["sequence_parallel"] = True
    mbs = rng.choice((1, 1, 2))
    vpp = split.vpp or 1
    microbatches = split.pp * rng.choice((1, 2, 4)) if vpp > 1 else rng.choice((1, 2, 4, 8, 16))
    cfg["mbs"] = mbs
    cfg["gbs"] = mbs * dp * microbatches
    g = rng.choice(GPUS)
    if g is not None:
        cfg["gpu"] = g
    return cfg


# ---------------------------------------------------------------------- valid variations


def _graphs_ok_for(cfg: dict[str, Any]) -> bool:
    return cfg.get("recompute_granularity") != "full"


def vary_recompute(rng: random.Random, cfg: dict[str, Any]) -> str:
    m = model(cfg["model"])
    if rng.random() < 0.3:
        cfg.update(recompute_granularity="full", recompute_method=rng.choice(("uniform", "block")))
        cfg["recompute_num_layers"] = rng.choice((1, 2))
        return "recompute-full"
    mods = ["layernorm", "moe", "core_attn"]
    mods.append("moe_act")
    if m.is_mla:
        mods.append("mla_up_proj")
    if not m.all_layers_moe:
        mods.append("mlp")
    if m.moe_shared_expert_intermediate_size:
        mods.append("shared_experts")
    if cfg.get("precision") == "fp8-delayed":
        mods = [x for x in mods if x not in ("moe_act", "layernorm")]
    chosen = rng.sample(mods, rng.randint(1, min(3, len(mods))))
    cfg.update(recompute_granularity="selective", recompute_modules=chosen)
    return "recompute-selective"


def vary_graphs(rng: random.Random, cfg: dict[str, Any]) -> str:
    m = model(cfg["model"])
    if rng.random() < 0.3:
        cfg.update(cuda_graph_impl="full_iteration", check_for_nan_in_loss=False)
        return "graphs-full-iteration"
    cfg["cuda_graph_impl"] = "transformer_engine"
    choice = rng.choice(("attn", "router", "router-pre", "drop-pad-moe", "dense-mlp"))
    if choice == "dense-mlp" and m.all_layers_moe:
        choice = "attn"
    if choice == "attn":
        cfg["cuda_graph_modules"] = ["attn"]
    elif choice == "router":
        cfg["cuda_graph_modules"] = ["attn", "moe_router"]
    elif choice == "router-pre":
        cfg["cuda_graph_modules"] = ["attn", "moe_router", "moe_preprocess"]
        if cfg.get("dispatcher", "alltoall") == "alltoall":
            cfg.pop("moe_capacity_factor", None)
            cfg.pop("moe_pad_expert_input_to_capacity", None)
    elif choice == "drop-pad-moe":
        cfg.update(
            cuda_graph_modules=["attn", "moe"],
            moe_capacity_factor=1.0,
            moe_pad_expert_input_to_capacity=True,
            dispatcher="alltoall",
        )
    else:
        cfg["cuda_graph_modules"] = ["attn", "mlp"]
    return f"graphs-{choice}"


def vary_moe(rng: random.Random, cfg: dict[str, Any]) -> str:
    g = gpu(cfg["gpu"]) if cfg.get("gpu") else None
    choice = rng.choice(("allgather", "flex", "capacity", "drop-pad", "shared-overlap", "ep-overlap"))
    if choice == "allgather":
        cfg["dispatcher"] = "allgather"
    elif choice == "flex":
        backends = list(g.flex_backends) if g else ["deepep", "hybridep"]
        backends = [b for b in backends if b != "ncclep"]
        if cfg["ep"] * effective_etp(cfg) == 1:
            backends = [b for b in backends if b != "deepep"]
        if not backends:
            return vary_moe(rng, cfg)
        cfg["dispatcher"] = "flex-" + rng.choice(backends)
        choice = cfg["dispatcher"]
    elif choice == "capacity":
        cfg["moe_capacity_factor"] = rng.choice((1.0, 1.25, 2.0))
    elif choice == "drop-pad":
        cfg.update(moe_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)
    elif choice == "shared-overlap":
        if not model(cfg["model"]).moe_shared_expert_intermediate_size:
            return vary_moe(rng, cfg)
        cfg.update(moe_shared_expert_overlap=True, dispatcher="alltoall")
    else:
        m = model(cfg["model"])
        if cfg["ep"] == 1 or m.mtp_num_layers > 1 or (cfg["pp"] > 1 and not _has_vpp(cfg)):
            return vary_moe(rng, cfg)
        cfg.update(ep_overlap=True, dispatcher="alltoall")
    return f"moe-{choice}"


def _has_vpp(cfg: dict[str, Any]) -> bool:
    if cfg.get("vpp"):
        return cfg["vpp"] > 1
    layout = cfg.get("pipeline_layout")
    return bool(layout) and layout.count("|") + 1 > cfg["pp"]


def vary_precision(rng: random.Random, cfg: dict[str, Any]) -> str:
    g = gpu(cfg["gpu"]) if cfg.get("gpu") else None
    recipes = (
        list(g.quant_recipes) if g else ["fp8-delayed", "fp8-tensorwise", "fp8-blockwise", "mxfp8", "nvfp4"]
    )
    recipe = rng.choice(recipes)
    cfg["precision"] = recipe
    if recipe in ("fp8-tensorwise", "fp8-delayed", "fp8-blockwise") and rng.random() < 0.3:
        cfg["fp8_param_gather"] = True
    if recipe != "bf16" and rng.random() < 0.3 and cfg.get("dispatcher", "alltoall") != "allgather":
        cfg["moe_router_padding_for_quantization"] = True
    return f"precision-{recipe}"


def vary_optimizer(rng: random.Random, cfg: dict[str, Any]) -> str:
    cfg.update(use_precision_aware_optimizer=True, use_distributed_optimizer=True)
    if rng.random() < 0.7:
        cfg["optimizer_cpu_offload_fraction"] = rng.choice((0.25, 0.5, 1.0))
        return "optimizer-offload"
    return "optimizer-precision-aware"


def vary_cp(rng: random.Random, cfg: dict[str, Any]) -> str:
    m = model(cfg["model"])
    cp = cfg["cp"]
    if cp == 1 or m.softmax_sinks:
        return "cp-default"
    options = ["p2p"]
    if not m.is_mla and not m.has_sliding_window and kv_heads_per_rank(m, cfg["tp"]) % cp == 0:
        options.append("a2a")
    if not m.has_sliding_window and cp >= 4:
        options.append("a2a+p2p")
    if not m.is_mla and not m.has_sliding_window:
        options.append("all_gather")
    comm = rng.choice(options)
    cfg["cp_comm_type"] = comm
    if comm == "a2a+p2p":
        heads = kv_heads_per_rank(m, cfg["tp"])
        a2a = [
            d
            for d in divisors(cp)
            if 1 < d < cp and heads % d == 0 and m.num_attention_heads // cfg["tp"] % d == 0
        ]
        if not a2a:
            cfg["cp_comm_type"] = "p2p"
            return "cp-p2p"
        first = rng.choice(a2a)
        cfg["hierarchical_cp_sizes"] = [first, cp // first]
    return f"cp-{comm}"


VARIATIONS: dict[str, Callable[[random.Random, dict[str, Any]], str]] = {
    "recompute": vary_recompute,
    "graphs": vary_graphs,
    "moe": vary_moe,
    "precision": vary_precision,
    "optimizer": vary_optimizer,
    "cp": vary_cp,
}


def valid_config(rng: random.Random) -> tuple[dict[str, Any], str]:
    cfg = base_config(rng)
    names = ["base"]
    for family in rng.sample(list(VARIATIONS), rng.randint(0, 3)):
        if family == "graphs" and not _graphs_ok_for(cfg):
            continue
        names.append(VARIATIONS[family](rng, cfg))
    if cfg.get("recompute_granularity") == "full" and cfg.get("cuda_graph_impl", "none") not in ("none",):
        cfg.update(cuda_graph_impl="full_iteration", check_for_nan_in_loss=False)
        cfg.pop("cuda_graph_modules", None)
    if cfg.get("ep_overlap") and (
        cfg.get("recompute_granularity") == "full" or "moe" in (cfg.get("recompute_modules") or [])
    ):
        cfg["ep_overlap"] = False
    if cfg.get("moe_shared_expert_overlap") and "shared_experts" in (cfg.get("recompute_modules") or []):
        cfg["moe_shared_expert_overlap"] = False
    if cfg.get("dispatcher") == "flex-deepep" and cfg.get("moe_pad_expert_input_to_capacity"):
        cfg["dispatcher"] = "alltoall"
    if cfg.get("dispatcher") == "allgather":
        cfg.pop("moe_router_padding_for_quantization", None)  # allgather refuses router padding
    if (
        cfg["launcher"] == "megatron-lm"
        and cfg.get("optimizer_cpu_offload_fraction")
        and cfg.get("precision") != "fp8-delayed"
    ):
        cfg.pop("fp8_param_gather", None)  # Megatron-LM: offload with fp8 param gather needs delayed scaling
    return cfg, "+".join(names)


# ---------------------------------------------------------------------- mutations (each breaks one rule)

Mutation = Callable[[random.Random, dict[str, Any]], "dict[str, Any] | None"]
MUTATIONS: dict[str, tuple[str, Mutation]] = {}


def mutation(family: str, target: str):
    def register(fn: Mutation) -> Mutation:
        MUTATIONS[target] = (family, fn)
        return fn

    return register


@mutation("layout", "world-dense")
def _world_dense(rng, cfg):
    size = cfg["tp"] * cfg["cp"] * cfg["pp"]
    if size == 1:
        return None
    cfg["num_gpus"] += rng.choice([d for d in divisors(size) if d < size] or [1])
    return cfg


@mutation("layout", "world-expert")
def _world_expert(rng, cfg):
    m = model(cfg["model"])
    etp = effective_etp(cfg)
    for ep in sorted(divisors(m.num_experts), reverse=True):
        if cfg["num_gpus"] % (etp * ep * cfg["pp"]) and ep > cfg["ep"]:
            cfg["ep"] = ep
            return cfg
    return None


@mutation("layout", "ep-experts")
def _ep_experts(rng, cfg):
    m = model(cfg["model"])
    for ep in (3, 5, 6, 7):
        if m.num_experts % ep:
            # grow DP until the expert world factors again, so that only the expert-count rule breaks
            unit = effective_etp(cfg) * ep * cfg["pp"]
            factor = next(k for k in range(1, ep + 1) if cfg["num_gpus"] * k % unit == 0)
            cfg["num_gpus"] *= factor
            cfg["gbs"] *= factor
            cfg["ep"] = ep
            return cfg
    return None


@mutation("layout", "heads-tp")
def _heads_tp(rng, cfg):
    m = model(cfg["model"])
    for tp in (3, 6, 5, 12, 16, 32):
        if m.num_attention_heads % tp and (m.num_query_groups % tp == 0 or tp % m.num_query_groups == 0):
            return _retp(cfg, tp)
    for tp in (3, 6, 5, 12):
        if m.num_attention_heads % tp:
            return _retp(cfg, tp)
    return None


@mutation("layout", "groups-tp")
def _groups_tp(rng, cfg):
    m = model(cfg["model"])
    g = m.num_query_groups
    for tp in (3, 6, 12, 24, 16, 32):
        if m.num_attention_heads % tp == 0 and g % tp and tp % g:
            return _retp(cfg, tp)
    return None


def _retp(cfg, tp):
    """Change TP keeping the world, DP, CP and sequence rules intact."""
    old = cfg["tp"]
    cfg["num_gpus"] = cfg["num_gpus"] // old * tp
    cfg["tp"] = tp
    seq = cfg["seq_len"]
    step = 2 * cfg["cp"] * tp
    cfg["seq_len"] = max(step, seq // step * step)
    if cfg.get("etp") == old:
        cfg["etp"] = 1
    cfg.pop("sequence_parallel", None)
    return cfg


@mutation("layout", "moe-bias-etp")
def _moe_bias(rng, cfg):
    m = model(cfg["model"])
    if not m.add_bias_linear or cfg["tp"] == 1:
        return None
    cfg["etp"] = cfg["tp"]
    cfg["ep"] = 1
    return cfg


@mutation("layout", "moe-tp-no-sp")
def _moe_tp_no_sp(rng, cfg):
    if cfg["tp"] == 1:
        return None
    cfg["sequence_parallel"] = False
    return cfg


@mutation("layout", "etp-default-lm")
def _etp_default_lm(rng, cfg):
    """Megatron-LM resolves an unset ETP to TP (Bridge: 1); grow EP until only ETP = 1 would factor."""
    m = model(cfg["model"])
    if cfg["tp"] == 1 or m.add_bias_linear:
        return None
    cfg["launcher"] = "megatron-lm"
    cfg.pop("etp", None)
    world, pp, tp = cfg["num_gpus"], cfg["pp"], cfg["tp"]
    for ep in sorted(divisors(m.num_experts)):
        if world % (ep * pp) == 0 and world % (tp * ep * pp):
            cfg["ep"] = ep
            return cfg
    return None


@mutation("pipeline", "plain-not-divisible")
def _plain_not_divisible(rng, cfg):
    L = model(cfg["model"]).num_layers
    for pp in (3, 5, 6, 7, 8, 4):
        if L % pp:
            return _repipe(cfg, pp)
    return None


def _repipe(cfg, pp, **settings):
    for key in (
        "vpp",
        "pipeline_layout",
        "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split",
        "num_layers_in_first_pipeline_stage",
        "num_layers_in_last_pipeline_stage",
        "ep_overlap",
    ):
        cfg.pop(key, None)
    old = cfg["pp"]
    cfg["num_gpus"] = cfg["num_gpus"] // old * pp
    cfg["pp"] = pp
    etp = effective_etp(cfg)
    while cfg["num_gpus"] % (etp * cfg["ep"] * pp):
        cfg["ep"] //= 2
        if cfg["ep"] < 1:
            return None
    cfg.update(settings)
    return cfg


@mutation("pipeline", "vpp-not-divisible")
def _vpp_not_divisible(rng, cfg):
    L = model(cfg["model"]).num_layers
    for pp in (2, 4):
        if L % pp:
            continue
        for vpp in (3, 5, 4, 2, 7):
            if (L // pp) % vpp:
                out = _repipe(cfg, pp, vpp=vpp)
                if out:
                    _fix_microbatches(out)
                return out
    return None


def _fix_microbatches(cfg):
    dp = cfg["num_gpus"] // (cfg["tp"] * cfg["cp"] * cfg["pp"])
    cfg["gbs"] = cfg["mbs"] * dp * cfg["pp"] * 2


@mutation("pipeline", "account-not-divisible")
def _account_not_divisible(rng, cfg):
    L = model(cfg["model"]).num_layers
    for pp in (2, 4, 8, 3):
        if (L + 2) % pp:
            return _repipe(
                cfg, pp, account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True
            )
    return None


@mutation("pipeline", "uneven-not-divisible")
def _uneven_not_divisible(rng, cfg):
    L = model(cfg["model"]).num_layers
    for pp in (4, 8):
        for first in (1, 2, 3):
            rest = L - 2 * first
            if rest > 0 and rest % (pp - 2):
                return _repipe(
                    cfg, pp, num_layers_in_first_pipeline_stage=first, num_layers_in_last_pipeline_stage=first
                )
    return None


@mutation("pipeline", "uneven-with-account")
def _uneven_with_account(rng, cfg):
    L = model(cfg["model"]).num_layers
    if L % 2:
        return None
    half = L // 2
    return _repipe(
        cfg,
        2,
        num_layers_in_first_pipeline_stage=half,
        num_layers_in_last_pipeline_stage=half,
        account_for_embedding_in_pipeline_split=True,
    )


@mutation("pipeline", "layout-bad-count")
def _layout_bad_count(rng, cfg):
    m = model(cfg["model"])
    text = layout_string(m.num_layers + rng.choice((1, -1)), 2, 1, m.mtp_num_layers)
    return _repipe(cfg, 2, pipeline_layout=text)


@mutation("pipeline", "layout-stages-vs-pp")
def _layout_stages(rng, cfg):
    m = model(cfg["model"])
    stages = rng.choice((3, 5))
    text = layout_string(m.num_layers, stages, 1, m.mtp_num_layers)
    return _repipe(cfg, 2, pipeline_layout=text)


@mutation("pipeline", "layout-no-embedding")
def _layout_no_embedding(rng, cfg):
    m = model(cfg["model"])
    text = layout_string(m.num_layers, 2, 1, m.mtp_num_layers).replace("E", "", 1)
    return _repipe(cfg, 2, pipeline_layout=text)


@mutation("pipeline", "layout-with-account")
def _layout_with_account(rng, cfg):
    m = model(cfg["model"])
    text = layout_string(m.num_layers, 2, 1, m.mtp_num_layers)
    return _repipe(cfg, 2, pipeline_layout=text, account_for_loss_in_pipeline_split=True)


@mutation("pipeline", "layout-vpp-mismatch")
def _layout_vpp_mismatch(rng, cfg):
    m = model(cfg["model"])
    text = layout_string(m.num_layers, 2, 2, m.mtp_num_layers)
    out = _repipe(cfg, 2, pipeline_layout=text, vpp=3)
    if out:
        _fix_microbatches(out)
    return out


@mutation("pipeline", "layout-with-vpp-flag")
def _layout_with_vpp_flag(rng, cfg):
    """A layout and a matching explicit VPP: Megatron Core checks they agree, Megatron-LM refuses both."""
    m = model(cfg["model"])
    text = layout_string(m.num_layers, 2, 2, m.mtp_num_layers)
    out = _repipe(cfg, 2, pipeline_layout=text, vpp=2)
    if out:
        _fix_microbatches(out)
    return out


@mutation("pipeline", "vpp-without-pp")
def _vpp_without_pp(rng, cfg):
    L = model(cfg["model"]).num_layers
    if L % 2:
        return None
    return _repipe(cfg, 1, vpp=2)


@mutation("batch", "gbs-not-divisible")
def _gbs(rng, cfg):
    dp = cfg["num_gpus"] // (cfg["tp"] * cfg["cp"] * cfg["pp"])
    unit = cfg["mbs"] * dp
    if unit == 1:
        cfg["mbs"] = 2
        unit = 2 * dp
        cfg["gbs"] = unit * 3 + 1
    else:
        cfg["gbs"] = unit * rng.choice((1, 2, 3)) + rng.randint(1, unit - 1)
    return cfg if not _has_vpp(cfg) else None


@mutation("batch", "vpp-microbatches")
def _vpp_microbatches(rng, cfg):
    if not _has_vpp(cfg):
        return None
    dp = cfg["num_gpus"] // (cfg["tp"] * cfg["cp"] * cfg["pp"])
    m = cfg["pp"] + 1 if rng.random() < 0.5 else max(1, cfg["pp"] - 1)
    cfg["gbs"] = cfg["mbs"] * dp * m
    return cfg


@mutation("sequence", "seq-2cp")
def _seq_2cp(rng, cfg):
    if cfg["cp"] == 1 or (cfg["tp"] > 1 and cfg.get("sequence_parallel", True)):
        return None
    cfg["seq_len"] += cfg["cp"]  # still a multiple of CP, no longer of 2 x CP
    return cfg if cfg["seq_len"] % (2 * cfg["cp"]) else None


@mutation("sequence", "seq-cp-tp")
def _seq_cp_tp(rng, cfg):
    tp, cp = cfg["tp"], cfg["cp"]
    if tp == 1 or cfg.get("sequence_parallel") is False:
        return None
    seq = cfg["seq_len"] + 2 * cp
    if seq % (cp * tp) == 0:
        return None
    cfg["seq_len"] = seq
    return cfg


@mutation("cp", "hierarchy-missing")
def _hierarchy_missing(rng, cfg):
    m = model(cfg["model"])
    if cfg["cp"] < 4 or m.has_sliding_window:
        return None
    cfg["cp_comm_type"] = "a2a+p2p"
    cfg.pop("hierarchical_cp_sizes", None)
    return cfg


@mutation("cp", "hierarchy-product")
def _hierarchy_product(rng, cfg):
    m = model(cfg["model"])
    if cfg["cp"] < 4 or m.has_sliding_window:
        return None
    cfg["cp_comm_type"] = "a2a+p2p"
    cfg["hierarchical_cp_sizes"] = [2, cfg["cp"]]
    return cfg


@mutation("cp", "a2a-heads")
def _a2a_heads(rng, cfg):
    m = model(cfg["model"])
    if m.is_mla or m.has_sliding_window or cfg["cp"] == 1:
        return None
    if kv_heads_per_rank(m, cfg["tp"]) % cfg["cp"] == 0:
        return None
    cfg["cp_comm_type"] = "a2a"
    return cfg


@mutation("cp", "mla-comm-type")
def _mla_comm(rng, cfg):
    if not model(cfg["model"]).is_mla or cfg["cp"] == 1:
        return None
    cfg["cp_comm_type"] = "all_gather"
    return cfg


@mutation("cp", "sinks-comm-type")
def _sinks_comm(rng, cfg):
    if not model(cfg["model"]).softmax_sinks or cfg["cp"] == 1:
        return None
    cfg["cp_comm_type"] = "p2p"
    return cfg


@mutation("launch", "lm-cross-entropy-te")
def _cross_entropy_te(rng, cfg):
    cfg["cross_entropy_fusion"] = "te"  # Megatron-LM refuses it; Bridge only warns
    return cfg


@mutation("launch", "tp-overlap-without-sp")
def _tp_overlap_without_sp(rng, cfg):
    # Megatron-LM refuses it without SP, which it always turns off at TP 1; Bridge turns the overlap off. At
    # TP > 1 turning SP off would also break MoE (MOE_TP_NEEDS_SP), so only TP 1 bases are used.
    if cfg["tp"] > 1:
        return None
    cfg["tp_comm_overlap"] = True
    return cfg


def _selective(cfg, modules, **extra):
    """Selective recompute of ``modules`` (a full-recompute base's method and layer count dropped)."""
    cfg.pop("recompute_method", None)
    cfg.pop("recompute_num_layers", None)
    cfg.update(recompute_granularity="selective", recompute_modules=list(modules), **extra)
    return cfg


@mutation("recompute", "unknown-module")
def _unknown_module(rng, cfg):
    return _selective(cfg, [rng.choice(("moe_layer", "up_proj", "norm"))])


@mutation("recompute", "full-no-method")
def _full_no_method(rng, cfg):
    cfg.update(recompute_granularity="full", recompute_num_layers=1)
    cfg.pop("recompute_method", None)
    return _no_graphs(cfg)


def _no_graphs(cfg):
    for key in ("cuda_graph_impl", "cuda_graph_modules", "ep_overlap"):
        cfg.pop(key, None)
    return cfg


@mutation("recompute", "selective-num-layers")
def _selective_num_layers(rng, cfg):
    return _selective(cfg, ["layernorm"], recompute_num_layers=2)


@mutation("recompute", "selective-method")
def _selective_method(rng, cfg):
    return _selective(cfg, ["layernorm"], recompute_method="uniform")


@mutation("recompute", "moe-act-no-grouped-gemm")
def _moe_act(rng, cfg):
    return _selective(cfg, ["moe_act"], moe_grouped_gemm=False)


@mutation("recompute", "mla-up-proj-gqa")
def _mla_up_proj(rng, cfg):
    if model(cfg["model"]).is_mla:
        return None
    return _selective(cfg, ["mla_up_proj"])


@mutation("recompute", "shared-experts-overlap")
def _shared_overlap(rng, cfg):
    if not model(cfg["model"]).moe_shared_expert_intermediate_size:
        return None
    return _selective(cfg, ["shared_experts"], moe_shared_expert_overlap=True, dispatcher="alltoall")


@mutation("recompute", "fp8-delayed-moe-act")
def _fp8_delayed(rng, cfg):
    if cfg.get("gpu") and "fp8-delayed" not in gpu(cfg["gpu"]).quant_recipes:
        return None
    cfg.pop("moe_router_padding_for_quantization", None) if cfg.get("dispatcher") == "allgather" else None
    return _selective(cfg, ["moe_act"], precision="fp8-delayed")


@mutation("recompute", "ep-overlap-moe-recompute")
def _ep_overlap_recompute(rng, cfg):
    if cfg["ep"] == 1 or (cfg["pp"] > 1 and not _has_vpp(cfg)) or model(cfg["model"]).mtp_num_layers > 1:
        return None
    return _selective(cfg, ["moe"], ep_overlap=True, dispatcher="alltoall")


@mutation("graphs", "full-iteration-modules")
def _full_iteration_modules(rng, cfg):
    cfg.update(cuda_graph_impl="full_iteration", cuda_graph_modules=["attn"], check_for_nan_in_loss=False)
    return cfg


@mutation("graphs", "full-iteration-nan-check")
def _full_iteration_nan(rng, cfg):
    cfg.update(cuda_graph_impl="full_iteration", check_for_nan_in_loss=True)
    cfg.pop("cuda_graph_modules", None)
    return cfg


@mutation("graphs", "local-scoped")
def _local_scoped(rng, cfg):
    cfg.update(cuda_graph_impl="local", cuda_graph_modules=["attn"])
    return cfg


@mutation("graphs", "moe-and-router")
def _moe_and_router(rng, cfg):
    cfg.update(
        cuda_graph_impl="transformer_engine",
        cuda_graph_modules=["moe", "moe_router"],
        moe_capacity_factor=1.0,
        moe_pad_expert_input_to_capacity=True,
        dispatcher="alltoall",
    )
    return cfg


@mutation("graphs", "preprocess-without-router")
def _preprocess(rng, cfg):
    cfg.update(cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn", "moe_preprocess"])
    return cfg


@mutation("graphs", "mlp-all-moe")
def _mlp_all_moe(rng, cfg):
    if not model(cfg["model"]).all_layers_moe:
        return None
    cfg.update(cuda_graph_impl="transformer_engine", cuda_graph_modules=["mlp"])
    return cfg


@mutation("graphs", "moe-dropless")
def _moe_dropless(rng, cfg):
    cfg.update(cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn", "moe"])
    cfg.pop("moe_capacity_factor", None)
    cfg.pop("moe_pad_expert_input_to_capacity", None)
    return cfg


@mutation("graphs", "preprocess-d2h")
def _preprocess_d2h(rng, cfg):
    cfg.update(
        cuda_graph_impl="transformer_engine",
        cuda_graph_modules=["moe_router", "moe_preprocess"],
        dispatcher="alltoall",
        moe_capacity_factor=1.0,
    )
    cfg.pop("moe_pad_expert_input_to_capacity", None)
    return cfg


@mutation("graphs", "full-recompute-te-graphs")
def _full_recompute_graphs(rng, cfg):
    cfg.update(
        cuda_graph_impl="transformer_engine",
        cuda_graph_modules=["attn"],
        recompute_granularity="full",
        recompute_method="uniform",
        recompute_num_layers=1,
    )
    cfg.pop("ep_overlap", None)
    return cfg


@mutation("graphs", "moe-recompute-router")
def _moe_recompute_router(rng, cfg):
    cfg.pop("ep_overlap", None)
    return _selective(
        cfg, ["moe"], cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn", "moe_router"]
    )


@mutation("graphs", "expandable-segments")
def _expandable(rng, cfg):
    cfg.update(
        cuda_graph_impl="transformer_engine",
        cuda_graph_modules=["attn"],
        expandable_segments=True,
        nccl_graph_register=True,
    )
    return cfg


@mutation("moe", "deepep-pad")
def _deepep_pad(rng, cfg):
    if (cfg.get("gpu") and "deepep" not in gpu(cfg["gpu"]).flex_backends) or cfg["ep"] * effective_etp(
        cfg
    ) == 1:
        return None
    cfg.update(dispatcher="flex-deepep", moe_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)
    return cfg


@mutation("moe", "pad-without-capacity")
def _pad_without_capacity(rng, cfg):
    cfg["moe_pad_expert_input_to_capacity"] = True
    cfg.pop("moe_capacity_factor", None)
    return cfg


@mutation("moe", "allgather-varlen")
def _allgather_varlen(rng, cfg):
    if cfg["launcher"] != "bridge":
        return None  # Megatron-LM has no flag for variable_seq_lengths (validate_args sets it False)
    cfg.update(dispatcher="allgather", variable_seq_lengths=True)
    return _no_graphs(cfg)


@mutation("moe", "router-padding-bf16")
def _router_padding(rng, cfg):
    cfg.update(moe_router_padding_for_quantization=True, precision="bf16")
    return cfg


@mutation("moe", "shared-overlap-allgather")
def _shared_allgather(rng, cfg):
    if not model(cfg["model"]).moe_shared_expert_intermediate_size:
        return None
    cfg.update(moe_shared_expert_overlap=True, dispatcher="allgather")
    return cfg


@mutation("moe", "ep-overlap-without-ep")
def _ep_overlap_no_ep(rng, cfg):
    if cfg["pp"] > 1 and not _has_vpp(cfg):
        return None
    cfg.update(ep_overlap=True, ep=1, dispatcher="alltoall")
    cfg.pop("etp", None)
    return cfg


@mutation("moe", "ep-overlap-no-vpp")
def _ep_overlap_no_vpp(rng, cfg):
    if cfg["pp"] == 1 or _has_vpp(cfg) or cfg["ep"] == 1:
        return None
    cfg.update(ep_overlap=True, dispatcher="alltoall")
    return cfg


@mutation("moe", "dispatcher-gpu")
def _dispatcher_gpu(rng, cfg):
    cfg.update(gpu="gb200", dispatcher="flex-deepep")
    if cfg["ep"] * effective_etp(cfg) == 1:
        return None
    return cfg


@mutation("moe", "deepep-tpxep-1")
def _deepep_single(rng, cfg):
    if cfg.get("gpu") and "deepep" not in gpu(cfg["gpu"]).flex_backends:
        return None
    cfg.update(dispatcher="flex-deepep", ep=1, etp=1)
    return cfg


@mutation("precision", "recipe-gpu")
def _recipe_gpu(rng, cfg):
    cfg.update(gpu=rng.choice(("h100", "h200")), precision=rng.choice(("mxfp8", "nvfp4")))
    return cfg


@mutation("precision", "param-gather-no-distopt")
def _param_gather(rng, cfg):
    cfg.update(precision="fp8-tensorwise", fp8_param_gather=True, use_distributed_optimizer=False)
    cfg.pop("gpu", None)
    for key in ("use_precision_aware_optimizer", "optimizer_cpu_offload_fraction"):
        cfg.pop(key, None)
    return cfg


@mutation("precision", "fp8-param-gather-nvfp4")
def _param_gather_nvfp4(rng, cfg):
    cfg.update(precision="nvfp4", fp8_param_gather=True, use_distributed_optimizer=True)
    if cfg.get("gpu") and "nvfp4" not in gpu(cfg["gpu"]).quant_recipes:
        cfg["gpu"] = "b200"
    cfg.pop("optimizer_cpu_offload_fraction", None)
    return cfg


@mutation("precision", "mxfp8-param-gather-bridge")
def _mxfp8_param_gather(rng, cfg):
    if cfg["launcher"] != "bridge":
        return None
    cfg.update(precision="mxfp8", fp8_param_gather=True, reuse_grad_buf_for_mxfp8_param_ag=False,
               gpu=rng.choice(("b200", "gb200")))  # fmt: skip
    return cfg


@mutation("precision", "fp8-shape")
def _fp8_shape(rng, cfg):
    if cfg["cp"] > 1 or cfg["tp"] > 1:
        return None
    cfg.update(precision="fp8-blockwise", seq_len=4096 + 64, mbs=1)
    cfg.pop("gpu", None)
    return cfg


@mutation("optimizer", "precision-aware-no-distopt")
def _precision_aware(rng, cfg):
    cfg.update(use_precision_aware_optimizer=True, use_distributed_optimizer=False)
    cfg.pop("fp8_param_gather", None)
    return cfg


@mutation("optimizer", "offload-without-precision-aware")
def _offload(rng, cfg):
    cfg.update(optimizer_cpu_offload_fraction=0.5, use_precision_aware_optimizer=False)
    return cfg


@mutation("optimizer", "offload-fp8-param-gather")
def _offload_fp8(rng, cfg):
    if cfg.get("gpu") and "fp8-tensorwise" not in gpu(cfg["gpu"]).quant_recipes:
        return None
    cfg.update(
        optimizer_cpu_offload_fraction=0.5,
        use_precision_aware_optimizer=True,
        use_distributed_optimizer=True,
        precision="fp8-tensorwise",
        fp8_param_gather=True,
    )
    return cfg


# ---------------------------------------------------------------------- the set


def generate(count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> list[Case]:
    """``count`` cases: even indices valid, odd indices mutated (targets taken in turn)."""
    rng = random.Random(seed)
    targets = sorted(MUTATIONS)
    cases: list[Case] = []
    turn = 0
    while len(cases) < count:
        index = len(cases)
        if index % 2 == 0:
            cfg, variation = valid_config(rng)
            cases.append(Case(f"c{index:05d}", "valid", f"valid:{variation}", cfg))
            continue
        mutated = None
        while mutated is None:
            target = targets[turn % len(targets)]
            turn += 1
            family, fn = MUTATIONS[target]
            for _ in range(30):  # fresh valid bases until the mutation applies to one
                mutated = fn(rng, valid_config(rng)[0])
                if mutated is not None:
                    cases.append(Case(f"c{index:05d}", family, target, mutated))
                    break
    return cases
