"""The two front ends' dialects: Megatron-LM flags and Megatron Bridge keys, launch-text parsing, overrides."""
