"""New-user review of the Tenstorrent reshard tour (README step 8): leading dims fold into the
height, an identical memory config is free, shards must fit in L1, calibrated parameters on a
search bound are said, tt-metal's suite names, nonsense shapes refused, bfloat8_b's 1088-byte
tile, and wormhole-sim's single run said."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.errors import InvalidShape
from opatlas.tenstorrent import reshard as rs
from opatlas.tenstorrent.sim import WormholeParams, reshard_time_ns, simulate

README_ARGS = ("8x8", "BLOCK", "2x2", "HEIGHT")
README_NS = 42156.750415438226  # reshard_time_ns([1, 1, 1024, 2048], *README_ARGS), calibrated


# 1. every dim but the last folds into the height ----------------------------------------------

def test_leading_dims_fold_into_the_height():
    folded = reshard_time_ns([2, 1, 512, 2048], *README_ARGS)
    assert folded == pytest.approx(README_NS, rel=1e-12)
    assert reshard_time_ns([1, 1, 1024, 2048], *README_ARGS) == pytest.approx(README_NS)
    # the leading 2 is not dropped: half the height is a different reshard
    assert reshard_time_ns([1, 1, 512, 2048], *README_ARGS) < 0.6 * folded
    assert rs.shape_tiles([6, 1, 1024, 2048]) == (192, 64) == rs.shape_tiles([6144, 2048])


def test_the_backend_folds_leading_dims_too():
    from opatlas.ops import get_op
    from opatlas.tenstorrent.backend import WormholeSimBackend

    op, _ = get_op("reshard")
    b = WormholeSimBackend()
    vec = {"input_core_grid": "8x8", "input_shard_strategy": "BLOCK", "output_core_grid": "2x2",
           "output_shard_strategy": "HEIGHT", "dtype": "bfloat16"}
    ns = [b.measure(op, {**vec, "input_shape": s}, ["fwd"], 1, 0)["fwd"]
          for s in ([2, 1, 512, 2048], [1, 1, 1024, 2048])]
    assert ns == [[round(README_NS)], [round(README_NS)]]
    assert op.features({**vec, "input_shape": [2, 1, 512, 2048]})["height_tiles"] == 32


# 2. an identical memory config is the tensor unchanged: 0 ns ----------------------------------

def test_identical_memory_config_is_free_and_only_that():
    assert reshard_time_ns([1, 1, 4096, 4096], "8x8", "BLOCK", "8x8", "BLOCK") == 0.0
    # same grid, another strategy: a real reshard
    assert reshard_time_ns([1, 1, 4096, 4096], "8x8", "BLOCK", "8x8", "WIDTH") > 1000
    assert reshard_time_ns([1, 1, 4096, 4096], "8x8", "BLOCK", "8x4", "BLOCK") > 1000


def test_reblock_of_a_grid_onto_itself_is_0_ns_and_says_why(capsys):
    code, out, err = cli_in_process(capsys, "reblock", "--producer", "4x4", "--consumer", "4x4",
                                    "--height", "64", "--width", "64")
    assert code == 0, err
    got = json.loads(out)
    assert got["predicted_ns"] == 0.0
    assert "to_memory_config returns the tensor unchanged" in got["note"]
    code, out, _ = cli_in_process(capsys, "reblock", "--producer", "4x4", "--consumer", "2x4",
                                  "--height", "64", "--width", "64")
    assert json.loads(out)["predicted_ns"] > 1000 and "note" not in json.loads(out)


def test_backend_identity_needs_the_same_orientation():
    from opatlas.ops import get_op
    from opatlas.tenstorrent.backend import WormholeSimBackend

    op, _ = get_op("reshard")
    vec = {"input_shape": [1, 1, 256, 256], "input_core_grid": "4x4",
           "output_core_grid": "4x4", "input_shard_strategy": "BLOCK",
           "output_shard_strategy": "BLOCK", "dtype": "bfloat16",
           "input_shard_orientation": "ROW_MAJOR", "output_shard_orientation": "ROW_MAJOR"}
    b = WormholeSimBackend()
    assert b.measure(op, vec, ["fwd"], 1, 0) == {"fwd": [0]}
    other = {**vec, "output_shard_orientation": "COL_MAJOR"}
    assert b.measure(op, other, ["fwd"], 1, 0)["fwd"][0] > 500


# 3. shards must fit in a core's L1 -----------------------------------------------------------

def test_a_shard_larger_than_l1_is_refused_with_its_bytes():
    with pytest.raises(InvalidShape, match=r"2097152 bytes on each core.*1499136 bytes"):
        reshard_time_ns([1, 1, 8192, 8192], "8x8", "BLOCK", "8x8", "HEIGHT")
    # 1 MiB a core (the README's example on the 2x2 side) fits
    assert reshard_time_ns([1, 1, 1024, 2048], *README_ARGS) > 0
    # the sweep's rule keeps its seed constants (1 MiB a core, 1 byte a bfloat8_b datum)
    assert rs.fits_l1(32, 32, 1, 1, "bfloat8_b") and not rs.fits_l1(33, 32, 1, 1, "bfloat8_b")


def test_reblock_cli_refuses_a_tensor_that_does_not_fit(capsys):
    code, _, err = cli_in_process(capsys, "reblock", "--producer", "1x1", "--consumer", "1x1",
                                  "--height", "1000", "--width", "1000")
    one_error(code, err, "--producer 1x1", "2048000000 bytes on each core", "1499136 bytes")


# 4. calibrated parameters on a search bound are said ------------------------------------------

AT_BOUNDS = WormholeParams(port_bytes_per_cycle=63.99999001157461,
                           mesh_req_hop_ns=0.00010000035103113872)


def _calibration():
    from opatlas.tenstorrent.calibrate import SPLITS, Calibration, at_bounds

    rep = pd.DataFrame({"in_grid": ["3x1", "4x1"], "out_grid": ["1x1", "1x2"],
                        "in": ["BLOCK", "BLOCK"], "out": ["BLOCK", "WIDTH"],
                        "hw_ns_per_tile": [30.0, 40.0], "gather_degree": [3, 4],
                        "sim_ns_per_tile": [33.0, 36.0], "ratio": [1.1, 0.9]})
    return Calibration(SPLITS["x"], AT_BOUNDS, rep, rep, at_bounds(AT_BOUNDS))


def test_parameters_at_a_search_bound_are_found():
    from opatlas.tenstorrent.calibrate import at_bounds

    hits = {(b.name, b.bound, b.side) for b in at_bounds(AT_BOUNDS)}
    assert hits == {("port_bytes_per_cycle", 64.0, "upper"),
                    ("mesh_req_hop_ns", 1e-4, "lower")}
    assert at_bounds(WormholeParams(port_bytes_per_cycle=63.0)) == []


def test_calibrate_warns_of_bounds_in_stderr_report_and_json(capsys, tmp_path, monkeypatch):
    from opatlas.tenstorrent import calibrate as cal_mod
    from opatlas.tenstorrent.calibrate import format_report

    monkeypatch.setattr(cal_mod, "calibrate", lambda *a, **k: _calibration())
    out = tmp_path / "wh2.json"
    code, _, err = cli_in_process(capsys, "calibrate", "--split", "x", "--out", str(out))
    assert code == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("opatlas: warning")]
    assert len(warnings) == 2
    assert "port_bytes_per_cycle" in warnings[0] and "upper bound 64" in warnings[0]
    assert "mesh_req_hop_ns" in warnings[1] and "lower bound 0.0001" in warnings[1]
    assert all("not a physical bandwidth" in w for w in warnings)
    saved = json.loads(out.read_text())["calibration_notes"]["at_search_bound"]
    assert saved["port_bytes_per_cycle"]["bound"] == 64.0
    assert "at the upper bound" in format_report(_calibration())
    # the file still loads as parameters, its notes read past in silence
    assert WormholeParams.load(out) == AT_BOUNDS
    assert "ignoring" not in capsys.readouterr().err


# 5. tt-metal's suite names -------------------------------------------------------------------

def test_export_writes_tt_metal_suite_names_and_imports_back(tmp_path):
    from opatlas.spec import resolve_spec
    from opatlas.store import Store
    from opatlas.sweep import expand
    from opatlas.tenstorrent.ttjson import export_tt, import_tt

    vecs = [v for v in expand(resolve_spec("reshard"), where="input_core_grid == '1x4' and "
                              "output_core_grid == '4x1'").vectors
            if v.params["input_shape"][2] <= 128][:6]
    files = export_tt(vecs, tmp_path / "vx")
    doc = json.loads(files[0].read_text())
    assert list(doc) == ["1x4-4x1-DataType.BFLOAT16"]
    suite = doc["1x4-4x1-DataType.BFLOAT16"]
    assert {v["suite_name"] for v in suite.values()} == {"1x4-4x1-DataType.BFLOAT16"}
    assert rs.expand_suite((1, 4), (4, 1)).name == "1x4-4x1-DataType.BFLOAT16"
    # results under either spelling of the suite import (the import matches by input_hash)
    (tmp_path / "res").mkdir()
    results = [{"suite_name": name, "input_hash": h, "status": "TestStatus.PASS",
                "device_perf": {"DEVICE KERNEL DURATION [ns]": 900.0, "runs": 10}}
               for h, name in zip(suite, ["1x4-4x1-bfloat16", "1x4-4x1-DataType.BFLOAT16"] * 3,
                                  strict=False)]
    (tmp_path / "res" / "r.json").write_text(json.dumps(results))
    with Store(tmp_path / "s.duckdb") as st:
        assert import_tt(st, tmp_path / "vx", tmp_path / "res") == len(vecs)


# 6. nonsense shapes --------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [[1, 1, -1024, 2048], [1, 1, 0, 2048], [2048],
                                   [1, 1.5, 64, 64]])
def test_nonsense_shapes_are_invalid_shapes_naming_the_shape(shape):
    with pytest.raises(InvalidShape, match=r"reshard shape \[") as info:
        reshard_time_ns(shape, *README_ARGS)
    assert str(shape) in str(info.value)


# 7. a bfloat8_b page is its 1088-byte tile ----------------------------------------------------

def test_bfloat8_b_pages_are_1088_bytes():
    assert rs.TILE_BYTES == {"bfloat16": 2048, "bfloat8_b": 1088, "float32": 4096}
    p = WormholeParams()
    r = simulate(16, 8, (1, 1), "BLOCK", (2, 4), "BLOCK", p, "bfloat8_b")
    assert r.src_ns == pytest.approx(16 * 8 * 1088 / (2 * p.port_bw))
    bf16 = simulate(16, 8, (1, 1), "BLOCK", (2, 4), "BLOCK", p)
    assert bf16.src_ns == pytest.approx(16 * 8 * 2048 / (2 * p.port_bw))  # unchanged


# 8. wormhole-sim says it runs each vector once ------------------------------------------------

def test_sim_backend_says_once_that_repeats_are_not_run(capsys):
    from opatlas.ops import get_op
    from opatlas.tenstorrent.backend import WormholeSimBackend

    op, _ = get_op("reshard")
    vec = {"input_shape": [1, 1, 1024, 2048], "input_core_grid": "8x8",
           "input_shard_strategy": "BLOCK", "output_core_grid": "2x2",
           "output_shard_strategy": "HEIGHT", "dtype": "bfloat16"}
    quiet = WormholeSimBackend()
    quiet.measure(op, vec, ["fwd"], 1, 0)
    assert "deterministic" not in capsys.readouterr().err
    b = WormholeSimBackend()
    assert b.measure(op, vec, ["fwd"], 10, 3) == {"fwd": [round(README_NS)]}
    b.measure(op, vec, ["fwd"], 10, 3)
    err = capsys.readouterr().err
    assert err.count("deterministic") == 1
    assert "records repeats=1" in err and "10 repeats and 3 warm-up" in err
