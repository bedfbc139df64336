"""Whole-process timings of the commands a user types (issue 13, item 5), warm caches, several
runs each (min and median), beside the in-process time of the same work.

    PYTHONPATH=src python benchmarks/bench_cli.py [--runs 7] [--json]

Goals (2-core machine, warm caches): ``opatlas estimate llemma_7b_4_2_2_P --json`` ≤ 0.5 s,
``opatlas estimate llama2-7b --search --gpus 64 --json`` ≤ 1.5 s (analytical ops; the same
search of upstream's example with measured ops too), ``opatlas --help`` ≤ 0.3 s.
A plain script, not a pytest-benchmark file: it times processes, which pytest-benchmark does
not; ``bench_estimate.py`` holds the in-process benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "help": (["--help"], 0.3),
    "estimate": (["estimate", "llemma_7b_4_2_2_P", "--json"], 0.5),
    "search": (["estimate", "llama2-7b", "--search", "--gpus", "64", "--json"], 1.5),
    "search-data": (["estimate", "llemma_7b_4_2_2_P", "--search", "--gpus", "64", "--json"],
                    1.5),
}


def time_process(args: list[str], runs: int) -> list[float]:
    """Wall seconds of ``opatlas ARGS`` as a fresh process, ``runs`` times (one warm-up run
    first fills every cache)."""
    exe = [sys.executable, "-m", "opatlas", *args]
    env = dict(os.environ)
    subprocess.run(exe, capture_output=True, check=True, env=env)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(exe, capture_output=True, check=True, env=env)
        out.append(time.perf_counter() - t0)
    return out


def time_in_process(name: str, runs: int) -> list[float] | None:
    """The same work through the API, in this (already warm) process."""
    from opatlas.estimate import estimate_step, load_config, search

    if name == "estimate":
        cfg = load_config("llemma_7b_4_2_2_P")
        work = lambda: estimate_step(cfg)  # noqa: E731
    elif name.startswith("search"):
        cfg = load_config("llama2-7b" if name == "search" else "llemma_7b_4_2_2_P")
        work = lambda: search(cfg, 64, 10)  # noqa: E731
    else:
        return None
    work()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        work()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import warnings

    from opatlas.cli import _show_warning

    warnings.showwarning = _show_warning  # as the command says them: one line each
    warnings.simplefilter("once")
    rows = []
    for name, (argv, goal) in COMMANDS.items():
        proc = time_process(argv, args.runs)
        inproc = time_in_process(name, args.runs)
        rows.append({"command": "opatlas " + " ".join(argv), "goal_s": goal,
                     "process_min_s": min(proc), "process_median_s": statistics.median(proc),
                     "in_process_min_s": min(inproc) if inproc else None,
                     "in_process_median_s": statistics.median(inproc) if inproc else None,
                     "runs": args.runs, "load_avg": os.getloadavg()[0]})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'command':<62} {'goal':>5} {'min':>6} {'median':>7} {'in-proc min/med':>16}")
    for r in rows:
        inp = "-" if r["in_process_min_s"] is None else \
            f"{r['in_process_min_s']:.3f}/{r['in_process_median_s']:.3f}"
        print(f"{r['command']:<62} {r['goal_s']:>5.2f} {r['process_min_s']:>6.3f} "
              f"{r['process_median_s']:>7.3f} {inp:>16}")
    print(f"load average (1 min): {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
