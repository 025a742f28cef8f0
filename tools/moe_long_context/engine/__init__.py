"""The engine: request fields, the resolved Context, layout, pipeline split, schedule, findings, rules, step time."""
