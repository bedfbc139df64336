"""Tenstorrent follow-ups: simulator parameters identify a wormhole-sim result, a sim store is
analysed with the Wormhole catalog entry's peaks, real-card imports carry their minimum bytes,
reshards (L1 to L1) get no DRAM bound, and a defaulted parameter is said once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import cli_in_process

# one small suite of the built-in reshard sweep (a few hundred vectors, well under a second)
WHERE = ("input_core_grid == '2x2' and output_core_grid == '1x1' "
         "and input_shard_strategy == 'BLOCK'")
BUNDLED = Path(__file__).parents[1] / "src" / "opatlas" / "data" / "tt-wormhole" / \
    "wormhole_params.json"


def _params_file(path: Path, **changes: float) -> Path:
    """The bundled calibrated parameters with ``changes``, written to ``path``."""
    raw = json.loads(BUNDLED.read_text())
    path.write_text(json.dumps({**raw, **changes}))
    return path


def _run(capsys, store: Path, *opts: str) -> tuple[str, str]:
    code, out, err = cli_in_process(capsys, "run", "reshard", "--backend", "wormhole-sim",
                                    *opts, "--where", WHERE, "--store", str(store))
    assert code == 0, err
    return out, err


def _results(store: Path):
    from opatlas.store import Store

    with Store(store, read_only=True) as st:
        return st.results(expand_params=False)


# ------------------------------------------------------------ 1. params identify a result
def test_a_resume_with_other_simulator_params_does_not_reuse_the_first_runs_rows(
        tmp_path, capsys):
    store = tmp_path / "wh.duckdb"
    a = _params_file(tmp_path / "a.json", launch_ns=1000.0)
    b = _params_file(tmp_path / "b.json", launch_ns=11000.0)  # launch adds to every time
    out, _ = _run(capsys, store, "--backend-opt", f"params={a}")
    n = int(out.split(" vectors")[0].split()[-1])
    assert "0 already in the store" in out and n > 100
    out, err = _run(capsys, store, "--backend-opt", f"params={b}")
    assert f"0 already in the store; ran {n} " in out  # not the first run's timings
    res = _results(store)
    assert len(res) == 2 * n
    by = {d: g.set_index("vector_id")["median_ns"] for d, g in res.groupby("device")}
    assert sorted(by) == sorted(f"wormhole_b0-sim-{p}" for p in (_fp(a), _fp(b)))
    diff = by[f"wormhole_b0-sim-{_fp(b)}"] - by[f"wormhole_b0-sim-{_fp(a)}"]
    assert np.allclose(diff.to_numpy(), 10000.0, atol=1.0)
    assert f"filed under device wormhole_b0-sim-{_fp(b)}" in err
    out, _ = _run(capsys, store, "--backend-opt", f"params={b}")  # the same params resume
    assert f"{n} already in the store; ran 0" in out


def _fp(path: Path) -> str:
    from opatlas.tenstorrent.sim import WormholeParams

    return WormholeParams.load(path).fingerprint()


def test_the_bundled_params_keep_the_device_name_of_existing_stores(tmp_path, capsys):
    """A store run with the default (bundled calibrated) parameters is filed, and resumed,
    under ``wormhole_b0-sim`` as before; the bundled file named explicitly is the same."""
    store = tmp_path / "wh.duckdb"
    out, _ = _run(capsys, store)
    n = int(out.split(" vectors")[0].split()[-1])
    copy = _params_file(tmp_path / "same.json")
    out, err = _run(capsys, store, "--backend-opt", f"params={copy}")
    assert f"{n} already in the store; ran 0" in out and "filed under" not in err
    assert set(_results(store)["device"]) == {"wormhole_b0-sim"}


def test_the_fingerprint_reads_every_value_as_a_number():
    from opatlas.tenstorrent.sim import WormholeParams

    assert WormholeParams(launch_ns=500).fingerprint() == \
        WormholeParams(launch_ns=500.0).fingerprint()
    assert WormholeParams(launch_ns=500).fingerprint() != \
        WormholeParams(launch_ns=501).fingerprint()


# -------------------------------------------------------- 2. the sim device's catalog peaks
def test_a_sim_store_alone_is_analysed_with_the_wormhole_catalog_peaks(tmp_path, capsys):
    from opatlas.devices import find_device

    store = tmp_path / "wh.duckdb"
    _run(capsys, store, "--backend-opt",
         f"params={_params_file(tmp_path / 'p.json', launch_ns=900.0)}")
    _run(capsys, store)  # two sim devices: each resolves to the catalog entry
    wormhole = find_device("wormhole_b0")
    for device in sorted(set(_results(store)["device"])):
        code, out, err = cli_in_process(capsys, "analyze", str(store), "--device", device,
                                        "--json")
        assert code == 0, err
        summary = json.loads(out)["summary"]
        assert summary["peak_flops_s"] == wormhole.peak("bf16")  # not ~1 FLOP/s
        assert summary["peak_bytes_s"] == wormhole.bandwidth
        assert "peaks" not in summary  # not the empirical ones
        said = [n for n in summary["notes"] if n.startswith(f"{device}: simulated timings")]
        assert len(said) == 1 and wormhole.name in said[0] and "assumed" in said[0]
        assert said[0] in err and "not in the catalog" not in err


def test_a_ttnn_cards_store_is_analysed_with_the_wormhole_catalog_peaks(tmp_path, capsys):
    """ttnn files a card's results under ``wormhole_b0-card<N>``: its chip's catalog peaks,
    said, not the empirical ones of a device the catalog does not know."""
    from opatlas.devices import find_device
    from opatlas.store import Store

    store = tmp_path / "card.duckdb"
    _run(capsys, store)
    with Store(store) as st:  # as if measured by --backend ttnn on card 1
        st.con.execute("UPDATE results SET device = 'wormhole_b0-card1'")
    code, out, err = cli_in_process(capsys, "analyze", str(store), "--json")
    assert code == 0, err
    summary = json.loads(out)["summary"]
    wormhole = find_device("wormhole_b0")
    assert summary["peak_flops_s"] == wormhole.peak("bf16")
    assert summary["peak_bytes_s"] == wormhole.bandwidth
    said = [n for n in summary["notes"] if n.startswith("wormhole_b0-card1: a card's timings")]
    assert len(said) == 1 and wormhole.name in said[0]
    assert "not in the catalog" not in err


# ------------------------------------------------------- 3. imported rows' minimum bytes
def _imported_store(tmp_path: Path, kernel_ns: float) -> Path:
    """One real-card reshard result of a [1, 1, 64, 96] bfloat16 tensor, imported."""
    from opatlas.spec import resolve_spec
    from opatlas.store import Store
    from opatlas.sweep import expand
    from opatlas.tenstorrent.ttjson import export_tt, import_tt

    vecs = [v for v in expand(resolve_spec("reshard"), where=(
        "input_core_grid == '1x1' and output_core_grid == '1x2'")).vectors
        if v.params["input_shape"] == [1, 1, 64, 96]][:1]
    assert vecs and vecs[0].params["dtype"] == "bfloat16"
    suite = json.loads(export_tt(vecs, tmp_path / "v")[0].read_text())
    (h,) = next(iter(suite.values()))
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "r.json").write_text(json.dumps([
        {"input_hash": h, "status": "TestStatus.PASS",
         "device_perf": {"DEVICE KERNEL DURATION [ns]": kernel_ns, "runs": 5}}]))
    store = tmp_path / "card.duckdb"
    with Store(store) as st:
        assert import_tt(st, tmp_path / "v", tmp_path / "r") == 1
    return store


def test_an_imported_reshard_row_has_its_minimum_bytes(tmp_path):
    row = _results(_imported_store(tmp_path, 1500.0)).iloc[0]
    # 64 x 96 bfloat16 elements (2 bytes) read from the input shards, as many written
    assert row["min_bytes"] == 64 * 96 * 2 + 64 * 96 * 2 == 24576
    assert row["flops"] == 0.0 and row["device"] == "wormhole_b0"


def test_a_reshard_gets_no_dram_bound_however_fast(tmp_path, capsys):
    """A reshard moves L1 to L1 over the NoC: 24,576 bytes in 20 ns (1.2 TB/s, over the
    DRAM's peak) is no measurement under a bound."""
    store = _imported_store(tmp_path, 20.0)
    code, out, err = cli_in_process(capsys, "analyze", str(store), "--json")
    assert code == 0, err
    doc = json.loads(out)
    row = doc["rows"][0]
    assert row["bytes"] == 24576 and row["bound_time_s"] is None
    assert row["limiter"] == "communication" and "below bound" not in row["flags"]
    assert any(n.startswith("reshard: L1 to L1") for n in doc["summary"]["notes"])
    assert doc["summary"]["utilization"] is None and "All-NaN" not in err


def test_an_unknown_device_keeps_the_peak_of_its_own_dtype_name(tmp_path, capsys):
    """An empirical device's peak is filed under the store's dtype name (bfloat16), not the
    catalog's (bf16): found, with no note that it lacks it."""
    from opatlas.store import ResultRow, Store

    rows = [ResultRow(vector_id=f"{i:056x}", op="linear", params_json=json.dumps(
        {"tokens": 64 * (i + 1), "in_features": 64, "out_features": 64, "dtype": "bfloat16"}),
        pass_="fwd", backend="x", device="mychip", dtype="bfloat16", status="ok", repeats=1,
        median_ns=1000.0 * (i + 1), mean_ns=1000.0 * (i + 1), flops=1e6 * (i + 1),
        min_bytes=1e4 * (i + 1)) for i in range(3)]
    with Store(tmp_path / "s.duckdb") as st:
        st.add_results(rows)
    code, out, err = cli_in_process(capsys, "analyze", str(tmp_path / "s.duckdb"), "--json")
    assert code == 0, err
    summary = json.loads(out)["summary"]
    assert summary["peak_flops_s"] == pytest.approx(1e12)  # 1e6 FLOPs in 1 µs
    assert not [n for n in summary["notes"] if "no peak FLOP/s" in n]


# ------------------------------------------------------------ 4. defaults said once
def test_defaulted_simulator_params_are_said_once_per_command(tmp_path, capsys):
    raw = json.loads(BUNDLED.read_text())
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({k: v for k, v in raw.items() if k != "tx_ns"}))
    _, err = _run(capsys, tmp_path / "s.duckdb", "--backend-opt", f"params={partial}")
    assert err.count("first-principles defaults are used") == 1
    assert err.count("filed under device") == 1


# ------------------------------------------- fit --recipe reshard: one device's rows at a time
def test_fit_reshard_never_pools_two_devices_of_one_store(capsys, tmp_path):
    store = tmp_path / "two.duckdb"
    _run(capsys, store)
    _run(capsys, store, "--backend-opt", f"params={_params_file(tmp_path / 'p.json', launch_ns=11000.0)}")
    devices = sorted(set(_results(store)["device"]))
    assert len(devices) == 2 and devices[0] == "wormhole_b0-sim"
    code, _, err = cli_in_process(capsys, "fit", "--data", str(store), "--recipe", "reshard")
    assert code == 2 and f"holds reshards of 2 devices ({', '.join(devices)})" in err
    assert "--device" in err
    fitted = {}
    for d in devices:
        code, out, err = cli_in_process(capsys, "fit", "--data", str(store), "--recipe",
                                        "reshard", "--device", d, "--json")
        assert code == 0, err
        fitted[d] = {(m["in_grid"], m["out_grid"], m["group"]): m["intercept"]
                     for m in json.loads(out)}
    # the same groups, each device's own line: the slower params' intercepts are higher
    assert fitted[devices[0]].keys() == fitted[devices[1]].keys()
    assert all(fitted[devices[1]][g] > fitted[devices[0]][g] for g in fitted[devices[0]])
    code, _, err = cli_in_process(capsys, "fit", "--data", str(store), "--recipe", "reshard",
                                  "--device", "n150")
    assert code == 2 and "holds reshards of wormhole_b0-sim" in err
