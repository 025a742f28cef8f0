"""Deterministic engine for planning long-context MoE training on Megatron Bridge / Megatron Core.

Every layer below ``faces`` is pure: no printing, no network, no writes. The folders are the layers
(see tests/test_architecture.py for their order).
Target versions: Megatron Bridge 0.6.x on Megatron Core 0.19.x with Transformer Engine 2.14.
"""

__version__ = "0.1.0"

TARGET_VERSIONS = {
    "megatron_bridge": "0.6.2",
    "megatron_core": "0.19.2",
    "transformer_engine": "2.14",
}
