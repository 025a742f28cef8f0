"""Evals for the skill: the task file, a deterministic grader, a runner for any agent command, BENCHMARK.md.

- ``tasks``: where evals/evals.json lives, loading it and validating it against evals/evals.schema.json.
- ``build``: evals/tasks.yaml (questions, engine calls, check templates) -> evals/evals.json, every expected
  number computed by the engine's tools.
- ``extract`` and ``grader``: an answer (text, tool calls, whether the skill was used) -> skill-creator's
  grading.json. Pure functions of the answer and the task: same answer, same grade.
- ``runner`` and ``report``: ask an agent command every question with and without the skill, grade, write
  skill-creator's workspace layout, benchmark.json and BENCHMARK.md.
- ``agent``: the reference agent, which answers only through the MCP server (a face: it imports the MCP
  client); ``cli``: the ``moe-lc eval`` sub-commands.

The grader imports the engine (the layout and memory checks call its tools) but never the MCP SDK.
"""
