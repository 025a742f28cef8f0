"""The per-rank memory model: weights, gradients and optimizer states, activations, buffers, by pipeline stage."""
