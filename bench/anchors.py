#!/usr/bin/env python3
"""The performance report against the anchors: skein, PyPI `llm` 0.36 (with
`llm-echo`) and LangGraph 1.2 (a one-node graph appending a fixed reply,
checkpointed by `SqliteSaver`) run the same workloads in one run, and the
figures are printed side by side with skein's ratios.

    python3 bench/anchors.py [--venv DIR] [--skein-bin PATH] [--json OUT]

Without --venv it creates a temporary venv and installs the pinned anchors
from PyPI into it (this needs network access and ~1 minute). The skein side
is `crates/skein/examples/anchors.rs`, built and run in release, and the
whole-process figures of bench/skein_workloads.py (CLI start-up, a CLI turn
at depth 300 and 3,000 turns against `llm -c` at 300, the proxy's request
at depth 10 and 800 messages) on the release `skein` binary (built if
--skein-bin is not given). Both binaries are copied to a scratch directory
before they are timed, so a build elsewhere cannot replace them mid-run.
Not part of CI: see docs/performance.md.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import skein_workloads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "bench")
PACKAGES = ["llm==0.36", "llm-echo==0.5", "langgraph==1.2.22", "langgraph-checkpoint-sqlite==3.1.2"]
TOOLS = ["skein", "llm", "langgraph"]
LOAD_WAYS = [
    ("Conversation::load, current-thread runtime", "conversation_load"),
    ("Conversation::load, multi-thread runtime", "conversation_load_multi_thread"),
    ("Conversation::load_blocking", "conversation_load_blocking"),
    ("Store::load_thread", "load_thread"),
]


def venv(path):
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", path], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *PACKAGES], check=True)
    return python


def run_json(command, **kwargs):
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, **kwargs).stdout
    return json.loads(out.decode().strip().splitlines()[-1])


def llm_deep_turn(python, scratch, runs=5):
    """Median ms of `llm -c -m echo TEXT` continuing a 300-turn conversation."""
    env = dict(os.environ, LLM_USER_PATH=os.path.join(scratch, "llm-deep"))
    turns = skein_workloads.CLI_DEPTHS[0]
    workloads = os.path.join(HERE, "anchors_workloads.py")
    subprocess.run([python, workloads, "llm-deep", str(turns)], env=env, check=True, stdout=subprocess.DEVNULL)
    llm_bin = os.path.join(os.path.dirname(python), "llm")
    command = [llm_bin, "-c", "-m", "echo", skein_workloads.question(turns)]
    return {f"depth_{turns}": skein_workloads.timed_runs(command, runs, env=env)}


def release_binaries(scratch, skein_bin=None, root=ROOT, label="timed"):
    """The release `anchors` example and `skein` CLI of the checkout at
    `root` (the CLI built unless `skein_bin` is given), copied into
    `scratch` as NAME-LABEL."""
    cargo = ["cargo", "build", "--release", "-p"]
    subprocess.run(cargo + ["skein", "--example", "anchors"], cwd=root, check=True)
    if not skein_bin:
        subprocess.run(cargo + ["skein-cli"], cwd=root, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    built = {
        "anchors": os.path.join(target, "release", "examples", "anchors"),
        "skein": skein_bin or os.path.join(target, "release", "skein"),
    }
    return {name: shutil.copy2(path, os.path.join(scratch, f"{name}-{label}")) for name, path in built.items()}


def machine():
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "load": load}


def figures(report):
    """The figures of one tool's report, flattened for the table. skein's
    turn and fork workloads ran on both Tokio runtime flavours; the anchors'
    single figures are repeated on each flavour's rows, so every row gets
    its ratios."""
    turns, forks, load = report["turns"], report["forks"], report["load"]
    multi = report.get("multi_thread", report)
    rows = {}
    for flavour, source in (("current-thread runtime", report), ("multi-thread runtime", multi)):
        rows[f"turn, first tenth (median ms), skein {flavour}"] = source["turns"]["first_tenth"]["median_ms"]
        rows[f"turn, last tenth (median ms), skein {flavour}"] = source["turns"]["last_tenth"]["median_ms"]
        rows[f"turn, last tenth (mean ms), skein {flavour}"] = source["turns"]["last_tenth"]["mean_ms"]
        # The anchors' replies are fixed already: their own turns compare.
        fixed = source.get("turns_fixed", source["turns"])["last_tenth"]
        rows[f"turn, last tenth (median ms), skein {flavour}, fixed-reply model"] = fixed["median_ms"]
        rows[f"fork + one turn (median ms), skein {flavour}"] = source["forks"]["per_fork"]["median_ms"]
    rows.update({
        "storage at 250 turns (KB)": round(turns["bytes_at_250"] / 1024),
        "storage at 500 turns (KB)": round(turns["bytes_at_500"] / 1024),
        "storage 500/250": round(turns["bytes_at_500"] / turns["bytes_at_250"], 2),
        "storage per fork (KB)": round(forks["bytes_per_fork"] / 1024, 1),
        # skein's load in each way an application can call it; the anchors
        # have one way, repeated on each row.
        **{
            f"load 1,000 messages, skein {way} (median ms)": load.get(key, load["conversation_load"])["median_ms"]
            for way, key in LOAD_WAYS
        },
        "CLI start-up (median ms)": report.get("cli_ms"),
        **whole_process_rows(report),
    })
    return rows


def whole_process_rows(report):
    """The CLI deep turn and proxy rows; a figure a tool lacks is None."""
    cli, proxy = report.get("cli_deep", {}), report.get("proxy", {})
    shallow, deep = (cli.get(f"depth_{depth}") for depth in skein_workloads.CLI_DEPTHS)
    return {
        "CLI turn at depth 300 turns, whole process (median ms)": shallow,
        "CLI turn at depth 3,000 turns, whole process (median ms)": deep,
        "CLI turn 3,000 / 300": round(deep / shallow, 2) if deep and shallow else None,
        **{
            f"proxy request at depth {depth:,} messages (median ms)": proxy.get(f"depth_{depth}")
            for depth in skein_workloads.PROXY_DEPTHS
        },
    }


def is_ratio(name):
    """Rows that are a tool's own ratio, between which no ratio is taken."""
    return "500/250" in name or " / " in name


def table(reports):
    by_tool = {tool: figures(reports[tool]) for tool in TOOLS}
    names = list(by_tool["skein"])
    header = ["figure", *TOOLS, "llm / skein", "langgraph / skein"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in names:
        values = [by_tool[tool].get(name) for tool in TOOLS]
        ratios = []
        for other in values[1:]:
            skein = values[0]
            if is_ratio(name) or other is None or not skein:
                ratios.append("")
            else:
                ratios.append(f"{other / skein:.0f}x")
        cells = ["n/a" if v is None else str(v) for v in values]
        lines.append("| " + " | ".join([name, *cells, *ratios]) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", help="reuse (or create) the venv here")
    parser.add_argument("--skein-bin", help="the release skein binary (built if absent)")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        python = venv(args.venv or os.path.join(scratch, "venv"))
        env = dict(os.environ, LLM_USER_PATH=os.path.join(scratch, "llm-home"))
        binaries = release_binaries(scratch, args.skein_bin)
        reports = {"skein": run_json([binaries["anchors"]])}
        for tool in ("llm", "langgraph"):
            reports[tool] = run_json([python, os.path.join(HERE, "anchors_workloads.py"), tool], env=env)
        reports["skein"].update(skein_workloads.whole_process(binaries["skein"], binaries["anchors"], scratch))
        llm_bin = os.path.join(os.path.dirname(python), "llm")
        reports["llm"]["cli_ms"] = skein_workloads.startup_ms([llm_bin, "--version"], runs=10)
        reports["llm"]["cli_deep"] = llm_deep_turn(python, scratch)
        reports["langgraph"]["cli_ms"] = None  # no CLI of its own
        reports["machine"] = machine()

    print(json.dumps(reports["machine"]))
    print(table(reports))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=2)


if __name__ == "__main__":
    main()
