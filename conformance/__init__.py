"""Differential conformance suite: the engine's verdicts against Megatron's own checks, on the CPU.

``generate`` builds the configurations, ``oracle`` runs Megatron Core / Megatron-LM / Megatron Bridge on
them (inside the environment ``make conformance`` sets up under ``build/conformance``), ``families`` maps
Megatron's exception messages to the engine's rule families, and ``run`` compares and reports. Only
``oracle`` and ``megatron_env`` import Megatron; the rest runs in the normal test environment too.
"""
