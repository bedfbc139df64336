"""`opatlas analyze` on Tenstorrent inputs at scale: a PyBuda netlist the size of the 961-op
BERT-large inference netlist (goal ≤ 3 s) and a 10 MB tt-metal profiler CSV (goal ≤ 5 s).

Neither big input is public, so both are generated from the real ones: the BERT-large
training netlist's forward epochs replicated (ops, queues and programs renamed per copy) to
964 ops, and the real profiler CSV's rows repeated to 10 MB. ``python
benchmarks/bench_tt_analyze.py DIR`` writes both files for timing the whole command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "tenstorrent"
BERT = DATA / "bert_large_train_encoders.netlist.yaml"
CSV = DATA / "ops_perf_results_2025_09_18_11_39_20.csv"
TARGET_OPS = 961
TARGET_BYTES = 10 * 1024 * 1024


def _renamed(name: str, suffix: str, names: set[str]) -> str:
    return f"{name}{suffix}" if name in names else name


def _copy_graph(graph: dict[str, Any], suffix: str, names: set[str]) -> dict[str, Any]:
    out = {}
    for key, val in graph.items():
        if isinstance(val, dict):
            val = {**val, "inputs": [_renamed(i, suffix, names) for i in val["inputs"]]}
            key = f"{key}{suffix}"
        out[key] = val
    return out


def big_netlist(path: Path, target_ops: int = TARGET_OPS) -> int:
    """Forward epochs of the BERT netlist, copied until ``target_ops`` ops; returns the count."""
    doc = yaml.load(BERT.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    fwd = [g for g in doc["graphs"] if g.startswith("fwd")]
    executes = {ins["execute"]["graph_name"]: ins["execute"]
                for prog in doc["programs"] for instrs in prog.values() for ins in instrs
                if isinstance(ins, dict) and "execute" in ins}
    names = set(doc["queues"]) | {op for g in fwd for op, v in doc["graphs"][g].items()
                                  if isinstance(v, dict)}
    graphs: dict[str, Any] = {}
    queues: dict[str, Any] = {}
    program: list[dict[str, Any]] = []
    ops, copy, epoch = 0, 0, 0
    while ops < target_ops:
        suffix = f"_c{copy}"
        for q, v in doc["queues"].items():
            queues[f"{q}{suffix}"] = {**v, "input": _renamed(v["input"], suffix, names)}
        for g in fwd:
            if ops >= target_ops:
                break
            name = f"fwd_0_{epoch}_temporal_epoch_{epoch}"
            graphs[name] = _copy_graph(doc["graphs"][g], suffix, names)
            ops += sum(isinstance(v, dict) for v in graphs[name].values())
            ex = executes[g]
            settings = {f"{q}{suffix}": s for q, s in (ex.get("queue_settings") or {}).items()}
            program.append({"execute": {"graph_name": name, "queue_settings": settings}})
            epoch += 1
        copy += 1
    out = {"devices": doc["devices"], "queues": queues, "graphs": graphs,
           "programs": [{"run_fwd": program}]}
    path.write_text(yaml.dump(out, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
                              sort_keys=False))
    return ops


def big_csv(path: Path, target_bytes: int = TARGET_BYTES) -> int:
    """The real profiler rows repeated (host timestamps shifted per copy) to ``target_bytes``;
    returns the row count."""
    df = pd.read_csv(CSV)
    copies = -(-target_bytes // CSV.stat().st_size)
    span = float(df["HOST START TS"].max() - df["HOST START TS"].min()) + 1
    parts = []
    for i in range(copies):
        part = df.copy()
        part["HOST START TS"] = part["HOST START TS"] + i * span
        part["HOST END TS"] = part["HOST END TS"] + i * span
        parts.append(part)
    big = pd.concat(parts, ignore_index=True)
    big.to_csv(path, index=False)
    return len(big)


def test_netlist_961_ops(benchmark, tmp_path):
    from opatlas.analyze import api

    path = tmp_path / "bert_large_inference_netlist.yaml"
    ops = big_netlist(path)
    a = benchmark.pedantic(lambda: api.analyze(path), rounds=3, iterations=1)
    assert len(a.rows) == ops >= TARGET_OPS
    benchmark.extra_info.update(ops=ops, epochs=a.summary["epochs"],
                                reblocking_edges=a.summary["edges"])


def test_profiler_csv_10mb(benchmark, tmp_path):
    from opatlas.analyze import api

    path = tmp_path / "ops_perf_results_10mb.csv"
    rows = big_csv(path)
    assert path.stat().st_size >= TARGET_BYTES
    a = benchmark.pedantic(lambda: api.analyze(path, extra={"ignore_signposts": True}),
                           rounds=3, iterations=1)
    assert len(a.rows) == rows - a.summary["signposts"]
    benchmark.extra_info.update(rows=rows, megabytes=round(path.stat().st_size / 2**20, 1))


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    print(big_netlist(out / "bert_large_inference_netlist.yaml"), "ops")
    print(big_csv(out / "ops_perf_results_10mb.csv"), "rows")
