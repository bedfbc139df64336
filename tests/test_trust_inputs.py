"""Bad input on the model commands (issue 13, item 7): one clear line and exit 2, never a
traceback — by hand for the reported cases, and fuzzed over predict, estimate and fit."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from opatlas.cli import main
from opatlas.errors import SpecError
from opatlas.spec import spec_from_mapping
from opatlas.store.ett import bundled_dataset

A100 = "NVIDIAA100-SXM4-80GB"


def _exit_code(argv: list[str]) -> int:
    """Run the CLI in-process; any exception other than SystemExit fails the test."""
    try:
        main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def test_predict_unknown_linear_role_names_the_roles(capsys):
    """Found by the fuzzer below: a role that is no linear role was a KeyError traceback."""
    assert _exit_code(["predict", "linear", "--device", "A100", "--shape", "role=mp"]) == 2
    err = capsys.readouterr().err
    assert "unknown role 'mp'" in err and "qkv, out, ffn_up, ffn_down" in err


def test_predict_linear_by_role_is_the_roles_op(capsys):
    """`linear --shape role=qkv` was an AttributeError traceback; it is linear1's prediction."""
    shape = ["--shape", "mp=2", "--shape", "b=4", "--shape", "l=2048", "--shape", "dim=4096"]
    assert _exit_code(["predict", "linear", "--device", "A100", "--shape", "role=qkv", *shape]) == 0
    by_role = capsys.readouterr().out.replace("linear ", "")
    assert _exit_code(["predict", "linear1", "--device", "A100", *shape]) == 0
    assert by_role == capsys.readouterr().out.replace("linear1 ", "")
    assert "fwd:" in by_role and "bwd:" in by_role


def test_predict_missing_parameters_is_one_clear_line():
    proc = run_cli("predict", "linear1", "--shape", "mp=2")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "opatlas: error: op 'linear1' takes shape parameters b, dim, l, mp (optional: ffn, "
        "vocab, h, kv_heads, head_dim); missing b, dim, l"]


def test_predict_unknown_parameter_and_bad_values():
    full = ["--shape", "mp=2", "--shape", "b=4", "--shape", "l=4096", "--shape", "dim=4096"]
    proc = run_cli("predict", "linear1", *full, "--shape", "heads=8")
    assert proc.returncode == 2 and "unknown heads" in proc.stderr
    proc = run_cli("predict", "linear1", *full[:-1], "dim=4097")
    assert proc.returncode == 2 and "not valid for op 'linear1': dim % mp != 0" in proc.stderr
    proc = run_cli("predict", "linear1", *full[:-1], "dim=big")
    assert proc.returncode == 2 and "dim must be a number" in proc.stderr


def test_range_with_step_zero_says_what_is_wrong():
    spec = {"name": "x", "op": "linear", "params": {"mp": [1], "b": [1], "l": [128],
                                                    "dim": {"start": 512, "step": 0, "end": 2048}}}
    with pytest.raises(SpecError) as err:
        spec_from_mapping(spec, file="s.yml")
    assert str(err.value) == ("In file s.yml, key 'params.dim', value {'start': 512, 'step': 0, "
                              "'end': 2048}: step must be > 0 for mode add, got 0")
    spec["params"]["dim"] = {"start": 512, "step": 1, "end": 2048, "mode": "mul"}
    with pytest.raises(SpecError, match=r"step must be > 1 for mode mul, got 1$"):
        spec_from_mapping(spec)
    spec["params"]["dim"] = {"start": 512, "end": 2048}
    with pytest.raises(SpecError, match="a range needs start, step and end; 'step' is missing"):
        spec_from_mapping(spec)


WORDS = st.sampled_from(["mp", "b", "l", "dim", "h", "foo", "", "=", "-1", "0", "4096", "1e400",
                         "nan", "inf", "2.5", "role", "qkv", "abc", " "])
SHAPE = st.lists(st.builds(lambda a, b, c: f"{a}{b}{c}", WORDS, st.sampled_from(["=", ""]),
                           WORDS), max_size=5)
FUZZ = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(op=st.sampled_from(["linear1", "gelu", "flash_atten", "linear", "nosuch", "bmm", ""]),
       shape=SHAPE, device=st.sampled_from(["A100", A100, "H100", "MyGPU"]))
def test_fuzz_predict_never_tracebacks(op, shape, device):
    argv = ["predict", op, "--device", device]
    for item in shape:
        argv += ["--shape", item]
    assert _exit_code(argv) in (0, 2)


@FUZZ
@given(config=st.sampled_from(["llemma_7b_4_2_2_P", "nosuch", "", "/", "llama2-7b"]),
       extra=st.lists(st.sampled_from(["--search", "--gpus", "0", "-3", "64", "x", "--top",
                                       "--strict", "--analytical", "--json", "7"]), max_size=4))
def test_fuzz_estimate_never_tracebacks(config, extra):
    assert _exit_code(["estimate", config, *extra]) in (0, 2)


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzzdata")  # 20 rows: each fit takes a moment
    lines = (bundled_dataset() / "operator" / f"{A100}_res_add_fp16.csv").read_text().splitlines()
    (folder / f"{A100}_res_add_fp16.csv").write_text("\n".join(lines[:21]) + "\n")
    return str(folder)


@FUZZ
@given(split=st.sampled_from(["random", "random:0", "random:1.5", "random:x", "kfold:0",
                              "kfold:1", "kfold:abc", "kfold:2", "extrapolate:dim:0.2",
                              "extrapolate:dim:2", "extrapolate:nosuch", "group:", "group:b",
                              "bogus", "extrapolate:dim:nan"]),
       recipe=st.sampled_from(["hybrid", "gbm", "nosuch"]),
       op=st.sampled_from(["res_add", "nosuch"]))
def test_fuzz_fit_never_tracebacks(small_data, split, recipe, op):
    argv = ["fit", "--data", small_data, "--split", split, "--recipe", recipe, "--op", op,
            "--no-baseline", "--json"]
    assert _exit_code(argv) in (0, 2)


def test_fit_on_a_missing_folder_or_bad_yaml(tmp_path):
    assert _exit_code(["fit", "--data", str(tmp_path / "nope")]) == 2
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"model": {"layers": 0}}))
    assert _exit_code(["estimate", str(bad)]) == 2
