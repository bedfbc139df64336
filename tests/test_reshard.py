"""Tenstorrent reshard: counts by hand, rule edges, transfer plans by hand, simulator
invariants, tt-metal file round trip, calibration, ttnn backend's pure parts."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from opatlas.spec import resolve_spec
from opatlas.sweep import expand
from opatlas.tenstorrent import reshard as rs
from opatlas.tenstorrent.plan import core_plan, page_plan, shards
from opatlas.tenstorrent.sim import WormholeParams, simulate


def _downsampled(n: int) -> int:
    while n > 1600:
        n //= 2  # del v[::2] keeps floor(n/2)
    return n


def test_counts_for_1x1_to_2x1_by_hand():
    # Input on one core: every shape is tileable. Output 2x1: BLOCK and WIDTH need an even width
    # in tiles, HEIGHT an even height. L1 binds on the single input core: Ht·Wt ≤ 512.
    even_w = sum(min(249, 512 // wt) for wt in range(2, 250, 2))
    assert even_w == 1323
    # 7 strategy pairs: outputs B or W (5 pairs) need even Wt; output H (2 pairs) even Ht,
    # and by symmetry the count of even-Ht shapes equals even_w
    valid = 7 * even_w
    s = rs.expand_suite((1, 1), (2, 1))
    assert len(s) + s.downsampled == valid == 9261
    assert len(s) == _downsampled(valid) == 1157
    assert sum(s.invalid.values()) + valid == 9 * 249 * 249
    # rule 3 is reached only when the output tiles: H->H needs even Ht, W->W even Wt
    assert s.invalid["ignore"] == 2 * 124 * 249


@pytest.mark.parametrize(("gin", "gout"), [((2, 2), (4, 1)), ((1, 3), (3, 2)), ((8, 8), (1, 1))])
def test_suite_counts_match_a_plain_loop_over_the_rules(gin, gout):
    valid = 0
    for sin in rs.STRATEGIES:
        for sout in rs.STRATEGIES:
            for wt in rs.SHAPE_STEPS:
                for ht in rs.SHAPE_STEPS:
                    valid += rs.invalid_reason(ht, wt, gin, gout, sin, sout) is None
    s = rs.expand_suite(gin, gout)
    assert len(s) + s.downsampled == valid
    assert len(s) == _downsampled(valid)


def test_tileable_and_l1_rules_on_edge_shapes():
    assert rs.is_tilable(2, 2, 2, 2, "BLOCK") and not rs.is_tilable(2, 3, 2, 2, "BLOCK")
    assert rs.is_tilable(8, 1, 4, 2, "HEIGHT") and not rs.is_tilable(4, 8, 4, 2, "HEIGHT")
    assert rs.is_tilable(1, 8, 2, 4, "WIDTH") and not rs.is_tilable(8, 4, 2, 4, "WIDTH")
    # 1 MiB per core: bf16 16x32 tiles on one core is exactly 1 MiB -> fits; one more row no
    assert rs.fits_l1(16, 32, 1, 1) and not rs.fits_l1(17, 32, 1, 1)
    assert rs.fits_l1(17, 32, 2, 1)
    assert rs.invalid_reason(17, 32, (1, 1), (2, 1), "BLOCK", "BLOCK") == "Will not fit in L1"
    assert rs.invalid_reason(3, 3, (2, 1), (1, 1), "BLOCK", "BLOCK") == \
        "Input tensor cannot be tiled"
    assert rs.invalid_reason(2, 2, (1, 1), (4, 1), "BLOCK", "WIDTH") == \
        "Output tensor cannot be tiled"
    assert rs.invalid_reason(4, 4, (1, 1), (2, 1), "WIDTH", "WIDTH") == "ignore"


def test_builtin_spec_names_and_cli():
    spec = resolve_spec("reshard")
    assert spec.op == "reshard"
    r = expand(spec, where="input_core_grid == '1x1' and output_core_grid == '2x1'")
    v = r.vectors[0].params
    assert set(v) == {"input_shape", "input_core_grid", "output_core_grid",
                      "input_shard_strategy", "output_shard_strategy", "input_shard_orientation",
                      "output_shard_orientation", "dtype"}
    assert v["input_shape"][:2] == [1, 1] and v["input_core_grid"] == "1x1"
    out = json.loads(run_cli("sweep", "expand", "reshard", "--json", "--where",
                             "input_core_grid == '1x1' and output_core_grid == '2x1'",
                             check=True).stdout)
    assert out["valid"] == 1157 and out["total"] == 9 * 249 * 249


def test_transfer_plan_by_hand():
    # 2x4 tiles; input BLOCK on 2x1: core (0,0) holds cols 0-1, core (1,0) cols 2-3, rows 0-1,
    # each shard row-major with width 2. Output WIDTH on 4x1: core k holds column k.
    plan = page_plan(2, 4, (2, 1), "BLOCK", (4, 1), "WIDTH")
    as_list = {core: [(s.src, s.start, s.pages) for s in st] for core, st in plan.items()}
    assert as_list[(0, 0)] == [((0, 0), 0, 1), ((0, 0), 2, 1)]  # (r0,c0) local 0, (r1,c0) 2
    assert as_list[(1, 0)] == [((0, 0), 1, 1), ((0, 0), 3, 1)]
    assert as_list[(2, 0)] == [((1, 0), 0, 1), ((1, 0), 2, 1)]
    assert as_list[(3, 0)] == [((1, 0), 1, 1), ((1, 0), 3, 1)]
    # reverse: WIDTH 4x1 -> BLOCK 2x1: output (0,0) needs cols 0-1 of rows 0-1
    back = page_plan(2, 4, (4, 1), "WIDTH", (2, 1), "BLOCK")
    assert [(s.src, s.start, s.pages) for s in back[(0, 0)]] == [
        ((0, 0), 0, 1), ((1, 0), 0, 1), ((0, 0), 1, 1), ((1, 0), 1, 1)]


@pytest.mark.parametrize("case", [(6, 8, (2, 1), "BLOCK", (1, 2), "HEIGHT"),
                                  (8, 6, (1, 2), "HEIGHT", (2, 2), "BLOCK"),
                                  (4, 12, (3, 1), "WIDTH", (2, 2), "BLOCK")])
def test_every_output_page_is_sourced_exactly_once_from_the_right_core(case):
    ht, wt, gin, sin, gout, sout = case
    owner = {}
    for s in shards(ht, wt, gin, sin):
        for r in range(s.r0, s.r1):
            for c in range(s.c0, s.c1):
                owner[(s.core, (r - s.r0) * s.width + (c - s.c0))] = (r, c)
    got = []
    for o in shards(ht, wt, gout, sout):
        pages = [owner[(st.src, st.start + i)] for st in page_plan(ht, wt, gin, sin, gout, sout)[
            o.core] for i in range(st.pages)]
        assert pages == [(r, c) for r in range(o.r0, o.r1) for c in range(o.c0, o.c1)]
        got += pages
    assert sorted(got) == sorted(owner.values()) and len(got) == ht * wt
    fast = {c.core: c for c in core_plan(ht, wt, gin, sin, gout, sout)}
    for core, strides in page_plan(ht, wt, gin, sin, gout, sout).items():
        assert sum(fast[core].strides) == len(strides)


def test_simulator_invariants():
    p = WormholeParams(port_bytes_per_cycle=28, link_bytes_per_cycle=32, tx_ns=50, req_ns=5,
                       hop_ns=0.5, link_req_ns=2, launch_ns=300, overlap_p=4)
    for gin, sin, gout, sout in [((2, 2), "BLOCK", (4, 1), "WIDTH"), ((1, 4), "HEIGHT",
                                                                     (2, 2), "BLOCK")]:
        times = [simulate(8 * k, 8, gin, sin, gout, sout, p).time_ns for k in range(1, 12)]
        assert all(b >= a for a, b in itertools.pairwise(times))
    # one source core: no faster than its two NoC ports can serve the whole tensor
    for tiles_h in (4, 16, 64):
        r = simulate(tiles_h, 8, (1, 1), "BLOCK", (2, 4), "BLOCK", p)
        assert r.src_ns == pytest.approx(tiles_h * 8 * 2048 / (2 * p.port_bw))
        assert r.time_ns >= p.launch_ns + r.src_ns - 1e-6
    # the p-norm lies between the busiest resource and the sum of all three
    r = simulate(64, 64, (4, 4), "BLOCK", (1, 1), "BLOCK", p)
    parts = (r.risc_ns, r.src_ns, r.link_ns)
    assert max(parts) <= r.time_ns - p.launch_ns <= sum(parts)


def test_noc_routes_by_hand():
    from opatlas.tenstorrent import noc

    # logical (1, 0) is physical (2, 1); logical (0, 2) is physical (1, 3). NoC 0 goes east
    # first: 2 -> 3 -> ... -> 9 -> 0 -> 1 wraps round the 10-wide torus (9 hops), then south
    # 1 -> 2 -> 3 (2 hops). NoC 1 goes north first: 1 -> 0 -> 11 -> ... -> 3 (10 hops on the
    # 12-high torus), then west 2 -> 1 (1 hop).
    assert len(noc.route(0, (1, 0), (0, 2))) == noc.HOPS[0, 1, 16] == 11
    assert len(noc.route(1, (1, 0), (0, 2))) == noc.HOPS[1, 1, 16] == 11
    # the worker rows skip physical row 6: logical (0, 4) -> (0, 5) is physical 5 -> 7
    assert noc.HOPS[0, noc.core_id(0, 4), noc.core_id(0, 5)] == 2
    # every route of one NoC uses only that NoC's links, no link twice
    r = noc.ROUTES[1, 5, 60]
    links = r[r != noc.NO_LINK]
    assert len(set(links.tolist())) == len(links) and (links >= noc.LINKS_PER_NOC).all()
    (b,) = noc.link_loads(np.array([0, 0]), np.array([1, 2]), np.array([16, 16]),
                          np.array([10.0, 5.0]))
    # (2,1)->(1,3) and (3,1)->(1,3) share the east links from x=3 on and the south ones
    assert b.max() == 15.0 and b.sum() == 10.0 * 11 + 5.0 * 10


def test_row_to_column_reshard_shares_one_link_as_measured():
    # 4x1 -> 1x4, BLOCK -> WIDTH: output core (0, k) copies input core (k, 0)'s whole shard.
    # On NoC 0 (east first) the three remote copies all cross the link into physical column 1
    # of row 1: 3/4 of the half of the tensor that NoC 0 carries.
    from opatlas.tenstorrent import sim as s

    ld = s.loads(s.flows(core_plan(8, 8, (4, 1), "BLOCK", (1, 4), "WIDTH")), 2048)
    half = 64 * 2048 / 2
    assert ld.link_bytes.max() == pytest.approx(0.75 * half)
    assert ld.bytes.sum() == pytest.approx(64 * 2048)  # every byte read exactly once
    assert ld.fan_in == 1 and ld.fan_out == 1
    # many-to-one gather: the reader's two ports carry everything, 16 sources
    g = s.loads(s.flows(core_plan(16, 16, (4, 4), "BLOCK", (1, 1), "BLOCK")), 2048)
    assert g.fan_in == 16 and g.bytes.max() == pytest.approx(256 * 2048 / 2)


def test_reshard_time_ns_public_api():
    from opatlas.errors import InvalidShape
    from opatlas.tenstorrent.sim import reshard_time_ns

    p = WormholeParams()
    t = reshard_time_ns([1, 1, 256, 512], "4x2", "ShardStrategy.BLOCK", (2, 4), "HEIGHT_SHARDED",
                        params=p)
    assert t == pytest.approx(simulate(8, 16, (4, 2), "BLOCK", (2, 4), "HEIGHT", p).time_ns)
    assert reshard_time_ns([1, 1, 256, 512], "4x2", "BLOCK", "2x4", "HEIGHT") > 0  # calibrated
    with pytest.raises(InvalidShape, match="cannot be WIDTH-sharded"):
        reshard_time_ns([1, 1, 64, 128], "2x2", "BLOCK", "8x1", "WIDTH", params=p)
    with pytest.raises(InvalidShape, match="whole number of tiles"):
        reshard_time_ns([1, 1, 65, 64], "1x1", "BLOCK", "1x2", "BLOCK", params=p)
    with pytest.raises(InvalidShape, match="unknown shard strategy"):
        reshard_time_ns([1, 1, 64, 64], "1x1", "DIAGONAL", "1x2", "BLOCK", params=p)


def test_params_load_ignores_old_fields_and_says_so(tmp_path, capsys):
    f = tmp_path / "old.json"
    f.write_text(json.dumps({"tx_ns": 7.0, "hop_bytes_per_cycle": 700.0}))
    p = WormholeParams.load(f)
    assert p.tx_ns == 7.0
    assert "hop_bytes_per_cycle" in capsys.readouterr().err


def test_wormhole_sim_run_fit_and_models_csv(tmp_path):
    store = tmp_path / "s.duckdb"
    run_cli("run", "reshard", "--backend", "wormhole-sim", "--store", str(store), "--where",
            "input_core_grid == '1x1' and output_core_grid == '2x1'", check=True)
    out = tmp_path / "models.csv"
    run_cli("fit", "--data", str(store), "--recipe", "reshard", "--out", str(out), "--shards",
            "12", check=True)
    parts = [tmp_path / f"models.csv.{i}" for i in range(12)]
    assert all(p.exists() for p in parts)
    assert parts[0].read_bytes().startswith(
        b"in_grid,out_grid,group,coef,intercept,r^2,RRMSE,RMSRE,num_points\n")
    rows = sum(len(p.read_text().splitlines()) - 1 for p in parts)
    assert rows == 7  # one model per strategy pair of the 1x1 -> 2x1 suite
    held = pd.read_csv(tmp_path / "models.heldout.csv")  # beside the shards, not among them
    assert len(held) == 7 and (held["heldout_points"] > 0).all()
    # the simulator is linear in tiles within a group, up to page rounding
    assert held["heldout_RMSRE"].median() < 0.05


def test_export_tt_and_import_tt_round_trip(tmp_path):
    from opatlas.store import Store
    from opatlas.tenstorrent.ttjson import deserialize, export_tt, import_tt

    vecs = [v for v in expand(resolve_spec("reshard"), where="input_core_grid == '1x1' and "
                              "output_core_grid == '1x2'").vectors if v.params["input_shape"][2] <= 64]
    files = export_tt(vecs, tmp_path / "vectors_export")
    assert [f.relative_to(tmp_path).as_posix() for f in files] == [
        "vectors_export/1x1/reshard-1x1-1x2.json"]
    suite = json.loads(files[0].read_text())["1x1-1x2-DataType.BFLOAT16"]
    first = next(iter(suite.values()))
    assert first["input_shard_strategy"].startswith("ShardStrategy.")
    assert first["validity"] == "VectorValidity.VALID" and len(first["input_hash"]) == 56
    assert {json.dumps(deserialize(v), sort_keys=True) for v in suite.values()} == \
        {json.dumps(dict(v.params), sort_keys=True) for v in vecs}
    results = [{"sweep_name": "reshard", "suite_name": "1x1-1x2-DataType.BFLOAT16", "vector_id": h,
                "input_hash": h, "status": "TestStatus.PASS", "message": "",
                "device_perf": {"DEVICE KERNEL DURATION [ns]": 1000.0 + i,
                                "DEVICE KERNEL DURATION [ns]_std": 3.0, "runs": 10}}
               for i, h in enumerate(suite)]
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "reshard-1x1-1x2.json").write_text(json.dumps(results))
    with Store(tmp_path / "s.duckdb") as st:
        assert import_tt(st, tmp_path / "vectors_export", tmp_path / "res") == len(vecs)
        df = st.results(op="reshard")
    assert (df["status"] == "ok").all() and (df["repeats"] == 10).all()


@pytest.mark.slow
def test_calibration_recovers_sensible_hardware_parameters():
    from opatlas.tenstorrent.calibrate import calibrate, format_report, summarise

    cal = calibrate(split="x", max_groups=200)
    assert 20 < cal.params.link_bytes_per_cycle < 40  # a NoC link moves 32 B flits per cycle
    assert 100 < cal.params.launch_ns < 2000
    # the split: calibration groups have input x <= 2, test groups x = 3..4
    assert cal.train["in_grid"].str[0].astype(int).max() <= 2
    assert set(cal.test["in_grid"].str[0].astype(int)) <= {3, 4}
    s = summarise(cal.test)
    assert 1.0 <= s["median_factor"] < 1.6
    text = format_report(cal)
    assert "calibrate on input grids with x <= 2" in text and "link_bytes_per_cycle" in text
    assert "B/cycle" in text and "by gather degree" in text and "by strategy pair" in text


def test_calibration_split_definitions():
    from opatlas.errors import OpatlasError
    from opatlas.tenstorrent.calibrate import get_split

    y = get_split("y")
    assert y.train("4x2", "1x1") and not y.train("2x3", "1x1") and y.test("2x4", "8x8")
    assert not y.test("2x5", "1x1")
    with pytest.raises(OpatlasError, match="not one of"):
        get_split("z")


def test_single_source_measurements_match_two_nocs():
    # hardware: from one input core every output grid costs ~36.5 ns per bf16 tile,
    # i.e. 2048 B over two NoCs at ~28 B/cycle
    from opatlas.tenstorrent.calibrate import load_models

    m = load_models()
    coef = m[(m["in_grid"] == "1x1") & m["trusted"]]["coef"].median()
    assert 2048 / coef / 2 == pytest.approx(28, rel=0.05)


def test_ttnn_backend_pure_parts():
    from opatlas.errors import InvalidShape
    from opatlas.tenstorrent.ttnn_backend import chunks, durations_from_profiler, memory_config_args

    a = memory_config_args([1, 1, 256, 512], "4x2", "BLOCK")
    assert a["shard_shape"] == (128, 128) and a["core_grid"] == (4, 2)
    assert memory_config_args([1, 1, 256, 512], "4x2", "HEIGHT")["shard_shape"] == (32, 512)
    assert memory_config_args([1, 1, 256, 512], "4x2", "WIDTH")["shard_shape"] == (256, 64)
    with pytest.raises(InvalidShape):
        memory_config_args([1, 1, 96, 64], "2x2", "BLOCK")
    rows = [{"DEVICE KERNEL DURATION [ns]": float(i)} for i in range(30)]
    per = durations_from_profiler(rows, 3)
    assert per == [[float(i) for i in range(k * 10, k * 10 + 10)] for k in range(3)]
    assert [len(c) for c in chunks(120)] == [50, 50, 20]
    assert math.isclose(np.mean(per[1]), 14.5)


def test_reblocking_view_of_the_pybuda_example():
    from opatlas.tenstorrent.reblock import reblock

    # PyBuda's 7x1 producer (7 rows of cores) feeding a 2x1 consumer: 14 tile rows, so each
    # producer holds 2 rows and each consumer 7 rows = 3.5 producers' worth, from 4 cores
    r = reblock(14, 4, (1, 7), (1, 2))
    assert r.gathered == pytest.approx(3.5)
    assert r.fan_in == 4 and r.fan_out == 2  # the middle producer is split between both
    one_to_one = reblock(14, 4, (1, 7), (1, 7))
    assert one_to_one.fan_in == 1 and one_to_one.gathered == pytest.approx(1.0)
    assert one_to_one.predicted_ns < r.predicted_ns
    out = json.loads(run_cli("reblock", "--producer", "7x1", "--consumer", "2x1", "--height",
                             "14", "--width", "4", "--rows-first", check=True).stdout)
    assert out["fan_in"] == 4 and out["producer"] == "7x1"
    assert out["grid_notation"] == "rows x columns"


@pytest.mark.slow
def test_one_model_generalises_to_unseen_grid_pairs_better_than_the_simulator_alone():
    from opatlas.tenstorrent.fit import evaluate_one_model

    r = evaluate_one_model(max_groups=400, split="x")
    assert r["split"] == "x" and r["test_grid_pairs"] > 10
    assert r["one_model_mape"] < r["simulator_mape"]
    assert r["one_model_mape"] < 0.3


def test_seed_style_input_grid_selection():
    # the seed's `-x 2 -y 7`: input grids 2 x {7, 8}, every other output grid
    r = expand(resolve_spec("reshard"), materialize=False,
               where="grid_x(input_core_grid) == 2 and grid_y(input_core_grid) >= 7")
    assert r.total == 2 * 63 * 9 * 249 * 249


@pytest.mark.slow
def test_calibrate_cli_report_and_bad_split(tmp_path):
    out = tmp_path / "wh.json"
    r = run_cli("calibrate", "--split", "y", "--groups", "40", "--report", "--out", str(out),
                check=True)
    assert "split y: calibrate on input grids with y <= 2, test on y = 3..4" in r.stdout
    assert "fitted parameters:" in r.stdout and "ns/packet" in r.stdout
    assert "by gather degree" in r.stdout and "by strategy pair" in r.stdout
    assert WormholeParams.load(out).link_bytes_per_cycle > 0
    bad = run_cli("calibrate", "--split", "diagonal", "--out", str(out))
    assert bad.returncode == 2 and "not one of" in bad.stderr and "Traceback" not in bad.stderr


def test_a_where_dividing_by_zero_is_counted_in_the_reshard_sweep_too():
    """As in any sweep: points (or, for a selection on the grids alone, whole suites) where
    --where divides by zero are not selected, and counted under that reason."""
    from opatlas.tenstorrent.spec import SUITE_SIZE

    spec = resolve_spec("reshard")
    grids = ("input_core_grid == '1x1' and output_core_grid in ('2x1', '1x2') and "
             "1 / (grid_x(output_core_grid) - 2) != 0")

    def zero(r) -> int:
        return sum(n for why, n in r.invalid.items() if "divides by zero" in why)

    assert zero(expand(spec, where=grids, materialize=False)) == SUITE_SIZE  # all of 2x1's
    assert sum(zero(expand(spec, parts=3, part=k, where=grids, materialize=False))
               for k in (1, 2, 3)) == SUITE_SIZE
    points = expand(spec, where="input_core_grid == '1x1' and output_core_grid == '2x1' and "
                                "1 / (input_shape[3] - 64) != 0")
    everything = expand(spec, where="input_core_grid == '1x1' and output_core_grid == '2x1'")
    width_64 = [v for v in everything.vectors if v.params["input_shape"][3] == 64]
    assert zero(points) == len(width_64) > 0
    assert len(points.vectors) == len(everything.vectors) - len(width_64)


def test_a_where_on_grids_and_shapes_expands_only_the_suites_of_those_grids(monkeypatch):
    """The grid parts of an ``and`` prune whole suites before a shape part is tried on their
    points: the selection expands one suite, not all 4,096 (minutes, point by point)."""
    expanded: list[tuple] = []
    real = rs.expand_suite
    monkeypatch.setattr(rs, "expand_suite",
                        lambda gin, gout, **kw: expanded.append((gin, gout)) or
                        real(gin, gout, **kw))
    spec = resolve_spec("reshard")
    out = expand(spec, where="input_shape[3] > 64 and input_core_grid == '1x1' and "
                             "output_core_grid == '2x1'")
    assert expanded == [((1, 1), (2, 1))]
    assert out.vectors and all(v.params["input_shape"][3] > 64 for v in out.vectors)


def test_import_tt_refuses_bad_json_in_one_line(tmp_path):
    from opatlas.errors import OpatlasError
    from opatlas.store import Store
    from opatlas.tenstorrent.ttjson import export_tt, import_tt

    vecs = expand(resolve_spec("reshard"), where="input_core_grid == '1x1' and "
                  "output_core_grid == '1x2'").vectors[:3]
    export_tt(vecs, tmp_path / "vectors_export")
    res = tmp_path / "res"
    res.mkdir()
    bad = res / "r.json"
    with Store(tmp_path / "s.duckdb") as st:
        for text, why in (('[{"input_hash": ', "not readable JSON"),
                          ('{"a": 1}', "holds a dict, not a list of results"),
                          ('["x"]', "a result is str, not an object")):
            bad.write_text(text)
            with pytest.raises(OpatlasError, match=f"{bad}: {why}"):
                import_tt(st, tmp_path / "vectors_export", res)
        truncated = next((tmp_path / "vectors_export").rglob("*.json"))
        truncated.write_text(truncated.read_text()[:40])
        with pytest.raises(OpatlasError, match=f"{truncated}: not readable JSON"):
            import_tt(st, tmp_path / "vectors_export", res)


def test_simulator_parameters_are_checked_and_defaults_said(tmp_path, capsys):
    from opatlas.errors import OpatlasError
    from opatlas.tenstorrent.sim import FREE, WormholeParams

    path = tmp_path / "p.json"
    for text, why in (('{"port_bytes_per_cycle": "abc"}', "port_bytes_per_cycle is 'abc'"),
                      ('{"tx_ns": -1}', "tx_ns is -1: not a finite number > 0"),
                      ("[1]", "holds a list"), ("{", "not a parameters file")):
        path.write_text(text)
        with pytest.raises(OpatlasError, match=why):
            WormholeParams.load(path)
    path.write_text('{"launch_ns": 481.1}')
    p = WormholeParams.load(path)
    assert p.launch_ns == 481.1
    err = capsys.readouterr().err
    assert "first-principles defaults are used" in err
    assert all(k in err for k in FREE if k != "launch_ns") and "launch_ns," not in err


def test_a_bad_models_csv_is_one_line_naming_the_cell(tmp_path):
    from opatlas.errors import OpatlasError
    from opatlas.tenstorrent.calibrate import group_name, load_models

    head = "in_grid,out_grid,group,coef,intercept,r^2,RMSRE\n"
    good = f"1x1,1x2,{group_name('HEIGHT', 'BLOCK')},1.5,400,0.99,0.05\n"
    path = tmp_path / "m.csv"
    for body, why in (("", "holds no models"),
                      (good.replace("1.5", "abc"), "line 2: coef 'abc' is not a number"),
                      (good + good.replace("1x2", "0x2"), "line 3: out_grid '0x2' is not a "
                                                          "core grid"),
                      (good.replace(group_name("HEIGHT", "BLOCK"), "foo"),
                       "line 2: group 'foo' is not a strategy pair")):
        path.write_text(head + body)
        with pytest.raises(OpatlasError, match=why):
            load_models(path)
    path.write_text(head + good)
    assert load_models(path)["trusted"].tolist() == [True]
