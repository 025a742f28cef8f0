"""The seeds' three layouts as bare parallel shapes, for the tests that hand-check values against them.

engine/layouts.yaml holds the same layouts with every setting; tests/test_representative.py keeps the shapes
here equal to it.
"""

from __future__ import annotations

# DeepSeek-V3 at 128K on 256 H100 and at 256K on 512 H100: TP1 CP32/64 EP32 PP8 VPP4.
DSV3_128K = dict(
    model="deepseek-v3", gpu="h100", num_gpus=256, seq_len=131072, tp=1, cp=32, ep=32, pp=8, vpp=4
)
DSV3_256K = dict(DSV3_128K, num_gpus=512, seq_len=262144, cp=64)
# 61 decoder layers and one MTP layer over PP8 x VPP4: the split of Bridge's DeepSeek-V3 H100 recipe.
DSV3_SPLIT = {"pipeline_layout": "Et|(tt|)*30mL"}

# Qwen3-235B-A22B at 128K on 128 GB200: TP4 CP4 EP32 PP4 VPP12 (MoE with TP > 1 needs sequence parallelism).
QWEN_128K = dict(
    model="qwen3-235b-a22b", gpu="gb200", num_gpus=128, seq_len=131072, tp=4, cp=4, ep=32, pp=4, vpp=12,
    sequence_parallel=True,
)  # fmt: skip
# 94 layers + embedding + loss = 96 units: 24 per PP rank, 2 per virtual stage.
QWEN_SPLIT = {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
