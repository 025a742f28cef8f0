"""Latency of the MCP server over stdio: cold start, and p50/p99 of tool calls from a client.

Cold start: spawn ``python -m moe_long_context.server``, complete the initialize handshake, list the tools
and answer a first ``size_cp`` call (which reads the model catalog); the time until the answer arrives
(interpreter start and imports included). The same is measured, interleaved run by run, for a minimal
``mcp`` SDK server with one tool (``BASELINE``), and the report gives the ratio of the medians: the cost
of this server's own imports and catalogs over what any Python MCP server pays. Tool calls: one stdio
session, a warm-up, then ``--calls`` sequential calls per tool, each timed from request to result in the
SDK client. Each tool gets the arguments of the representative DeepSeek-V3 128K layout that it accepts.

Every p50 is also given as a ratio to the reference work of benchmarks/machine.py, measured in this process before
the calls, and the report names the machine.

Run: python -m benchmarks.bench_server [--calls 1000] [--starts 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import anyio
from benchmarks.machine import describe, machine, reference_cpu_s
from mcp import Client, StdioServerParameters

from moe_long_context.dialects.overrides import bridge_override_list
from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.representative import representative_layouts
from moe_long_context.faces.registry import TOOLS

SERVER = StdioServerParameters(command=sys.executable, args=["-m", "moe_long_context.server"])
FIRST_CALL = ("size_cp", {"model": "deepseek-v3", "gpu": "h100", "seq_len": 131072})

# The smallest server the SDK makes: one tool with a pydantic result, run over stdio.
BASELINE_SOURCE = """
from pydantic import BaseModel
from mcp.server import MCPServer

server = MCPServer("baseline")

class Answer(BaseModel):
    cp: int

@server.tool()
def size_cp(model: str, gpu: str, seq_len: int) -> Answer:
    return Answer(cp=max(1, seq_len // 4096))

server.run()
"""
BASELINE = StdioServerParameters(command=sys.executable, args=["-c", BASELINE_SOURCE])


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def tool_arguments() -> dict[str, dict]:
    """One call per tool on the DeepSeek-V3 128K layout (lint_config gets it as Bridge overrides).
    plan_layout searches a layout space rather than answering one question: benchmarks/plan_layout.py."""
    config = representative_layouts()[0].config
    calls = {}
    for tool in TOOLS:
        fields = tool.request.model_fields
        if tool.name == "plan_layout":
            continue
        if tool.name == "lint_config":
            overrides = bridge_override_list(TrainingConfig(**config))
            calls[tool.name] = {"bridge_overrides": overrides, "model": config["model"], "gpu": config["gpu"],
                                "num_gpus": config["num_gpus"]}  # fmt: skip
        elif all(name in config for name, field in fields.items() if field.is_required()):
            calls[tool.name] = {k: v for k, v in config.items() if k in fields}
    return calls


async def cold_start(params: StdioServerParameters = SERVER) -> float:
    started = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        await client.list_tools()
        result = await client.call_tool(*FIRST_CALL)
        if result.is_error:
            raise SystemExit(f"the first call answered with an error: {result.content[0].text}")
        return time.perf_counter() - started


async def call_latencies(calls: int) -> dict[str, list[float]]:
    out = {}
    async with Client(SERVER, mode="legacy") as client:
        for name, arguments in tool_arguments().items():
            for _ in range(max(10, calls // 10)):  # warm-up
                await client.call_tool(name, arguments)
            samples = []
            for _ in range(calls):
                started = time.perf_counter()
                result = await client.call_tool(name, arguments)
                samples.append(time.perf_counter() - started)
                if result.is_error:
                    raise SystemExit(f"{name} answered with an error: {result.content[0].text}")
            out[name] = samples
    return out


async def measure(calls: int, starts: int) -> dict:
    starts_s, baseline_s = [], []
    for _ in range(starts):  # interleaved, so both see the same machine load
        starts_s.append(await cold_start(SERVER))
        baseline_s.append(await cold_start(BASELINE))
    reference = reference_cpu_s()
    report = {
        "machine": machine(),
        "reference_ms": round(reference * 1e3, 2),
        "cold_start_ms": {
            "median": statistics.median(starts_s) * 1e3,
            "max": max(starts_s) * 1e3,
            "runs": starts,
            "baseline_median": statistics.median(baseline_s) * 1e3,
            "ratio": statistics.median(starts_s) / statistics.median(baseline_s),
        },
        "tool_call_ms": {},
    }
    for name, samples in (await call_latencies(calls)).items():
        report["tool_call_ms"][name] = {
            "p50": percentile(samples, 0.50) * 1e3,
            "p99": percentile(samples, 0.99) * 1e3,
            "calls": len(samples),
            "p50_ratio": percentile(samples, 0.50) / reference,
        }
    return report


def print_report(report: dict) -> None:
    cold = report["cold_start_ms"]
    print(describe(report["machine"], report["reference_ms"] / 1e3))
    print(
        f"cold start (spawn to tools/list and a first size_cp), {cold['runs']} runs: median {cold['median']:.0f} ms, "
        f"max {cold['max']:.0f} ms; minimal mcp server {cold['baseline_median']:.0f} ms; ratio {cold['ratio']:.2f}"
    )
    print(f"{'tool call over stdio':32} {'p50 ms':>8} {'p99 ms':>8} {'calls':>6} {'p50/ref':>8}")
    for name, row in report["tool_call_ms"].items():
        print(f"{name:32} {row['p50']:8.2f} {row['p99']:8.2f} {row['calls']:6d} {row['p50_ratio']:8.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per tool")
    parser.add_argument("--starts", type=int, default=10, help="cold starts to time")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    report = anyio.run(measure, args.calls, args.starts)
    print_report(report)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
