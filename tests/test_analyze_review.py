"""What a new user met in `opatlas analyze` on Tenstorrent inputs: options a source does not
take, signpost windows that select nothing, pipelined epochs' time and utilization, defaulted
op models, sources a model cannot learn from, and the report's summary tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import cli_in_process, one_error, run_cli
from opatlas.analyze import api
from opatlas.analyze.tables import detail_tables, group_summary, time_breakdown
from test_analyze_pybuda import make_run

TT = Path(__file__).parent / "data" / "tenstorrent"
CSV = TT / "ops_perf_results_2025_09_18_11_39_20.csv"
NETLIST = TT / "resnet50_hifi3_fp16b.netlist.yaml"
START, END = "ResNet module started", "ResNet module finished"


def test_options_a_source_does_not_take_are_said_and_refused_under_strict(capsys):
    # (--device names a tt-metal CSV's chip: tests/test_ttmetal_review_s36.py)
    code, out, err = cli_in_process(capsys, "analyze", str(CSV), "--ignore-signposts", "-s",
                                    "--gpus", "8", "--json")
    assert code == 0
    assert "--spatial-epochs, --gpus do not apply to a ttmetal source: ignored" in err
    assert json.loads(out)["summary"]["notes"][0].startswith("--spatial-epochs, --gpus")
    code, _, err = cli_in_process(capsys, "analyze", str(CSV), "--ignore-signposts", "-s",
                                  "--strict", "--json")
    one_error(code, err, "--spatial-epochs does not apply", "--strict")


def test_signpost_windows_that_contradict_or_select_nothing(capsys):
    code, _, err = cli_in_process(capsys, "analyze", str(CSV), "--ignore-signposts",
                                  "--start-signpost", START, "--json")
    one_error(code, err, "not both")
    code, _, err = cli_in_process(capsys, "analyze", str(CSV), "--start-signpost", END,
                                  "--end-signpost", START, "--json")
    one_error(code, err, "no device operation after", "before the start one")
    code, out, _ = cli_in_process(capsys, "analyze", str(CSV), "--end-signpost", END, "--json")
    assert json.loads(out)["summary"]["window"] == f"from the start until {END!r}"


def test_strict_whole_file_fallback_reads_as_a_refusal(capsys):
    code, _, err = cli_in_process(capsys, "analyze", str(CSV), "--strict", "--json")
    line = one_error(code, err, "nothing follows the last signpost", "--ignore-signposts")
    assert "analysing the whole file instead" not in line


def test_pipelined_epochs_take_their_slowest_op_and_pybudas_util():
    a = api.analyze(NETLIST)
    epochs = a.summary["epoch_summary"]
    groups = group_summary(a).set_index("group")
    clock = a.summary["clock_hz"]
    for e in epochs:
        g = groups.loc[str(e["epoch"])]
        assert g["time_s"] == pytest.approx(e["pipeline_cycles"] / clock)
        assert g["time_s"] == pytest.approx(g["slowest_time_s"])  # the pipeline's pace
        # the netlist alone: the balancer util (was 0% without measured data)
        assert g["util"] == pytest.approx(e["balancer_util"] / 100)
    assert groups["share"].sum() == pytest.approx(1.0)
    assert a.total_time_s == pytest.approx(sum(e["pipeline_cycles"] for e in epochs) / clock)
    assert sum(v for _, v in time_breakdown(a)) == pytest.approx(a.total_time_s)


def test_group_util_without_any_value_is_unknown_not_zero():
    from opatlas.analyze.model import Analysis, Source

    rows = pd.DataFrame({"op": ["a", "b"], "pass": "fwd", "calls": 1.0, "time_s": [1.0, 2.0],
                         "flops": 0.0, "bytes": 0.0, "bound_time_s": None, "limiter": None,
                         "shape": [{}, {}], "group": 0, "util_compute": [None, None]})
    g = group_summary(Analysis(Source(kind="store", path="x"), {}, rows))
    assert np.isnan(g["util"].iloc[0]) and g["time_s"].iloc[0] == 3.0


def test_ops_with_a_defaulted_op_model_are_said(capsys):
    code, _, err = cli_in_process(capsys, "analyze", str(NETLIST), "--json")
    assert code == 0
    assert "17 op(s) of type fused_op have no fitted op model" in err


def test_the_report_shows_the_summarys_tables(tmp_path):
    run = make_run(tmp_path / "run")
    a = api.analyze(run)
    titles = {d["title"]: d for d in detail_tables(a)}
    assert "epoch summary" in titles
    assert len(titles["epoch summary"]["rows"]) == a.summary["epochs"]
    tm = {d["title"] for d in detail_tables(api.analyze(CSV, extra={"ignore_signposts": True}))}
    assert {"by op code", "top ops", "per device"} <= tm


def test_pybuda_options_pick_the_kind_and_missing_paths_are_named(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    code, _, err = cli_in_process(capsys, "analyze", "-d", str(tmp_path / "empty"))
    one_error(code, err, "holds no PyBuda netlist")
    code, _, err = cli_in_process(capsys, "analyze", str(tmp_path / "no" / "such"))
    one_error(code, err, "no such file or folder")
    code, _, err = cli_in_process(capsys, "analyze", "--kind", "pybuda", str(CSV))
    line = one_error(code, err, "not valid YAML")
    assert len(line) < 600  # the CSV's kilobyte-long line is not quoted whole


def test_shapes_without_numbers_get_a_note_not_a_lightgbm_error(capfd):
    from opatlas.analyze.sources.held_out import Job, held_out
    from opatlas.devices import get_device

    shapes = pd.DataFrame({"input_core_grid": ["4x4"] * 40, "output_core_grid": ["1x1"] * 40})
    out, notes = held_out(Job(None, "reshard", "fwd", get_device("A100"), "bf16", shapes,
                              np.linspace(1e-6, 2e-6, 40)))
    assert np.isnan(out).all() and "no numeric parameter" in notes[0]
    assert "LightGBM" not in capfd.readouterr().err


def test_export_tt_says_what_it_writes(tmp_path):
    r = run_cli("sweep", "export-tt", "reshard", str(tmp_path / "v"), "--where",
                "input_core_grid == '1x1' and output_core_grid == '2x1'")
    assert r.returncode == 0, r.stderr
    assert "writing" in r.stderr and "vectors under" in r.stderr
    files = list((tmp_path / "v").rglob("*.json"))
    size = sum(f.stat().st_size for f in files) / 1e6
    assert f"wrote {len(files)} files ({size:,.1f} MB)" in r.stdout


def test_tables_in_a_pipe_are_not_cut_to_80_columns():
    r = run_cli("ops")
    assert r.returncode == 0
    assert "attention_dropout" in r.stdout and "flash_attention" in r.stdout  # whole names
    assert "…" not in r.stdout


def test_an_overhead_bound_op_shows_the_busier_resources_use():
    from opatlas.analyze.why import Peaks, explain

    rows = pd.DataFrame({"op": ["tiny"], "pass": "fwd", "calls": 1.0, "time_s": [2e-3],
                         "flops": [1e6], "bytes": [1e8], "limiter": [None]})
    r = explain(rows, Peaks("X", 1e12, 1e12, 0.0, 2)).iloc[0]
    assert r["limiter"] == "overhead"  # 2 ms against a 0.1 ms bound
    assert r["util"] == pytest.approx(r["util_memory"]) == pytest.approx(0.05)  # not 0.05%


def test_rope_on_q_and_k_of_equal_heads_is_one_row_of_two_calls():
    from opatlas.estimate import estimate_step, load_config

    est = estimate_step(load_config("llama2-7b"))
    rope = [it for it in est.items if it.name == "RoPE" and it.pass_ == "fwd"]
    layer = next(it for it in est.items if it.name == "res_add" and it.pass_ == "fwd")
    assert len(rope) == 1 and rope[0].calls == layer.calls  # res_add: twice a layer too
    gqa = estimate_step(load_config("llama2-70b"))  # 8 KV heads of 64: two shapes
    assert len([it for it in gqa.items if it.name == "RoPE" and it.pass_ == "fwd"]) == 2


def test_import_tt_names_a_missing_folder(capsys, tmp_path):
    (tmp_path / "v").mkdir()
    code, _, err = cli_in_process(capsys, "import", "tt-sweep", "--vectors", str(tmp_path / "v"),
                                  "--results", str(tmp_path / "none"), "--store",
                                  str(tmp_path / "s.duckdb"))
    one_error(code, err, "--results", "no such folder")
    assert not (tmp_path / "s.duckdb").exists()


# --- configs, stores and traces (another new user's review) --------------------------------

def test_a_config_analysis_says_what_the_loader_assumed(capsys, tmp_path):
    y = tmp_path / "my.yml"
    y.write_text("model: {name: m, layers: 4, hidden: 1024, heads: 16, seq_len: 2048}\n"
                 "training: {global_batch: 64}\nparallel: {dp: 8}\ncluster: {device: A100}\n")
    code, out, err = cli_in_process(capsys, "analyze", str(y), "--json")
    notes = json.loads(out)["summary"]["notes"]
    assert code == 0 and any("assumed (the defaults) ops.mode = analytical" in n for n in notes)
    assert any("links of the A100's own system" in n for n in notes)
    assert any("their util and headroom are those factors" in n for n in notes)
    assert all(f"opatlas: note: {n}" in err for n in notes)


def test_a_json_print_opens_again_and_options_load_ignores_are_said(capsys, tmp_path):
    code, out, _ = cli_in_process(capsys, "analyze", "llama2-7b", "--json")
    saved = tmp_path / "lm.json"
    saved.write_text(out)
    code, again, err = cli_in_process(capsys, "analyze", str(saved), "--json")
    assert code == 0 and json.loads(again)["rows"] == json.loads(out)["rows"]
    code, _, err = cli_in_process(capsys, "analyze", "--load", str(saved), "--device", "H100",
                                  "--json")
    assert code == 0 and "--device does not apply to an analysis source: ignored" in err
    code, _, err = cli_in_process(capsys, "analyze", "--load", str(saved), "--device", "H100",
                                  "--strict")
    one_error(code, err, "--device does not apply", "--strict")


def test_csv_to_stdout_and_a_missing_netlist_named(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_cli("analyze", "llama2-7b", "--csv", "-", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("op,pass,") and not (tmp_path / "-").exists()
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    # counts are whole numbers and written so ("2048", not "2048.0"); times stay fractions
    assert rows and all(row["calls"].isdigit() for row in rows), rows[0]["calls"]
    norm = next(row for row in rows if row["op"] == "RMSlayernorm" and row["pass"] == "fwd")
    # 2 RMSNorms a layer × 32 layers × 32 micro-batches, 4 FLOPs an element of 2,048 tokens (a
    # tp 2 sequence-parallel half of 4,096) × 4,096
    assert int(norm["calls"]) == 2048 and int(norm["flops"]) == 2048 * 4 * 2048 * 4096
    assert float(norm["time_s"]) % 1 != 0
    code, _, err = cli_in_process(capsys, "analyze", "llama2-7b", "--netlist", "foo.yaml")
    one_error(code, err, "--netlist foo.yaml: no such file or folder")


def test_measured_with_no_match_under_strict_does_not_claim_to_carry_on(capsys, tmp_path):
    from opatlas.store import Store

    store = tmp_path / "empty.duckdb"
    with Store(store):
        pass
    code, _, err = cli_in_process(capsys, "analyze", "llama2-7b", "--measured", str(store),
                                  "--strict", "--json",  # the config's defaults stated
                                  "--set", "model.attention=flash",
                                  "--set", "parallel.dp_overlap=true",
                                  "--set", "parallel.bucket_mb=25",
                                  "--set", "cluster.intra_latency_us=5",
                                  "--set", "cluster.inter_latency_us=10")
    line = one_error(code, err, "no measurement matches", "--strict refuses")
    assert "the prediction is kept" not in line
    a = api.analyze("llama2-7b", measured=str(store))  # a str works as well as a Path
    assert any("predicted schedule" in n for n in a.summary["notes"])


def test_a_mistyped_trace_device_is_an_error(capsys, tmp_path):
    import torch

    with torch.profiler.profile(record_shapes=True) as prof:
        x = torch.randn(64, 64, requires_grad=True)
        (x @ x).relu().sum().backward()
    trace = tmp_path / "t.json"
    prof.export_chrome_trace(str(trace))
    code, _, err = cli_in_process(capsys, "analyze", str(trace), "--device", "foo")
    one_error(code, err, "foo")
    code, out, _ = cli_in_process(capsys, "analyze", str(trace), "--device", "H100", "--json")
    assert code == 0 and json.loads(out)["summary"]["device"] == "H100-SXM5-80GB"


def test_a_trace_mostly_of_unmapped_ops_says_so(tmp_path):
    import torch

    conv = torch.nn.Conv2d(8, 16, 3)
    with torch.profiler.profile(record_shapes=True) as prof:
        conv(torch.randn(4, 8, 64, 64)).relu().sum().backward()
    trace = tmp_path / "conv.json"
    prof.export_chrome_trace(str(trace))
    a = api.analyze(trace, device="A100")
    other = a.rows.loc[a.rows["op"] == "other", "time_s"].sum() / a.total_time_s
    said = [n for n in a.summary["notes"] if "does not map to its catalog" in n]
    assert other >= 0.25 and len(said) == 1 and f"{100 * other:.0f}%" in said[0]
