"""Collectives with gloo in real processes (torchrun), nccl-tests bandwidth formulas."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from opatlas.ops.collectives import (
    COLLECTIVES,
    bandwidths,
    bus_factor,
    run_collectives,
    summarize_samples,
)
from opatlas.store import Store


def test_nccl_tests_bus_bandwidth_factors():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 4) == bus_factor("reduce_scatter", 4) == 0.75
    assert bus_factor("send_recv", 2) == 1.0
    alg, bus = bandwidths("all_reduce", 1e9, 0.01, 4)  # 1 GB in 10 ms on 4 ranks
    assert alg == pytest.approx(100e9) and bus == pytest.approx(150e9)


def test_bandwidth_above_link_peak_is_flagged_not_trusted():
    row = {"op": "all_reduce", "elements": 2**20, "bytes": 2**22, "world_size": 2,
           "dtype": "fp32", "backend": "gloo", "samples_ns": [1000, 1000, 1000], "correct": True}
    df = summarize_samples([row], link_peak_gbps=100.0)  # 4 MiB in 1 µs: ~4 TB/s
    assert df.loc[0, "status"] == "invalid" and "above the link peak" in df.loc[0, "message"]
    assert summarize_samples([row]).loc[0, "status"] == "ok"
    slow = {**row, "samples_ns": [4e8] * 3}  # 4 MiB in 0.4 s: 10.5 MB/s, shown as such
    msg = summarize_samples([slow], link_peak_gbps=0.001).loc[0, "message"]
    assert msg.startswith("bus bandwidth 0.0105 GB/s above the link peak 0.001 GB/s"), msg


ALL = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


# every collective on 2 ranks; on 4, those whose chunks depend on the world size beyond 2; the
# ops of an nproc share one launch (each starts nproc interpreters importing torch: ~5 s)
@pytest.mark.parametrize(("nproc", "ops"), [(2, ALL), (4, ("reduce_scatter", "all_to_all"))])
def test_every_collective_runs_with_gloo_and_checks_its_result(nproc, ops):
    assert ALL == COLLECTIVES
    df = run_collectives({op: [nproc * 256] for op in ops}, nproc, repeats=3, warmup=1)
    assert list(df["op"]) == list(ops) and list(df["elements"]) == [nproc * 256] * len(ops)
    for r in df.to_dict("records"):
        op = r["op"]
        assert r["status"] == "ok", (op, r["message"])
        assert r["world_size"] == nproc and len(r["samples_ns"]) == 3
        assert r["busbw_GBps"] == pytest.approx(
            r["bytes"] / r["median_ns"] * bus_factor(op, nproc))


def test_cli_records_collectives_in_the_store(tmp_path):
    store = tmp_path / "s.duckdb"
    out = run_cli("collectives", "all_reduce", "--nproc", "2", "--sizes", "512,4096",
                  "--repeats", "3", "--store", str(store), "--json", check=True).stdout
    rows = json.loads(out)
    assert [r["elements"] for r in rows] == [512, 4096]
    with Store(store, read_only=True) as st:
        df = st.results(op="collective.all_reduce")
    assert len(df) == 2 and (df["status"] == "ok").all() and (df["backend"] == "gloo").all()
    bad = run_cli("collectives", "all_gather", "--nproc", "2", "--sizes", "1")
    assert bad.returncode == 2 and "at least one element per rank" in bad.stderr
    assert "--sizes 1" in bad.stderr
