"""Evals for the skill: the task file and a deterministic grader.

- ``tasks``: where evals/evals.json lives, loading it and validating it against evals/evals.schema.json.
- ``build``: evals/tasks.yaml (questions, engine calls, check templates) -> evals/evals.json, every expected
  number computed by the engine's tools.
- ``extract`` and ``grader``: an answer (text, tool calls, whether the skill was used) -> skill-creator's
  grading.json. Pure functions of the answer and the task: same answer, same grade.

The grader imports the engine (the layout and memory checks call its tools) but never the MCP SDK.
"""
