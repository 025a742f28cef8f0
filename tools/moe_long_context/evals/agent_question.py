"""The reference agent, part 1: reading a question into the facts a tool call needs (model, GPU, sizes, labels)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Bridge's LoRA on an MoE model is in scope (SKILL.md); Hugging Face PEFT or a dense model is not (caught below)
NEGATIVE = re.compile(
    r"\b(?:vllm|tensorrt[- ]llm|sglang|serv(?:e|ing)|inference|quantiz\w*|awq|gptq|deepspeed|zero-3|fsdp|"
    r"jax|maxtext|tpu|hugging\s*face|transformers\b|pip\s+install|docker|bert)\b",
    re.I,
)
DENSE = re.compile(r"\bdense\b|\bno\s+MoE\b", re.I)
MOE = re.compile(r"\bMoE\b|mixture[- ]of[- ]experts|\bexperts?\b", re.I)
TRAINING = re.compile(
    r"\b(?:train\w*|pretrain\w*|fine-?tun\w*|SFT|megatron|bridge|launch|layout|recompute|pipeline|parallel\w*|"
    r"global\s+batch|dispatcher|cuda\s+graphs?|cp_comm_type|CP)\b|--[a-z]|\b(?:TP|CP|EP|PP)\s*=",
    re.I,
)

GPU = re.compile(r"(?<![\w-])(GB300|GB200|B300|B200|H200|H100)(?![\w-])", re.I)
NODES = re.compile(r"(\d+)\s+nodes?\s+(?:of|x|×)\s+(\d+)", re.I)
COUNT = re.compile(
    r"(?<![\w.])(\d{1,5})\s*(?:x\s*)?(?:GB300|GB200|B300|B200|H200|H100)(?:\s*\(NVL72\))?(?:\s+GPUs?)?"
    r"|(?<![\w.])(\d{1,5})\s+GPUs?\b(?!\s+per)",
    re.I,
)
TOKENS = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d{3,8})(?:-|\s*)tokens?\b", re.I)
KTOKENS = re.compile(r"(?<![\w.])(\d{1,4})K\b")
DIM = re.compile(r"(?<![\w-])(TP|CP|PP|VPP|EP|ETP)\s*=\s*(\d+)")
GBS = re.compile(r"global[- ]batch(?:[- ]size)?\s*(?:of\s*)?(\d+)|\bGBS\s*=?\s*(\d+)", re.I)
MBS = re.compile(r"micro[- ]batch(?:[- ]size)?\s*(?:of\s*)?(\d+)|\bMBS\s*=?\s*(\d+)", re.I)
# headroom a user asks to keep per GPU beyond the tensors (plan_layout's overhead_gib)
HEADROOM = re.compile(
    r"(\d+(?:\.\d+)?)\s*GiB\s+(?:of\s+)?(?:headroom|overhead|reserve|spare)|"
    r"(?:headroom|overhead|reserve)\s+of\s+(\d+(?:\.\d+)?)\s*GiB",
    re.I,
)
HIERARCHY = re.compile(r"\[(\d+),\s*(\d+)\]")
LABEL_SEP = re.compile(r"[\s,`()\[\]'\"]+|\band\b")
FENCED = re.compile(r"```[\w-]*\n(.*?)```", re.S)
INFORMAL_LABELS = ("up_proj", "norm")
GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
# the LoRA targets the engine places (model/lora.py LORA_TARGETS), as a question names them
LORA_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2", "in_proj", "out_proj")


@dataclass
class Facts:
    """What the question gives, as engine fields (only what it states)."""

    model: str | None = None
    gpu: str | None = None
    num_gpus: int | None = None
    seq_len: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    config_text: str | None = None  # a pasted launch script, override list or config object
    labels_mentioned: list[str] = field(default_factory=list)

    @property
    def layout_given(self) -> bool:
        return sum(k in self.fields for k in ("tp", "cp", "pp", "ep")) >= 3

    def request(self, *drop: str) -> dict[str, Any]:
        """Arguments for a config-taking tool: model, GPU, world, sequence and every stated field."""
        out: dict[str, Any] = {"model": self.model}
        for key in ("gpu", "num_gpus", "seq_len"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out.update(self.fields)
        return {k: v for k, v in out.items() if k not in drop}


@dataclass
class Catalog:
    models: list[dict[str, Any]]
    labels: list[str]  # recompute labels Megatron Core accepts (from the rule table)

    def find_model(self, text: str) -> str | None:
        names = []
        for spec in self.models:
            for name in (spec["id"], spec["name"], *spec.get("aliases", [])):
                if "/" not in name:
                    names.append((name, spec["id"]))
        for name, model_id in sorted(names, key=lambda n: -len(n[0])):
            if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text, re.I):
                return model_id
        return None


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _labels_after(text: str, start: int, vocabulary: set[str]) -> list[str]:
    """Recompute labels listed right after a position (separated by spaces, commas, 'and', backticks)."""
    out: list[str] = []
    for token in LABEL_SEP.split(text[start : start + 120]):
        if not token:
            continue
        if token.lower() in vocabulary:
            out.append(token.lower())
        elif out or token.lower() not in ("of", "modules", "with", "selective"):
            break
    return out


def parse(question: str, catalog: Catalog) -> Facts:
    facts = Facts()
    fenced = FENCED.search(question)
    if fenced:
        facts.config_text = fenced.group(1).strip()
    prose = FENCED.sub(" ", question)
    facts.model = catalog.find_model(question)
    if m := GPU.search(prose):
        facts.gpu = m.group(1).lower()
    if m := NODES.search(prose):
        facts.num_gpus = int(m.group(1)) * int(m.group(2))
    elif m := COUNT.search(prose):
        facts.num_gpus = int(m.group(1) or m.group(2))
    lengths = [_int(m.group(1)) for m in TOKENS.finditer(prose)]
    lengths += [int(m.group(1)) * 1024 for m in KTOKENS.finditer(prose)]
    if lengths:
        facts.seq_len = max(lengths)
    f = facts.fields
    for m in DIM.finditer(prose):
        if not re.search(r"[x×*]\s*$", prose[: m.start()]):  # 'PP x VPP = 48' is a product, not a size
            f[m.group(1).lower()] = int(m.group(2))
    if m := GBS.search(prose):
        f["gbs"] = int(m.group(1) or m.group(2))
    if m := MBS.search(prose):
        f["mbs"] = int(m.group(1) or m.group(2))
    _parse_settings(prose, f, catalog, facts)
    return facts


def _parse_settings(q: str, f: dict[str, Any], catalog: Catalog, facts: Facts) -> None:
    low = q.lower()
    # pipeline split
    if m := re.search(r"layout\s+'([^']+)'|pipeline[- ]layout\s+'([^']+)'", q):
        f["pipeline_layout"] = m.group(1) or m.group(2)
    if re.search(r"account[-_ ]for[-_ ]embedding", low):
        f["account_for_embedding_in_pipeline_split"] = True
    if re.search(r"account[-_ ]for[-_ ]loss", low):
        f["account_for_loss_in_pipeline_split"] = True
    if re.search(r"sequence[- ]parallel", low):
        f["sequence_parallel"] = True
    # precision
    if "mxfp8" in low:
        f["precision"] = "mxfp8"
    elif re.search(r"fp8[^.\n]{0,20}blockwise|blockwise[^.\n]{0,10}fp8", low):
        f["precision"] = "fp8-blockwise"
    elif re.search(r"fp8[^.\n]{0,20}delayed|delayed\s+scaling", low):
        f["precision"] = "fp8-delayed"
    elif re.search(r"fp8[^.\n]{0,20}(?:tensorwise|current)", low):
        f["precision"] = "fp8-tensorwise"
    elif re.search(r"\bbf16\b(?!\s+grad)", low):
        f["precision"] = "bf16"
    # dispatcher
    if re.search(r"hybrid[-_ ]?ep", low):
        f["dispatcher"] = "flex-hybridep"
    elif re.search(r"deep[-_ ]?ep", low):
        f["dispatcher"] = "flex-deepep"
    elif re.search(r"\balltoall\b", low):
        f["dispatcher"] = "alltoall"
    # context parallel comm type
    if m := re.search(r"cp[-_ ]comm[-_ ]type\s*=?\s*(a2a\+p2p|a2a|p2p|all_gather)", low):
        f["cp_comm_type"] = m.group(1)
        if m.group(1) == "a2a+p2p" and (h := HIERARCHY.search(q[m.end() : m.end() + 120])):
            f["hierarchical_cp_sizes"] = [int(h.group(1)), int(h.group(2))]
    # recompute
    vocabulary = {*catalog.labels, *INFORMAL_LABELS}
    facts.labels_mentioned = [
        label for label in sorted(vocabulary) if re.search(rf"(?<![\w-]){label}(?![\w-])", q)
    ]
    if re.search(r"\bfull\s+(?:activation\s+)?recompute", low):
        f["recompute_granularity"] = "full"
        f["recompute_method"] = "block" if "block" in low else "uniform"
        m = re.search(r"(\d+)\s+layers?\s+per\s+group|recompute[-_ ]num[-_ ]layers\s*=?\s*(\d+)", low)
        f["recompute_num_layers"] = int(m.group(1) or m.group(2)) if m else 1
    else:
        for m in re.finditer(r"--recompute-modules|recompute(?:\s+list)?", q):
            labels = _labels_after(q, m.end(), vocabulary)
            if labels:
                f["recompute_granularity"] = "selective"
                f["recompute_modules"] = labels
                break
    # CUDA graphs
    if re.search(r"cuda[-_ ]graphs?|\bgraphs\b", low):
        impl = re.search(
            r"(?:cuda[-_]graph[-_]impl\s*=?\s*|\b)(transformer_engine|full_iteration|local)\b", low
        )
        if impl:
            f["cuda_graph_impl"] = impl.group(1)
        elif re.search(r"\bTE\s+(?:CUDA\s+)?graphs", q):
            f["cuda_graph_impl"] = "transformer_engine"
        mods = re.search(
            r"(?:cuda[-_]graph[-_](?:modules|scope)\s*=?\s*\[?|graphs?\s+on\s+)((?:(?:attn|mlp|moe_router|moe_preprocess|"
            r"moe|mamba)[\s,\]`]*(?:and\s+)?)+)",
            low,
        )
        if mods:
            f["cuda_graph_modules"] = [m for m in re.findall(r"[a-z_]+", mods.group(1)) if m in GRAPH_MODULES]
    if "expandable_segments:true" in low:
        f["expandable_segments"] = True
    if re.search(r"packed\s+sequences|\bTHD\b", q):
        f["packed_sequences"] = True
    # optimizer
    if re.search(r"without\s+--use-precision-aware-optimizer", low):
        f["use_precision_aware_optimizer"] = False
    elif re.search(r"precision[-_ ]aware[-_ ]optimizer", low):
        f["use_precision_aware_optimizer"] = True
    if re.search(r"--use-distributed-optimizer|distributed\s+(?:and\s+\S+\s+)?optimizer", low):
        f["use_distributed_optimizer"] = True
    if re.search(r"no\s+optimizer\s+offload", low):
        f["optimizer_cpu_offload_fraction"] = 0.0
    elif m := re.search(r"(\d+)%\s+optimizer\s+cpu\s+offload", low):
        f["optimizer_cpu_offload_fraction"] = int(m.group(1)) / 100
    elif "--optimizer-cpu-offload" in low:
        f["optimizer_cpu_offload_fraction"] = 1.0
    if "--fp8-param-gather" in low:
        f["fp8_param_gather"] = True
    if re.search(r"grad_reduce_in_fp32\s+off|bf16\s+gradients", low):
        f["grad_reduce_in_fp32"] = False
    if re.search(r"te\s+cross[- ]entropy", low):
        f["cross_entropy_fusion"] = "te"
    if re.search(r"megatron-lm|pretrain_gpt", low):
        f["launcher"] = "megatron-lm"
    # LoRA (Bridge's peft): the rank, Bridge's 32 when unstated, and the target linears named
    if re.search(r"\blora\b", low) and not facts.config_text:
        m = re.search(r"\brank\s*(?:of\s*)?(\d+)|\b(?:peft\.dim|lora_dim)\s*=?\s*(\d+)", low)
        f["lora_dim"] = int(m.group(1) or m.group(2)) if m else 32
        targets = [t for t in LORA_TARGETS if re.search(rf"(?<![\w-]){t}(?![\w-])", low)]
        if targets:
            f["lora_target_modules"] = targets


def applies(question: str, facts: Facts) -> tuple[bool, str]:
    """Whether the skill applies: long-context MoE training on Megatron (not serving, not other frameworks)."""
    if m := NEGATIVE.search(FENCED.sub(" ", question)):
        return (
            False,
            f"the question is about '{m.group(0)}' (serving, another framework or tooling), not Megatron training",
        )
    if DENSE.search(question) and not facts.model:
        return False, "it is about a dense model, not a Mixture-of-Experts model"
    if not (facts.model or MOE.search(question)):
        return False, "it names no Mixture-of-Experts model"
    if not TRAINING.search(question):
        return False, "it is not about training"
    return True, ""
