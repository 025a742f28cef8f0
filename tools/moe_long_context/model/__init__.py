"""Model and GPU specifications, the catalog of presets and the Hugging Face loader, parameter counts."""
