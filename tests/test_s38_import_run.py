"""Session 38: imports refuse rows that are no valid vector; ``run`` bounds its options."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, cli_in_process, one_error
from opatlas.backends import get_backend
from opatlas.backends.base import min_time_ns
from opatlas.backends.cpu import CpuBackend
from opatlas.cli.run_cmd import MAX_REPEATS, key_values
from opatlas.errors import OpatlasError
from opatlas.spec.model import SweepSpec
from opatlas.store import Store
from opatlas.sweep import vector_id

LINEAR_SPEC = str(REPO / "examples" / "specs" / "linear.yml")
HEADER = "b,l,dim,mp,F_dur(us),B_dur(us)\n"
GOOD = "1,128,2048,1,10,20\n1,128,2048,2,6,12\n"


def _samples(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "GPU_linear1_fp16.csv").write_text(HEADER + body)
    return folder


def _rows(store: Path) -> int:
    if not store.exists():
        return 0
    with Store(store, read_only=True) as st:
        return st.count()


# -- 1. ett-samples: a shape the catalog op refuses ------------------------------------------

@pytest.mark.parametrize(("bad", "line", "shape"), [
    ("1,128,2048,0,10,20\n", 4, "b=1, l=128, dim=2048, mp=0"),
    ("1,128,2048,3,10,20\n", 4, "b=1, l=128, dim=2048, mp=3"),
])
def test_ett_import_refuses_shape_breaking_a_rule(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path, bad: str, line: int,
                                                   shape: str) -> None:
    folder = _samples(tmp_path / "d", GOOD + bad)
    store = tmp_path / "s.duckdb"
    code, _, err = cli_in_process(capsys, "import", "ett-samples", str(folder), "--store",
                                  str(store))
    error = one_error(code, err)
    assert error == (f"opatlas: error: {folder / 'GPU_linear1_fp16.csv'}, line {line}: "
                     f"{shape}: invalid for op 'linear1' (catalog op 'linear'): dim % mp != 0; "
                     f"such a shape cannot be run or counted")
    assert _rows(store) == 0  # the good lines are not stored either, as for a negative time


def _imported(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Path:
    """A store of the GOOD samples, imported with ``import ett-samples``."""
    folder = _samples(tmp_path / "d", GOOD)
    store = tmp_path / "a.duckdb"
    code, out, err = cli_in_process(capsys, "import", "ett-samples", str(folder), "--store",
                                    str(store))
    assert code == 0, err
    assert out.strip() == f"added 4 rows from 1 files to {store}"
    return store


def test_ett_import_of_valid_shapes_counts_them(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    store = _imported(capsys, tmp_path)
    with Store(store, read_only=True) as st:
        df = st.results()
    # qkv of one TP shard: out = 3·dim/mp; fwd 2·T·in·out, T = b·l = 128
    fwd = df[df["pass"] == "fwd"].set_index("mp")["flops"].to_dict()
    assert fwd == {1: 2.0 * 128 * 2048 * 3 * 2048, 2: 2.0 * 128 * 2048 * 3 * 1024}


# -- 2. import results: an export round trip keeps the ids -------------------------------------

def _exported(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Path:
    store = _imported(capsys, tmp_path)
    out = tmp_path / "a.csv"
    assert cli_in_process(capsys, "results", "--store", str(store), "--out", str(out))[0] == 0
    return out


def test_import_results_round_trip_keeps_ids(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    csv = _exported(capsys, tmp_path)
    store = tmp_path / "b.duckdb"
    code, out, err = cli_in_process(capsys, "import", "results", str(csv), "--store",
                                    str(store))
    assert code == 0, err
    assert out.strip() == f"added 4 rows to {store}"
    with Store(store, read_only=True) as st:
        ids = set(st.results()["vector_id"])
    assert ids == {vector_id("linear1", {"b": 1, "l": 128, "dim": 2048, "mp": mp,
                                         "dtype": "fp16"}) for mp in (1, 2)}


# -- 3. run --repeats / --warmup: the spec's cap ---------------------------------------------

def test_repeats_cap_is_the_specs() -> None:
    for name in ("repeats", "warmup"):
        caps = [m.le for m in SweepSpec.model_fields[name].metadata if hasattr(m, "le")]
        assert caps == [MAX_REPEATS]


@pytest.mark.parametrize("flag", ["--repeats", "--warmup"])
def test_run_refuses_repeats_over_cap(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      flag: str) -> None:
    store = tmp_path / "s.duckdb"
    code, _, err = cli_in_process(capsys, "run", LINEAR_SPEC, flag, str(MAX_REPEATS + 1),
                                  "--store", str(store))
    one_error(code, err, f"Invalid value for '{flag}': Input should be less than or equal to "
                         f"100000")
    assert not store.exists()


# -- 4. --backend-opt KEY= ----------------------------------------------------------------------

def test_run_refuses_empty_backend_option(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    code, _, err = cli_in_process(capsys, "run", LINEAR_SPEC, "--backend-opt", "threads=",
                                  "--store", str(store))
    assert one_error(code, err) == (
        "opatlas: error: --backend-opt 'threads=': threads has an empty value; give "
        "threads=VALUE, or leave the option out for its default")
    assert not store.exists()


def test_key_values_keeps_given_values() -> None:
    assert key_values(["threads = 2", "min_time_ms=0.5"], "--backend-opt") == {
        "threads": "2", "min_time_ms": "0.5"}


def test_backend_refuses_empty_values_outside_the_cli() -> None:
    with pytest.raises(OpatlasError) as exc:
        get_backend("cpu", threads="")
    assert str(exc.value) == ("backend 'cpu': option(s) threads given an empty value; give "
                              "KEY=VALUE, or leave the option out for its default")
    with pytest.raises(ValueError, match=r"^threads must be a whole number >= 1, got ''$"):
        CpuBackend(threads="")
    with pytest.raises(ValueError, match=r"^min_time_ms must be a number of milliseconds, "
                                         r"got ''$"):
        min_time_ns("")
    assert CpuBackend(threads="3").threads == 3
    assert min_time_ns(None) == 0
