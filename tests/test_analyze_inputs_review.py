"""Review of ``opatlas analyze``'s inputs: a saved analysis whose figures are not numbers is one
line and exit 2; a store's collectives and optimizer steps get bounds (or a note why not);
``--tui`` without a terminal is refused before the analysis; the docs say 13 rows for a
held-out prediction."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, cli_in_process, one_error
from opatlas.analyze import api
from opatlas.analyze.sources.held_out import MIN_ROWS
from opatlas.analyze.synthetic import synthetic_trace
from opatlas.devices import get_device
from opatlas.errors import OpatlasError
from opatlas.ops.transformer import ADAM_BYTES_PER_PARAM
from opatlas.store import Store
from opatlas.store.db import ResultRow

# ------------------------------------------------------------------ 1: --load checks figures


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A config's analysis as --save writes it."""
    path = tmp_path_factory.mktemp("saved") / "a.json"
    api.analyze("llama2-7b").save(path)
    return json.loads(path.read_text())


def _spoiled(saved: dict, tmp_path: Path, key: str, value: object, row: int = 0) -> Path:
    doc = json.loads(json.dumps(saved))
    doc["rows"][row][key] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("key", "value", "why"), [
    ("time_s", "abc", "is 'abc': not a number"),
    ("time_s", -1.0, "is -1.0: negative"),
    ("calls", None, "is null: every row needs this number"),
    ("flops", "many", "is 'many': not a number"),
    ("bound_time_s", -2.0, "is -2.0: negative"),
    ("share", True, "is True: not a number"),  # a ratio column: a number, not a boolean
])
def test_a_saved_row_with_a_bad_figure_is_one_line(saved, tmp_path, capsys, key, value, why):
    path = _spoiled(saved, tmp_path, key, value, row=1)
    name = f"{saved['rows'][1]['op']} {saved['rows'][1]['pass']}"
    html = tmp_path / "x.html"
    for args in (["--load", str(path)], [str(path), "--html", str(html)]):
        code, _, err = cli_in_process(capsys, "analyze", *args)
        one_error(code, err, str(path), f"rows[1].{key} ({name}) {why}")
    assert not html.exists()


def test_infinity_and_a_bad_summary_total_are_refused(saved, tmp_path):
    path = tmp_path / "inf.json"
    path.write_text(json.dumps(saved).replace(f'"time_s": {saved["rows"][0]["time_s"]!r}',
                                              '"time_s": Infinity', 1))
    with pytest.raises(OpatlasError, match=r"rows\[0\]\.time_s .*is inf: not a finite number"):
        api.analyze(path)
    doc = json.loads(json.dumps(saved))
    doc["summary"]["total_time_s"] = "soon"
    path.write_text(json.dumps(doc))
    with pytest.raises(OpatlasError, match=r"summary\.total_time_s is 'soon': not a number"):
        api.analyze(path)


def test_nulls_and_signed_errors_where_a_source_writes_them_still_load(saved, tmp_path):
    doc = json.loads(json.dumps(saved))
    doc["rows"][0].update(bound_time_s=None, headroom=None, flops=None)
    doc["columns"].append({"key": "error", "label": "error", "role": "error", "unit": "%"})
    for r in doc["rows"]:
        r["error"] = -0.25  # predicted under measured: a signed figure
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(doc))
    a = api.analyze(path)
    assert len(a.rows) == len(saved["rows"]) and a.rows["error"].eq(-0.25).all()


# ------------------------------------------------------------------ 2: store collectives

LINK_A100 = 300e9  # the dgx-a100 preset's NVLink, per GPU and direction
OPT_PARAMS = 1_761_348_096


def _comm_store(path: Path, device: str) -> Path:
    """Estimate-train-time's NCCL and optimizer samples as `opatlas import ett-samples` stores
    them (no FLOPs nor bytes), and one of opatlas's own collectives (bytes stored)."""
    rows = []

    def add(op: str, params: dict, ns: float, nbytes: float | None = None) -> None:
        rows.append(ResultRow(f"v{len(rows)}", op, json.dumps({**params, "dtype": "fp16"}),
                              "step", "ett-import", device, "fp16", "ok", repeats=10,
                              median_ns=ns, min_bytes=nbytes))

    add("nccl.allreduce", {"shape": 1 << 26, "nodes": 1, "GPUsPerNode": 4}, 2e6)
    add("nccl.allgather_large", {"shape": 1 << 26, "nodes": 2, "GPUsPerNode": 2}, 5e6)
    add("nccl.p2p", {"shape": 1 << 24, "nodes": 1, "GPUsPerNode": 2}, 2e5)
    add("collective.all_reduce", {"elements": 1 << 20, "world_size": 8, "nodes": 1}, 1e5,
        nbytes=2.0 * (1 << 20))
    add("optimizer", {"num_layers": 24, "hidden_size": 2304, "param_tensors": 292,
                      "params": OPT_PARAMS}, 143e6)
    with Store(path) as st:
        st.add_results(rows)
    return path


def test_store_collectives_and_optimizer_get_bounds(tmp_path):
    a = api.analyze(_comm_store(tmp_path / "a100.duckdb", "NVIDIAA100-SXM4-80GB"))
    rows = a.rows.set_index("op")
    msg = 2.0 * (1 << 26)  # fp16 elements
    # an all-gather sample's shape is one rank's input: its message is the 4 ranks' inputs
    expected = {"nccl.allreduce": 2 * 3 / 4 * msg, "nccl.allgather_large": 3 / 4 * (4 * msg),
                "nccl.p2p": 2.0 * (1 << 24), "collective.all_reduce": 2 * 7 / 8 * 2.0 * (1 << 20)}
    for op, bus_bytes in expected.items():
        assert rows.at[op, "limiter"] == "communication"
        assert rows.at[op, "bound_time_s"] == pytest.approx(bus_bytes / LINK_A100)
        assert rows.at[op, "flops"] == 0.0
    assert rows.at["nccl.allreduce", "bytes"] == msg
    opt = ADAM_BYTES_PER_PARAM * OPT_PARAMS
    assert rows.at["optimizer", "bytes"] == pytest.approx(opt)
    assert rows.at["optimizer", "bound_time_s"] == pytest.approx(
        opt / get_device("A100").bandwidth)
    assert rows.at["optimizer", "limiter"] == "memory"
    assert not rows["limiter"].eq("unknown").any()
    notes = a.summary["notes"]
    link = [n for n in notes if "300 GB/s per GPU" in n]
    assert len(link) == 1 and "dgx-a100" in link[0] and "DGX A100 datasheet" in link[0]
    assert sum("AdamW step" in n for n in notes) == 1


def test_a_device_without_a_known_link_says_why_its_collectives_have_no_bound(tmp_path,
                                                                              capsys):
    path = _comm_store(tmp_path / "h200.duckdb", "H200")
    code, out, err = cli_in_process(capsys, "analyze", str(path), "--json")
    assert code == 0, err
    said = [ln for ln in err.splitlines() if "no link bandwidth known" in ln]
    assert said == ["opatlas: note: no link bandwidth known for device H200 (no cluster preset "
                    "is built around it): collectives have no bound"]
    rows = {r["op"]: r for r in json.loads(out)["rows"]}
    assert rows["nccl.allreduce"]["bound_time_s"] is None
    assert rows["nccl.allreduce"]["limiter"] == "communication"
    assert rows["optimizer"]["bound_time_s"] == pytest.approx(
        ADAM_BYTES_PER_PARAM * OPT_PARAMS / get_device("H200").bandwidth)


def test_a_saved_store_analysis_loads_again(tmp_path, capsys):
    store = _comm_store(tmp_path / "a100.duckdb", "A100")
    saved = tmp_path / "a.json"
    code, _, err = cli_in_process(capsys, "analyze", str(store), "--save", str(saved))
    assert code == 0, err
    code, out, err = cli_in_process(capsys, "analyze", "--load", str(saved), "--json")
    assert code == 0, err
    assert {r["limiter"] for r in json.loads(out)["rows"]} == {"communication", "memory"}


# ------------------------------------------------------------------ 3: --tui needs a terminal

class _Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    synthetic_trace(tmp_path / "t.json", events=200)
    return tmp_path / "t.json"


@pytest.mark.parametrize(("stdin_tty", "stdout_tty"), [(False, False), (False, True),
                                                        (True, False)])
def test_tui_without_a_terminal_is_refused_before_the_analysis(trace, capsys, monkeypatch,
                                                               stdin_tty, stdout_tty):
    def never(*_a: object, **_k: object) -> None:
        raise AssertionError("analysed before --tui was refused")

    monkeypatch.setattr(api, "analyze", never)
    monkeypatch.setattr(sys, "stdin", _Stream(stdin_tty))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: stdout_tty)
    code, _, err = cli_in_process(capsys, "analyze", str(trace), "--tui")
    assert one_error(code, err) == \
        "opatlas: error: --tui needs a terminal (standard input and output)"


def test_the_app_opens_by_default_only_when_both_are_terminals(trace, capsys, monkeypatch):
    opened = []
    monkeypatch.setattr(api, "run_app", lambda *a, **k: opened.append(a))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(sys, "stdin", _Stream(False))  # < /dev/null: no keys to read
    code, out, err = cli_in_process(capsys, "analyze", str(trace))
    assert code == 0 and not opened and "slowest" in out, err  # the plain table
    monkeypatch.setattr(sys, "stdin", _Stream(True))
    code, _, err = cli_in_process(capsys, "analyze", str(trace), "--tui")
    assert code == 0 and len(opened) == 1, err


def test_tui_on_a_pipe_exits_at_once(trace):
    proc = subprocess.run([sys.executable, "-m", "opatlas", "analyze", str(trace), "--tui"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "opatlas: error: --tui needs a terminal (standard input and " \
                                  "output)"


# ------------------------------------------------------------------ 4: the docs

def test_the_docs_give_the_held_out_minimum_the_code_uses():
    doc = (REPO / "docs" / "analyze.md").read_text()
    assert MIN_ROWS == 13
    assert f"groups of fewer than {MIN_ROWS} rows get none" in doc
    assert "fewer than 10 rows" not in doc


def test_a_store_dtype_named_the_long_way_takes_its_own_peak(tmp_path, capsys):
    """tt-metal's ``bfloat16`` is the catalog's bf16 (74 TFLOP/s on an n150), not the n150's
    highest peak (fp8, 262 TFLOP/s); a dtype the device has no peak for is said."""
    import json

    from opatlas.analyze import api
    from opatlas.devices import get_device
    from opatlas.store import ResultRow, Store

    n150 = get_device("Wormhole-n150")
    for dtype, peak, said in (("bfloat16", n150.peak_flops["bf16"], False),
                              ("int4", max(n150.peak_flops.values()), True)):
        path = tmp_path / f"{dtype}.duckdb"
        rows = [ResultRow(f"v{i}", "res_add", json.dumps({"b": i + 1, "l": 32, "dim": 32}),
                          "fwd", "ttnn", "Wormhole-n150", dtype, "ok", repeats=3,
                          median_ns=1e4 * (i + 1), flops=1e3, min_bytes=1e4)
                for i in range(3)]
        with Store(path) as st:
            st.add_results(rows)
        a = api.analyze(path)
        assert a.summary["peak_flops_s"] == peak
        notes = [n for n in a.summary["notes"] if "has no peak FLOP/s for dtype" in n]
        assert bool(notes) == said, a.summary["notes"]


def test_a_gzipped_tt_metal_profile_is_recognised(tmp_path):
    """As tt-perf-report reads it: ``.csv.gz`` is the same profile, whatever its name."""
    import gzip
    import shutil

    from opatlas.analyze.sources.ttmetal import detect

    src = Path(__file__).parent / "data" / "tenstorrent" / \
        "ops_perf_results_2025_09_18_11_39_20.csv"
    gz = tmp_path / "myprofile.csv.gz"
    with src.open("rb") as fin, gzip.open(gz, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    assert detect(gz)
    plain = tmp_path / "myprofile.csv"
    shutil.copy(src, plain)
    assert detect(plain)
    (tmp_path / "not.csv.gz").write_text("OP CODE,x\n")  # not gzip at all
    assert not detect(tmp_path / "not.csv.gz")
