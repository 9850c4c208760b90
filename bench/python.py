"""skein's Python package beside `llm`'s Python API, same workload, one run:
a 500-turn conversation logged turn by turn to SQLite, with each tool's
echo model, timing every turn; the figure is the median turn over the last
50 (depth 450 to 500 turns, 900 to 1,000 messages).

- skein: `skein.Model("echo", store=store).conversation()`, then
  `conversation.prompt(question).text()` per turn (the turn and its
  bookmark move are one transaction);
- llm 0.36 with llm-echo 0.5: `model.conversation()`, `conversation.prompt`,
  `response.text()`, `response.log_to_db(db)`; llm-echo answers a JSON
  prompt's `raw` field, given the same text skein's echo model answers.

Run it in a virtual environment holding both (not in CI):

    venv=$(scripts/python-clients)                       # llm 0.36 + llm-echo
    scripts/python-package                               # builds the wheel
    "$venv/bin/pip" install --force-reinstall --no-deps "${CARGO_TARGET_DIR:-target}"/wheels/skein-py/skein-*.whl
    "$venv/bin/python" bench/python.py [--turns 500] [--json out.json]

The wheel scripts/python-package builds is the dev profile (unoptimised
Rust); `maturin build --release -m crates/skein-py/Cargo.toml` gives the
figures a user's `pip install` gets.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time


def question(i: int) -> str:
    return f"question {i}: " + "lorem ipsum dolor sit amet " * 7


def reply(i: int, history: int) -> str:
    # Byte for byte what skein's echo model answers.
    return f'echo: "{question(i)}" (history: {history} messages, system: no, tools: 0)'


def run_skein(directory: str, turns: int) -> list[float]:
    import skein

    store = skein.Store(os.path.join(directory, "skein.db"))
    conversation = skein.Model("echo", store=store).conversation()
    times = []
    for i in range(turns):
        started = time.perf_counter()
        text = conversation.prompt(question(i)).text()
        times.append(time.perf_counter() - started)
        assert text == reply(i, 2 * i + 1), text
    return times


def run_llm(directory: str, turns: int) -> list[float]:
    import llm
    import sqlite_utils
    from llm.migrations import migrate

    db = sqlite_utils.Database(os.path.join(directory, "llm.db"))
    migrate(db)
    conversation = llm.get_model("echo").conversation()
    times = []
    for i in range(turns):
        prompt = json.dumps({"prompt": question(i), "raw": reply(i, 2 * i + 1)})
        started = time.perf_counter()
        response = conversation.prompt(prompt)
        response.text()
        response.log_to_db(db)
        times.append(time.perf_counter() - started)
    return times


def figures(times: list[float]) -> dict[str, float]:
    last = times[-50:]
    return {
        "first_50_median_ms": round(statistics.median(times[:50]) * 1e3, 3),
        "last_50_median_ms": round(statistics.median(last) * 1e3, 3),
        "last_50_mean_ms": round(statistics.fmean(last) * 1e3, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        skein_times = run_skein(directory, args.turns)
        llm_times = run_llm(directory, args.turns)
    import llm
    import skein

    result = {
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg()[0],
        },
        "turns": args.turns,
        "skein": {"version": skein.__version__, **figures(skein_times)},
        "llm": {"version": getattr(llm, "__version__", "0.36"), **figures(llm_times)},
    }
    ratio = result["llm"]["last_50_median_ms"] / result["skein"]["last_50_median_ms"]
    result["llm_over_skein_at_depth"] = round(ratio, 1)
    print(f"logged turn at depth {args.turns - 50}-{args.turns} turns (median of the last 50):")
    print(f"  skein (Python) {result['skein']['last_50_median_ms']:8.3f} ms")
    print(f"  llm 0.36       {result['llm']['last_50_median_ms']:8.3f} ms")
    print(f"  llm / skein    {ratio:8.1f}x   (load average {result['machine']['load_average']:.2f})")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
