"""Calibration: the engine's memory and step-time estimates against every public measurement we could find.

- ``corpus``: the measured points (``*.yaml`` beside this module), each with its source (repo@commit:path:line),
  the configuration the run used (read from the recipe it names) and what was measured; loading and checking them.
- ``evaluate``: the engine's estimate for each measured quantity, the ratio estimate / measured, and whether the
  point counts for the calibration or is listed with the reason it does not.
- ``report``: the summary by model family, GPU and quantity, the README table, and the generated data files the
  engine reads (the stated error of each quantity, the memory overhead measured outside the tensors).

``moe-lc eval calibrate`` prints the report; ``--write`` regenerates the README table and the data files,
``--check`` fails when any of them is stale.
"""
