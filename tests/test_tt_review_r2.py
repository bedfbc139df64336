"""Review round 2 of the Tenstorrent tools: reblocking priced with the calibrated simulator,
an honest tt-sweep import, empty --where selections refused by sweep expand/export-tt, the
reshard fit's models shown, calibrate's found header, per-part counts labelled, and the
parameters variable named."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.spec import spec_from_mapping
from opatlas.store import Store
from opatlas.sweep import expand
from opatlas.sweep.builtin import builtin_spec

REBLOCK_2X2_TO_1X1 = ("--producer", "2x2", "--consumer", "1x1", "--height", "4", "--width", "4")
CALIBRATED_NS = 974.300019331632    # reshard_time_ns([1, 1, 128, 128], '2x2', BLOCK, '1x1', BLOCK)
FIRST_PRINCIPLES_NS = 1331.718490227767  # the same under WormholeParams()


# 1. reblock and the netlist report use the calibrated parameters -----------------------------

def test_reblock_prices_with_the_calibrated_parameters(capsys):
    from opatlas.tenstorrent.sim import reshard_time_ns

    golden = reshard_time_ns([1, 1, 128, 128], "2x2", "BLOCK", "1x1", "BLOCK")
    assert golden == pytest.approx(CALIBRATED_NS, rel=1e-9)
    code, out, err = cli_in_process(capsys, "reblock", *REBLOCK_2X2_TO_1X1)
    assert code == 0, err
    got = json.loads(out)
    assert got["predicted_ns"] == pytest.approx(golden, rel=1e-12)
    assert got["params"] == "bundled calibrated"


def test_reblock_params_file_and_its_errors(capsys, tmp_path):
    from opatlas.tenstorrent.sim import WormholeParams

    first = tmp_path / "first.json"
    WormholeParams().save(first)
    code, out, err = cli_in_process(capsys, "reblock", *REBLOCK_2X2_TO_1X1, "--params", str(first))
    assert code == 0, err
    got = json.loads(out)
    assert got["predicted_ns"] == pytest.approx(FIRST_PRINCIPLES_NS, rel=1e-9)
    assert got["params"] == str(first)
    missing = tmp_path / "nope.json"
    one_error(*cli_in_process(capsys, "reblock", *REBLOCK_2X2_TO_1X1, "--params",
                              str(missing))[::2], f"--params {missing}", "not a parameters file")


def test_the_netlist_reblocking_edge_uses_the_calibrated_parameters():
    from opatlas.tenstorrent.pybuda_estimate import _simulated

    ns, note = _simulated(4, 4, (2, 2), (1, 1))  # PyBuda's rows x columns: 2x2 -> 1x1
    assert ns == pytest.approx(CALIBRATED_NS, rel=1e-9)
    assert "calibrated" in note


# 2. tt-sweep import says what it skipped, why rows are errors, and what it added -----------

def _exported(tmp_path):
    from opatlas.tenstorrent.ttjson import export_tt

    vecs = [v for v in expand(builtin_spec("reshard"), where=(
        "input_core_grid == '1x1' and output_core_grid == '1x2'")).vectors][:4]
    suite = json.loads(export_tt(vecs, tmp_path / "v")[0].read_text())
    return list(next(iter(suite.values())))


def _results(tmp_path, statuses):
    """Result JSON of the exported vectors, with these statuses (None: PASS, no duration),
    and two results of vectors that were never exported."""
    hashes = _exported(tmp_path)
    rows = [{"input_hash": h, "status": s or "TestStatus.PASS",
             "device_perf": {} if s is None else {"DEVICE KERNEL DURATION [ns]": 1000.0 + i,
                                                  "runs": 5}}
            for i, (h, s) in enumerate(zip(hashes, statuses, strict=True))]
    rows += [{"input_hash": f"deadbeef{i}", "status": "TestStatus.PASS",
              "device_perf": {"DEVICE KERNEL DURATION [ns]": 5.0}} for i in range(2)]
    (tmp_path / "r").mkdir(exist_ok=True)
    (tmp_path / "r" / "r.json").write_text(json.dumps(rows))


def _by_status(store):
    with Store(store) as st:
        df = st.results(op="reshard", expand_params=False)
    return df.sort_values("vector_id").reset_index(drop=True)


def test_import_tt_counts_skips_and_explains(tmp_path, capsys):
    from opatlas.tenstorrent.ttjson import import_tt

    store = tmp_path / "s.duckdb"
    _results(tmp_path, ["TestStatus.PASS", "TestStatus.PASSED_WEIRD", None,
                        "TestStatus.FAIL_L1_OUT_OF_MEM"])
    with Store(store) as st:
        assert import_tt(st, tmp_path / "v", tmp_path / "r") == 4
    err = capsys.readouterr().err
    assert "skipped 2 results whose input_hash matches no vector" in err and "deadbeef0" in err
    assert "1 result with a status opatlas does not know recorded as error" in err
    assert "1 PASS result without a device kernel duration recorded as error" in err
    df = _by_status(store)
    errors = df[df["status"] == "error"]["message"].tolist()
    assert sorted(m.split(":")[0].split(" (")[0] for m in errors) == [
        "TestStatus.PASS without a device kernel duration",
        "tt-metal status not known to opatlas"]
    assert any("TestStatus.PASSED_WEIRD" in m for m in errors)
    before = df[["vector_id", "status", "created_at"]]

    # the same files again: nothing added, nothing swapped, and said so
    code, out, err = cli_in_process(capsys, "import", "tt-sweep", "--vectors", str(tmp_path / "v"),
                                    "--results", str(tmp_path / "r"), "--store", str(store))
    assert code == 0, err
    assert f"added 0 rows to {store}" in out
    assert "1 vector recorded already" in err and "3 failures recorded already" in err
    pd.testing.assert_frame_equal(_by_status(store)[["vector_id", "status", "created_at"]],
                                  before)


def test_import_tt_replacing_a_failure_is_not_counted_as_added(tmp_path, capsys):
    from opatlas.tenstorrent.ttjson import import_tt

    store = tmp_path / "s.duckdb"
    _results(tmp_path, ["TestStatus.PASS", "TestStatus.FAIL_L1_OUT_OF_MEM",
                        "TestStatus.PASS", "TestStatus.PASS"])
    with Store(store) as st:
        assert import_tt(st, tmp_path / "v", tmp_path / "r") == 4
    _results(tmp_path, ["TestStatus.PASS"] * 4)  # the oom vector passes on a rerun
    capsys.readouterr()
    with Store(store) as st:
        assert import_tt(st, tmp_path / "v", tmp_path / "r") == 0
    assert "1 failed row replaced" in capsys.readouterr().err
    df = _by_status(store)
    assert len(df) == 4 and (df["status"] == "ok").all()


# 3. sweep expand / export-tt refuse a --where that selects nothing, as run does -------------

def test_sweep_expand_and_export_tt_refuse_an_empty_where(capsys, tmp_path):
    where = "input_core_grid == '2X2'"
    one_error(*cli_in_process(capsys, "sweep", "expand", "reshard", "--json", "--where",
                              where)[::2], f"--where {where!r}", "selects no valid vector")
    out = tmp_path / "vz"
    one_error(*cli_in_process(capsys, "sweep", "export-tt", "reshard", str(out), "--where",
                              "output_core_grid == '1X1'")[::2],
              "--where \"output_core_grid == '1X1'\"", "selects no valid vector",
              "nothing written")
    assert not out.exists()


# 4. fit --recipe reshard without --out shows the models and says they are not saved --------

def test_reshard_fit_without_out_prints_the_models(capsys, tmp_path):
    src = tmp_path / "runs.csv"
    pd.DataFrame([{"kernel": k, "bytes": n * 1024, "ns": 500 + c * n * 1024}
                  for k, c in (("a", 0.1), ("b", 0.2)) for n in range(1, 11)]).to_csv(
        src, index=False)
    code, out, err = cli_in_process(capsys, "fit", "--data", str(src), "--recipe", "reshard",
                                    "--group-by", "kernel", "--size", "bytes", "--time", "ns")
    assert code == 0, err
    assert re.search(r"^\s*a\s+0\.1\s+500\.0\s+1\.0000\s", out, re.M), out
    assert re.search(r"^\s*b\s+0\.2\s+500\.0\s+1\.0000\s", out, re.M), out
    assert "2 models; in-sample median r² 1.0000" in out
    assert "the 2 models are not saved: give --out" in err


# 5. calibrate names the header it found -----------------------------------------------------

def test_calibrate_names_the_header_found(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c\n1,2,3\n")
    line = one_error(*cli_in_process(capsys, "calibrate", "--models", str(bad), "--out",
                                     str(tmp_path / "p.json"))[::2],
                     str(bad), "lacks the columns in_grid", "(found: a, b, c;")
    assert "(header: in_grid" not in line
    assert not (tmp_path / "p.json").exists()


# 6. per-part counts of the vectorised reshard expansion are labelled -------------------------

def test_a_part_of_reshard_does_not_pass_its_valid_count_as_the_total(capsys):
    args = ("sweep", "expand", "reshard", "--parts", "2", "--part", "1", "--where",
            "input_core_grid == '2x2'")
    code, out, err = cli_in_process(capsys, *args, "--json")
    assert code == 0, err
    assert json.loads(out) == {"total": None, "valid": 25966, "invalid": {},
                               "invalid_counted": False}
    assert "run without --parts" in err
    code, out, err = cli_in_process(capsys, *args)
    assert code == 0, err
    assert "25966 valid in part 1 of 2 (invalid points not counted)" in out
    assert "25966 vectors" not in out


def test_whole_sweeps_and_generic_parts_keep_their_counts(capsys):
    code, out, err = cli_in_process(capsys, "sweep", "expand", "reshard", "--json", "--where",
                                    "input_core_grid == '1x1' and output_core_grid == '2x1'")
    assert code == 0 and "not counted" not in err, err
    assert json.loads(out)["total"] == 9 * 249 * 249
    spec = spec_from_mapping({"op": "linear", "params": {"b": [1], "l": [4], "dim": [6, 8],
                                                         "mp": [1, 2, 4]}})
    part = expand(spec, parts=2, part=1)  # points 0, 2, 4: (6, 1), (6, 4), (8, 2)
    assert part.uncounted is None
    assert part.summary() == {"total": 3, "valid": 2, "invalid": {"dim % mp != 0": 1}}


# 7. the parameters variable is named ---------------------------------------------------------

@pytest.mark.parametrize("via", ["env", "option"])
def test_a_bad_parameters_file_names_where_it_came_from(capsys, tmp_path, monkeypatch, via):
    store = tmp_path / "s.duckdb"
    opts = ["--where", "input_core_grid == '4x4'", "--store", str(store)]
    if via == "env":
        monkeypatch.setenv("OPATLAS_WORMHOLE_PARAMS", "nope.json")
        named = "OPATLAS_WORMHOLE_PARAMS=nope.json"
    else:
        monkeypatch.delenv("OPATLAS_WORMHOLE_PARAMS", raising=False)
        opts += ["--backend-opt", "params=nope.json"]
        named = "--backend-opt params=nope.json"
    monkeypatch.chdir(tmp_path)
    one_error(*cli_in_process(capsys, "run", "reshard", "--backend", "wormhole-sim", *opts)[::2],
              named, "not a parameters file")
    assert not store.exists()
