"""estimate-train-time compatibility: bundled A100 data, import, export round trip."""

from __future__ import annotations

import pandas as pd

from conftest import run_cli
from opatlas.store import Store
from opatlas.store.ett import bundled_dataset, export_ett, import_ett_samples, parse_sample_name

A100 = "NVIDIAA100-SXM4-80GB"


def test_sample_file_names():
    from pathlib import Path

    assert parse_sample_name(Path(f"{A100}_linear1_fp16.csv")) == {
        "gpu": A100, "op": "linear1", "prec": "fp16", "nodes": None, "gpn": None}
    assert parse_sample_name(Path(f"{A100}_allgather_large_fp16_2_4.csv"))["op"] == "allgather_large"
    assert parse_sample_name(Path(f"{A100}.csv")) is None


def test_bundled_operator_csv_round_trips_through_the_store(tmp_path):
    src = bundled_dataset() / "operator"
    with Store(tmp_path / "s.duckdb") as st:
        added = import_ett_samples(st, src)
        assert added[f"{A100}_linear1_fp16.csv"] == 1755 * 2  # fwd and bwd rows
        assert added[f"{A100}_firstStage_optimizer_fp16.csv"] == 584
        export_ett(st, tmp_path / "out")
        df = st.results(op="linear1")
    original = pd.read_csv(src / f"{A100}_linear1_fp16.csv")
    back = pd.read_csv(tmp_path / "out" / f"{A100}_linear1_fp16.csv")
    assert list(back.columns) == list(original.columns)
    key = ["mp", "b", "l", "dim"]
    merged = original.astype({k: int for k in key}).merge(back, on=key, suffixes=("", "_back"))
    assert len(merged) == len(original) == 1755
    assert (merged["F_dur(us)"] - merged["F_dur(us)_back"]).abs().max() < 1e-9
    assert (merged["B_dur(us)"] - merged["B_dur(us)_back"]).abs().max() < 1e-9
    # ops opatlas models get their analytical counts on import: linear1 = qkv
    row = df[(df["mp"] == 1) & (df["b"] == 2) & (df["l"] == 1024) & (df["dim"] == 2048)]
    fwd = row[row["pass"] == "fwd"]
    assert fwd["flops"].item() == 2 * 2048 * 2048 * 3 * 2048
    assert fwd["median_ns"].item() == 226.0 * 1000


def test_cli_import_bundled_nccl(tmp_path):
    store = tmp_path / "s.duckdb"
    out = run_cli("import", "ett-samples", str(bundled_dataset() / "nccl"), "--store", str(store),
                  check=True).stdout
    assert "added" in out
    with Store(store, read_only=True) as st:
        df = st.results(op="nccl.allreduce")
    assert {"shape", "nodes", "GPUsPerNode"} <= set(df.columns)
    assert (df["pass"] == "step").all() and (df["device"] == A100).all()
