"""``opatlas collectives OP[,OP...]|all``: several collectives planned per op, then measured in
ONE torchrun launch; a repeated name once, an unknown one refused, a failure in a later op
keeping what the earlier ones measured, the worker's ``--op``/``--sizes`` pairs."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import cli_in_process, one_error
from opatlas.ops import collectives
from opatlas.ops.collectives import COLLECTIVES
from opatlas.store import Store


def _stored(path: Path, op: str) -> list[tuple[int, str]]:
    with Store(path, read_only=True) as st:
        df = st.results(op=f"collective.{op}")
    if df.empty:
        return []
    df = df.sort_values("elements")
    return list(zip(df["elements"], df["status"], strict=True))


def _fake_run(plans: list, median_ns: float = 1e5):
    """``run_collectives`` without torchrun, recording each plan; ``run_collective`` as it."""
    def run_many(plan, nproc, *, backend, dtype, repeats, link_peak_gbps, **_):
        plans.append({op: list(sizes) for op, sizes in plan.items()})
        rows = [{"op": op, "elements": n, "bytes": 4 * n, "world_size": nproc, "dtype": dtype,
                 "backend": backend, "samples_ns": [median_ns] * repeats, "correct": True}
                for op, sizes in plan.items() for n in sizes]
        return collectives.summarize_samples(rows, link_peak_gbps)

    def run_one(op, sizes, nproc, **kwargs):
        return run_many({op: sizes}, nproc, **kwargs)
    return run_many, run_one


@pytest.fixture
def fake(monkeypatch):
    plans: list = []
    run_many, run_one = _fake_run(plans)
    monkeypatch.setattr(collectives, "run_collectives", run_many)
    monkeypatch.setattr(collectives, "run_collective", run_one)
    monkeypatch.setattr("opatlas.cli.collectives_cmd._usable_cores", lambda: 16)
    return plans


def test_all_measures_every_collective_in_one_launch_and_stores_each(capsys, tmp_path,
                                                                     monkeypatch):
    """A real torchrun launch (2 gloo ranks), counted."""
    launches = []
    real_launch = collectives.launch

    def counted(*args, **kwargs):
        launches.append(args[0])
        return real_launch(*args, **kwargs)

    monkeypatch.setattr(collectives, "launch", counted)
    store = tmp_path / "c.duckdb"
    code, out, err = cli_in_process(capsys, "collectives", "all", "--sizes", "512,1024",
                                    "--repeats", "2", "--store", str(store), "--json")
    assert code == 0, err
    assert len(launches) == 1
    rows = json.loads(out)
    assert [(r["op"], r["elements"]) for r in rows] == [
        (op, n) for op in COLLECTIVES for n in (512, 1024)]
    assert all(r["status"] == "ok" and r["world_size"] == 2 for r in rows), rows
    for op in COLLECTIVES:
        assert _stored(store, op) == [(512, "ok"), (1024, "ok")], op


def test_a_comma_list_plans_each_op_prints_each_row_and_says_held_rows_per_op(capsys, tmp_path,
                                                                               fake):
    store = tmp_path / "c.duckdb"
    code, _, err = cli_in_process(capsys, "collectives", "all_gather", "--sizes", "1024",
                                  "--repeats", "2", "--store", str(store))
    assert code == 0 and err == "", err
    code, out, err = cli_in_process(capsys, "collectives", "all_reduce, all_gather,all_reduce",
                                    "--nproc", "3", "--sizes", "1024,4096,1024", "--repeats",
                                    "2", "--store", str(store))
    assert code == 0, err
    # planned per op: all_gather rounds to a multiple of the 3 ranks, all_reduce does not
    assert fake[-1] == {"all_reduce": [1024, 4096], "all_gather": [1023, 4095]}
    lines = out.splitlines()
    assert [ln.split()[:2] for ln in lines] == [["all_reduce", "1024"], ["all_reduce", "4096"],
                                                ["all_gather", "1023"], ["all_gather", "4095"]]
    notes = err.splitlines()
    assert notes.count("opatlas: all_reduce is on the list already; measured once") == 1, err
    assert notes.count("opatlas: --sizes 1024: 1024 elements are on the list already; "
                       "measured once (all_reduce)") == 1, err  # all_gather's is 1023
    assert "opatlas: --sizes 1024: all_gather on 3 ranks measures 1023 elements (341 per rank)" \
        in notes, err
    assert not [ln for ln in notes if "already holds" in ln], err  # 1023 on 3 ranks is new
    assert _stored(store, "all_reduce") == [(1024, "ok"), (4096, "ok")]
    assert _stored(store, "all_gather") == [(1023, "ok"), (1024, "ok"), (4095, "ok")]
    # the store's rows are looked up per op: all_gather's 1024 is held, send_recv's is new;
    # a repeated size's note, the same for both ops, is said once
    code, _, err = cli_in_process(capsys, "collectives", "send_recv,all_gather", "--sizes",
                                  "1024,1024", "--repeats", "2", "--store", str(store))
    assert code == 0, err
    assert err.count("1024 elements are on the list already") == 1, err
    held = [ln for ln in err.splitlines() if "already holds" in ln]
    assert len(held) == 1 and "already holds all_gather at 1024 elements on 2 ranks" in held[0]
    assert _stored(store, "send_recv") == [(1024, "ok")]


def test_an_unknown_or_missing_name_is_one_error_listing_the_valid_ones(capsys, fake):
    valid = "all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, or all"
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce,broadcast,scan,broadcast")
    one_error(code, err, "unknown collectives 'broadcast', 'scan';", valid)
    code, _, err = cli_in_process(capsys, "collectives", "all,gather")
    one_error(code, err, "unknown collective 'gather';", valid)
    code, _, err = cli_in_process(capsys, "collectives", " , ")
    one_error(code, err, "no collective given", valid)
    assert fake == []  # nothing launched


def test_a_failure_in_the_second_op_keeps_the_first_ops_rows():
    """A real torchrun launch: all_gather's 513 elements do not split over 2 ranks (which
    planning would have rounded), so every rank raises there, after all_reduce's sizes."""
    with pytest.raises(collectives.CollectiveFailed) as info:
        collectives.measure_plan({"all_reduce": [512, 1024], "all_gather": [513]}, 2,
                                 backend="gloo", dtype="fp32", repeats=2, warmup=1,
                                 link_peak_gbps=None, timeout_s=120)
    msg = str(info.value)
    assert msg.startswith("torchrun all_reduce,all_gather on 2 ranks failed: rank "), msg
    assert ", all_gather at 513 elements: RuntimeError: " in msg, msg  # from rankN.error
    assert msg.endswith("(kept the sizes measured before: all_reduce 512, 1024)"), msg
    partial = info.value.partial
    assert list(zip(partial["op"], partial["elements"], partial["status"], strict=True)) == [
        ("all_reduce", 512, "ok"), ("all_reduce", 1024, "ok")]


def test_the_cli_prints_and_stores_the_rows_before_a_failure_or_ctrl_c(capsys, tmp_path,
                                                                       monkeypatch):
    done = _fake_run([])[0]({"all_reduce": [1024]}, 2, backend="gloo", dtype="fp32",
                            repeats=2, link_peak_gbps=None)

    def fail(plan, nproc, **_):
        raise collectives.CollectiveFailed("torchrun all_reduce,all_gather on 2 ranks failed: "
                                           "rank 1, all_gather at 1024 elements: boom", done)

    def interrupt(plan, nproc, **_):
        raise collectives.CollectiveInterrupted(done)

    store = tmp_path / "c.duckdb"
    args = ("collectives", "all_reduce,all_gather", "--sizes", "1024", "--repeats", "2",
            "--store", str(store))
    monkeypatch.setattr(collectives, "run_collectives", fail)
    code, out, err = cli_in_process(capsys, *args)
    one_error(code, err, "rank 1, all_gather at 1024 elements: boom")
    assert out.startswith("all_reduce") and len(out.splitlines()) == 1, out
    assert _stored(store, "all_reduce") == [(1024, "ok")] and _stored(store, "all_gather") == []
    monkeypatch.setattr(collectives, "run_collectives", interrupt)
    code, out, err = cli_in_process(capsys, *args)
    assert code == 130 and err.splitlines()[-1] == (
        "opatlas: interrupted; every rank was stopped; the sizes measured before "
        "(all_reduce 1024) are kept"), err


SLEEPY_TORCHRUN = textwrap.dedent('''
    import json, pathlib, sys, time
    row = {"op": "all_reduce", "elements": 1024, "bytes": 4096, "world_size": 2,
           "dtype": "fp32", "backend": "gloo", "samples_ns": [1000, 1000], "correct": True}
    pathlib.Path(sys.argv[1], "samples.jsonl").write_text(json.dumps(row) + "\\n")
    time.sleep(60)
''')


def test_the_timeout_covers_the_whole_launch(tmp_path, monkeypatch):
    script = tmp_path / "sleepy_torchrun.py"
    script.write_text(SLEEPY_TORCHRUN)
    cmds: list = []

    def cmd(*args):
        cmds.append(args)
        return [sys.executable, str(script), str(args[-1])]

    monkeypatch.setattr(collectives, "_torchrun_cmd", cmd)
    with pytest.raises(collectives.CollectiveFailed) as info:
        collectives.run_collectives({"all_reduce": [1024], "send_recv": [8, 8]}, 2, repeats=2,
                                    timeout_s=1)
    assert len(cmds) == 1 and cmds[0][0] == {"all_reduce": [1024], "send_recv": [8]}
    assert str(info.value) == ("torchrun all_reduce,send_recv on 2 ranks timed out after 1 s "
                               "(--timeout) (kept the sizes measured before: all_reduce 1024)")


def test_the_worker_takes_op_and_sizes_pairs(capsys):
    from opatlas.ops import collective_worker as worker

    assert worker.OPS == COLLECTIVES
    plan = {"all_reduce": [1024], "all_gather": [512, 1024]}
    cmd = collectives._torchrun_cmd(plan, 2, "gloo", "fp32", 3, 1, Path("/tmp/x"))
    argv = cmd[cmd.index("opatlas.ops.collective_worker") + 1:]
    args = worker._args(argv)
    assert args.plan == list(plan.items())
    assert (args.repeats, args.warmup, args.out) == (3, 1, "/tmp/x")
    rest = ["--backend", "gloo", "--dtype", "fp32", "--out", "/tmp/x"]
    for bad, why in ((["--op", "all_reduce", "--op", "send_recv", "--sizes", "8"],
                      "2 --op but 1 --sizes"),
                     (["--op", "broadcast", "--sizes", "8"], "invalid choice: 'broadcast'"),
                     (["--op", "all_reduce", "--sizes", "8,x"], "expected comma-separated"),
                     (["--op", "all_reduce", "--sizes", "8,0"], "> 0"),
                     (["--op", "all_reduce"], "--sizes")):
        with pytest.raises(SystemExit) as info:
            worker._args([*bad, *rest])
        assert info.value.code == 2 and why in capsys.readouterr().err, bad


def test_an_empty_item_in_a_list_is_refused_not_skipped(capsys, fake):
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce", "--sizes", "1024,,2048")
    one_error(code, err, "--sizes '1024,,2048': an empty item between commas")
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce,", "--sizes", "1024")
    one_error(code, err, "OP 'all_reduce,': an empty item between commas")
    assert fake == []  # nothing launched


def test_a_size_one_op_cannot_take_is_left_out_for_it_alone(capsys, fake):
    """``all --nproc 3 --sizes 2,1024``: all_gather, reduce_scatter and all_to_all cannot split
    2 elements over 3 ranks; they measure 1023 only, the others both sizes, all in one launch;
    a note names each op left out. A repeated size's note names the ops it is about, once."""
    code, _, err = cli_in_process(capsys, "collectives", "all", "--nproc", "3", "--sizes",
                                  "2,1024,1024")
    assert code == 0, err
    per_rank = ("all_gather", "reduce_scatter", "all_to_all")
    assert fake == [{op: [2, 1024] if op not in per_rank else [1023] for op in COLLECTIVES}]
    for op in per_rank:
        assert (f"--sizes 2: {op} splits the buffer over the 3 ranks (--nproc) and needs at "
                f"least one element per rank: left out for {op}, measured for the others") in err
    assert ("--sizes 1024: 1024 elements are on the list already; measured once "
            "(all_reduce, send_recv)") in err
    assert ("--sizes 1024: 1023 elements are on the list already; measured once "
            "(all_gather, reduce_scatter, all_to_all)") in err
    code, _, err = cli_in_process(capsys, "collectives", "all_gather,reduce_scatter", "--nproc",
                                  "3", "--sizes", "2")
    one_error(code, err, "--sizes 2: no size that any of all_gather, reduce_scatter can take "
                         "on 3 ranks")
    assert "left out" not in err
    code, _, err = cli_in_process(capsys, "collectives", "all_gather", "--nproc", "3",
                                  "--sizes", "2,1024")
    one_error(code, err, "--sizes 2: all_gather splits the buffer")  # one op: refused
    assert len(fake) == 1


def test_the_api_refuses_an_op_without_sizes_before_launching():
    with pytest.raises(collectives.OpatlasError, match="all_reduce: no size to measure"):
        collectives.run_collectives({"all_reduce": [], "send_recv": [8]}, 2, repeats=1)
