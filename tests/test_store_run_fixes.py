"""Resume by pass, checked imports, repeated ETT shapes, busy/empty stores, the worker's
warm-up, and the small output fixes of ``opatlas results`` and ``opatlas import``."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import datetime, timedelta

import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.errors import StoreError
from opatlas.run import RunConfig, run_spec
from opatlas.spec import spec_from_mapping
from opatlas.store import RESULT_COLUMNS, ResultRow, Store
from opatlas.sweep import params_json, vector_id

NOOP = {"name": "passes", "op": "noop", "params": {"i": [0, 1, 2]}, "repeats": 1, "warmup": 0}


def _row(i: int, status: str = "ok", pass_: str = "fwd", median: float | None = 1000.0,
         created: datetime | None = None) -> ResultRow:
    params = {"i": i}
    ok = status == "ok"
    row = ResultRow(vector_id=vector_id("noop", params), op="noop",
                    params_json=params_json(params), pass_=pass_, backend="cpu", device="dev",
                    dtype="fp32", status=status, repeats=3 if ok else 0,
                    mean_ns=median if ok else None, median_ns=median if ok else None,
                    min_ns=median if ok else None, max_ns=median if ok else None,
                    std_ns=0.0 if ok else None)
    if created is not None:
        row.created_at = created
    return row


# -- 1: resume measures the passes a vector lacks ----------------------------------------------
def test_a_vector_lacking_a_pass_runs_again_and_no_row_is_recorded_twice(tmp_path):
    spec = spec_from_mapping(NOOP)
    with Store(tmp_path / "s.duckdb") as st:
        first = run_spec(spec, st, RunConfig(interactive=False, passes=["fwd"]))
        fwd_before = st.results().set_index("vector_id")["created_at"]
        second = run_spec(spec, st, RunConfig(interactive=False))
        third = run_spec(spec, st, RunConfig(interactive=False))
        df = st.results()
    assert (first.ran, second.ran, second.skipped, third.ran) == (3, 3, 0, 0)
    assert len(df) == 6 and not df.duplicated(["vector_id", "pass"]).any()
    assert sorted(df["pass"]) == ["bwd"] * 3 + ["fwd"] * 3
    fwd_after = df[df["pass"] == "fwd"].set_index("vector_id")["created_at"]
    assert fwd_after.sort_index().equals(fwd_before.sort_index())  # the stored rows are kept


def test_a_job_array_also_runs_the_vectors_lacking_a_pass(tmp_path):
    pytest.importorskip("submitit")
    from opatlas.run.submitit_executor import SubmititConfig, run_spec_submitit

    spec = spec_from_mapping(NOOP)
    scfg = SubmititConfig(jobs=2, folder=tmp_path / "shards", cluster="debug")
    quiet = {"interactive": False, "log_every": 10**6}
    with Store(tmp_path / "s.duckdb") as st:
        run_spec(spec, st, RunConfig(passes=["fwd"], **quiet))
        second = run_spec_submitit(spec, st, RunConfig(**quiet), scfg)
        df = st.results()
    assert second.ran == 3 and len(df) == 6 and not df.duplicated(["vector_id", "pass"]).any()


def test_done_keys_by_passes_and_the_plan_carries_the_passes(tmp_path):
    from opatlas.run.runner import prepare_run
    from opatlas.store.keys import vector_keys

    with Store(tmp_path / "s.duckdb") as st:
        st.add_results([_row(0), _row(0, pass_="bwd"), _row(1), _row(2, "error"),
                        _row(2, "ok", pass_="bwd")])
        both = st.done_keys("cpu", "dev", passes=("fwd", "bwd"))
        final = st.done_keys("cpu", "dev", ("ok", "invalid"), passes=("fwd", "bwd"))
        any_pass = st.done_keys("cpu", "dev")
        plan = prepare_run(spec_from_mapping(NOOP), st, RunConfig(passes=["bwd"]))
    ids = [vector_id("noop", {"i": i}) for i in range(3)]
    assert list(both) == sorted(vector_keys(ids[::2]))
    assert list(final) == list(vector_keys(ids[:1]))
    assert len(any_pass) == 3
    assert plan.passes == ("bwd",)


# -- 2: import results checks its rows; an ok row replaces a stored failure ---------------------
def _export(rows: list[ResultRow]) -> pd.DataFrame:
    """Rows as ``opatlas results`` exports them (the table's columns)."""
    return pd.DataFrame([r.as_tuple() for r in rows], columns=list(RESULT_COLUMNS))


@pytest.mark.parametrize(("column", "value", "needles"), [
    ("median_ns", -5.0, ["median_ns -5.0", "not a time"]),
    ("median_ns", float("nan"), ["median_ns (missing)", "an ok row with samples needs it"]),
    ("min_ns", float("inf"), ["min_ns inf", "not a time"]),
    ("status", "weird", ["status 'weird'", "not a status"]),
    ("vector_id", "", ["vector_id (missing) is empty"]),
    ("repeats", -1, ["repeats -1", "not a count"]),
])
def test_a_bad_row_is_named_and_nothing_is_imported(tmp_path, capsys, column, value, needles):
    df = _export([_row(i) for i in range(3)])
    df[column] = df[column].astype(object)
    df.loc[1, column] = value
    bad = tmp_path / "bad.csv"
    df.to_csv(bad, index=False)
    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        st.add_results([_row(7)])
    code, _, err = cli_in_process(capsys, "import", "results", str(bad), "--store", str(store))
    one_error(code, err, str(bad), "row 2 (line 3)", "Nothing was imported", *needles)
    with Store(store, read_only=True) as st:
        assert st.count() == 1  # the good rows of the bad file are not written either
    code, _, err = cli_in_process(capsys, "import", "results", str(bad), "--store",
                                  str(tmp_path / "new.duckdb"))
    assert code == 2 and not (tmp_path / "new.duckdb").exists()


def test_an_imported_ok_row_replaces_a_stored_failure_however_old(tmp_path, capsys):
    old = datetime(2020, 1, 1)
    part = tmp_path / "part.parquet"
    _export([_row(0, created=old), _row(1, created=old)]).to_parquet(part)
    store = tmp_path / "s.duckdb"
    with Store(store) as st:  # this store's own attempts failed, later than the part ran
        st.add_results([_row(0, "error"), _row(1, "ok", median=5.0)])
    code, out, _ = cli_in_process(capsys, "import", "results", str(part), "--store", str(store))
    assert code == 0 and "added 1 rows" in out
    with Store(store, read_only=True) as st:
        df = st.results().sort_values("i")
    assert list(df["status"]) == ["ok", "ok"] and list(df["median_ns"]) == [1000.0, 5.0]


def test_within_an_imported_file_the_ok_row_of_a_key_wins(tmp_path):
    now = datetime(2024, 1, 1)
    rows = [_row(0, "error", created=now + timedelta(hours=1)), _row(0, created=now)]
    path = tmp_path / "both.csv"
    _export(rows).to_csv(path, index=False)
    with Store(tmp_path / "s.duckdb") as st:
        assert st.import_results(path) == 1
        assert list(st.results()["status"]) == ["ok"]


# -- 3: repeated ETT shapes are merged and said ------------------------------------------------
def test_repeated_ett_shapes_are_stored_once_over_all_their_values(tmp_path, capsys):
    folder = tmp_path / "samples"
    folder.mkdir()
    (folder / "NVIDIAA100-SXM4-80GB_gelu_fp16.csv").write_text(
        "mp,b,l,dim,F_dur(us),B_dur(us)\n1,2,128,512,10,20\n1,2,128,512,14,30\n"
        "1,2,128,512,11,26\n2,2,128,512,5,9\n")
    store = tmp_path / "s.duckdb"
    code, out, err = cli_in_process(capsys, "import", "ett-samples", str(folder), "--store",
                                    str(store))
    assert code == 0 and "added 4 rows" in out
    assert "gelu (NVIDIAA100-SXM4-80GB_gelu_fp16.csv): 1 shape(s) appear more than once" in err
    with Store(store, read_only=True) as st:
        df = st.results()
    rep = df[(df["mp"] == 1) & (df["pass"] == "fwd")].iloc[0]
    assert (rep["median_ns"], rep["mean_ns"], rep["min_ns"], rep["max_ns"], rep["repeats"]) == (
        11_000.0, pytest.approx(35_000.0 / 3), 10_000.0, 14_000.0, 0)  # a user's folder:
    # how many runs each value summarises is unknown (0), not an invented 10 per value
    assert df[(df["mp"] == 1) & (df["pass"] == "bwd")]["median_ns"].item() == 26_000.0
    assert df[df["mp"] == 2]["median_ns"].tolist() == [9_000.0, 5_000.0]


def test_the_bundled_flash_atten_file_keeps_its_85_repeated_shapes():
    from opatlas.store.ett import bundled_dataset, merge_repeats, read_sample_file

    path = bundled_dataset() / "operator" / "NVIDIAA100-SXM4-80GB_flash_atten_fp16.csv"
    raw = read_sample_file(path, counts=False)
    rows, repeated = merge_repeats(raw)
    assert (len(raw), repeated, len(rows)) == (4071 * 2, 85, (4071 - 85) * 2)
    assert sum(r.repeats for r in rows) == 10 * len(raw)  # every value counted once


# -- 4: a store in use, an empty store file ----------------------------------------------------
HOLD = "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('held', flush=True); " \
       "sys.stdin.read()"


def test_a_store_locked_by_another_process_says_so(tmp_path, capsys):
    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.add_results([_row(0)])
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for read_only in (False, True):
            with pytest.raises(StoreError) as info:
                Store(path, read_only=read_only)
            assert str(info.value) == (
                f"{path} is in use by another opatlas process (or DuckDB client), PID "
                f"{holder.pid}; wait for it or use another --store")
        code, _, err = cli_in_process(capsys, "results", "--store", str(path))
        one_error(code, err, "is in use by another opatlas process")
    finally:
        holder.communicate("", timeout=30)


def test_an_empty_store_file_is_named_as_such(tmp_path, capsys):
    path = tmp_path / "s.duckdb"
    path.touch()
    code, _, err = cli_in_process(capsys, "results", "--store", str(path))
    one_error(code, err, f"{path} is empty (0 bytes), not a DuckDB store")
    with pytest.raises(StoreError, match="is empty"):
        Store(path)
    assert path.stat().st_size == 0


# -- 5: a fresh worker runs its first vector once untimed --------------------------------------
RECORDING = '''
from opatlas.backends.base import Backend, register_backend


class RecordingBackend(Backend):
    """Logs each measure call (vector, repeats, warm-up runs); every repeat takes 1 us."""
    name = "recording"

    def __init__(self, log: str = "") -> None:
        self.log = log

    def device_name(self) -> str:
        return "rec"

    def measure(self, op, params, passes, repeats, warmup):
        with open(self.log, "a") as fh:
            fh.write(f"{params['i']} {repeats} {warmup}\\n")
        return {p: [1000] * repeats for p in passes}


register_backend("recording", f"{__name__}:RecordingBackend")
'''


def test_a_fresh_worker_warms_up_on_its_first_vector_before_timing_it(tmp_path):
    from opatlas.run.worker import WorkerHandle

    module, log = tmp_path / "rec.py", tmp_path / "calls.log"
    module.write_text(RECORDING)
    worker = WorkerHandle("recording", [str(module)], backend_options={"log": str(log)})
    try:
        first = worker.run("fault", {"i": 0}, ["fwd"], 5, 2, 60)
        second = worker.run("fault", {"i": 1}, ["fwd"], 5, 2, 60)
        worker.proc.kill()  # as if it had crashed: the next vector gets a fresh worker
        worker.proc.join(10)
        third = worker.run("fault", {"i": 2}, ["fwd"], 5, 2, 60)
    finally:
        worker.close()
    assert log.read_text().splitlines() == ["0 1 0", "0 5 2", "1 5 2", "2 1 0", "2 5 2"]
    assert first.status == second.status == third.status == "ok"
    assert first.timings == {"fwd": [1000] * 5}  # the measured call's, not the warm-up's


def test_a_crash_in_the_warm_up_is_the_vectors_crash_and_the_sweep_goes_on(tmp_path):
    spec = spec_from_mapping({"op": "fault", "params": {"i": [0, 1, 2]},
                              "fixed": {"crash_at": 0}, "repeats": 2, "warmup": 0})
    with Store(tmp_path / "s.duckdb") as st:
        summary = run_spec(spec, st, RunConfig(interactive=False, timeout_s=30))
        df = st.results().sort_values("i")
    assert summary.ran == 3 and list(df["status"]) == ["crash", "ok", "ok"]
    assert "exit code 3" in df["message"].iloc[0] and list(df["repeats"].iloc[1:]) == [2, 2]


# -- 6: csv output, unknown std, Ctrl-C during an import ---------------------------------------
def test_csv_to_stdout_ends_with_one_newline_and_unknown_std_shows_as_a_dash(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        st.add_results([_row(0), _row(1)])
        st.con.execute("UPDATE results SET std_ns = NULL WHERE vector_id = ?",
                       [vector_id("noop", {"i": 1})])
    code, out, _ = cli_in_process(capsys, "results", "--store", str(store), "--format", "csv")
    assert code == 0 and out.endswith("\n") and not out.endswith("\n\n")
    assert len(out.splitlines()) == 3
    code, out, _ = cli_in_process(capsys, "results", "--store", str(store))
    rows = [ln for ln in out.splitlines() if "noop" in ln]
    assert code == 0 and "nan" not in out
    spreads = sorted(ln.split("│")[6].strip() for ln in rows)
    assert spreads == ["-", "0.0"]


def test_ctrl_c_during_an_import_says_what_was_written(tmp_path, capsys, monkeypatch):
    part = tmp_path / "part.parquet"
    _export([_row(0)]).to_parquet(part)

    def interrupted(self, path):
        raise KeyboardInterrupt

    store = tmp_path / "s.duckdb"
    monkeypatch.setattr(Store, "import_results", interrupted)
    code, _, err = cli_in_process(capsys, "import", "results", str(part), "--store", str(store))
    assert code == 130 and "Traceback" not in err
    assert f"import interrupted; nothing was written to {store}" in err
    assert not store.exists()  # the store it had made is removed again

    folder = tmp_path / "samples"
    folder.mkdir()
    for op in ("gelu", "linear1"):
        (folder / f"NVIDIAA100-SXM4-80GB_{op}_fp16.csv").write_text(
            "mp,b,l,dim,F_dur(us),B_dur(us)\n1,2,128,512,10,20\n")
    add = Store.add_results
    calls = []

    def second_interrupted(self, rows):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return add(self, rows)

    monkeypatch.setattr(Store, "add_results", second_interrupted)
    code, _, err = cli_in_process(capsys, "import", "ett-samples", str(folder), "--store",
                                  str(store))
    assert code == 130 and "import interrupted; 2 result row(s) had been added to" in err


def test_a_query_interrupted_in_duckdb_is_a_keyboard_interrupt_and_rolled_back(tmp_path):
    with Store(tmp_path / "s.duckdb") as st:
        done = threading.Event()

        def keep_interrupting() -> None:
            while not done.wait(0.05):
                st.con.interrupt()

        def write_then_long_query() -> None:
            st.con.execute("INSERT INTO meta VALUES ('probe', 'x')").fetchall()
            st.con.execute("SELECT count(*) FROM range(100000000000) a").fetchall()

        thread = threading.Thread(target=keep_interrupting)
        thread.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                st._write(write_then_long_query)
        finally:
            done.set()
            thread.join()
        assert st.con.execute("SELECT count(*) FROM meta WHERE key = 'probe'").fetchall() == [(0,)]
        assert st.add_results([_row(0)]) == 1  # and the store goes on
