"""Bad input to ``reblock``, ``collectives`` and ``bound conv|einsum``: one error line naming
the option and the value, exit code 2, no traceback; data text printed as it is."""

from __future__ import annotations

import json

import pytest

from conftest import cli_in_process, one_error

README_REBLOCK = ("--producer", "7x1", "--consumer", "2x1", "--height", "14", "--width", "4",
                  "--rows-first")


def _with(args: tuple[str, ...], option: str, value: str) -> list[str]:
    """The README's reblock arguments with one option replaced or added."""
    out = list(args)
    if option in out:
        out[out.index(option) + 1] = value
    else:
        out += [option, value]
    return out


# 1. reblock

@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--producer", "0x1", "positive integers"),
    ("--producer", "abc", "XxY"),
    ("--consumer", "7x0", "positive integers"),
    ("--consumer", "9x1", "1..8"),
    ("--strategy", "FOO", "BLOCK, WIDTH, HEIGHT"),
    ("--strategy", "hight", "BLOCK, WIDTH, HEIGHT"),
])
def test_reblock_bad_grid_or_strategy_is_one_line(capsys, option, value, expected):
    code, _, err = cli_in_process(capsys, "reblock", *_with(README_REBLOCK, option, value))
    one_error(code, err, option, repr(value), expected)


def test_reblock_readme_example_still_works(capsys):
    code, out, err = cli_in_process(capsys, "reblock", *README_REBLOCK)
    assert code == 0, err
    # the grids come back in the notation they were given in, and it is named
    assert '"producer": "7x1"' in out and '"consumer": "2x1"' in out
    assert '"grid_notation": "rows x columns"' in out


# 2. collectives: checked before any worker is launched

@pytest.fixture
def no_launch(monkeypatch):
    import opatlas.ops.collectives as coll

    def refuse(*args, **kwargs):
        raise AssertionError("torchrun was launched for input that cannot run")

    monkeypatch.setattr(coll, "run_collective", refuse)


def test_collectives_unknown_dtype_lists_known_ones(capsys, no_launch):
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce", "--sizes", "1024",
                                  "--dtype", "foo")
    one_error(code, err, "--dtype", "'foo'", "fp32", "bf16")


def test_collectives_nccl_without_cuda_says_use_gloo(capsys, no_launch, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce", "--sizes", "1024",
                                  "--backend", "nccl")
    one_error(code, err, "nccl", "CUDA", "gloo")


def test_collectives_unknown_backend(capsys, no_launch):
    code, _, err = cli_in_process(capsys, "collectives", "all_reduce", "--backend", "mpi")
    one_error(code, err, "--backend", "'mpi'", "gloo", "nccl")


# 3. rich tables print mappings, not markup

def test_einsum_table_shows_the_mappings(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = cli_in_process(capsys, "bound", "einsum", "bmk,bkn->bmn",
                                    "--dims", "b=8,m=512,k=64,n=512")
    assert code == 0, err
    assert "DRAM[b8 m512 n512 k64] Buffer[b1 m1 k1 n1]" in out, out


def test_imperfect_title_is_printed(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = cli_in_process(capsys, "bound", "gemm", "16", "16", "16", "--imperfect")
    assert code == 0, err
    assert "[imperfect tiling]" in out, out


# 4. conv fields and einsum dims

def test_conv_name_needs_all_eleven_fields(capsys):
    code, _, err = cli_in_process(capsys, "bound", "conv", "3_3_16")
    one_error(code, err, "'3_3_16'", "11 fields",
               "R_S_P_Q_C_K_N_Wstride_Hstride_Wdilation_Hdilation")


@pytest.mark.parametrize(("name", "bad"), [("3_3_16_16_64_64_1_0_2_1_1", "Wstride must"),
                                           ("3_3_16_16_64_64_1_1_1_1_0", "Hdilation must")])
def test_conv_zero_stride_or_dilation_is_an_error(capsys, name, bad):
    code, _, err = cli_in_process(capsys, "bound", "conv", name)
    one_error(code, err, name, bad, ">= 1")


def test_conv_option_zero_stride_is_a_usage_error(capsys):
    code, _, err = cli_in_process(capsys, "bound", "conv", "--wstride", "0")
    assert code == 2 and "Traceback" not in err and "--wstride" in err, err


def test_conv_name_with_options_is_an_error(capsys):
    code, _, err = cli_in_process(capsys, "bound", "conv", "3_3_16_16_64_64_1_1_1_1_1",
                                  "--wstride", "2")
    one_error(code, err, "--wstride", "not both")


def test_conv_keyword_name_says_its_defaults(capsys):
    code, out, err = cli_in_process(capsys, "bound", "conv", "Conv(P=16, C=4, K=4)", "--json")
    assert code == 0, err
    warning = [ln for ln in err.splitlines() if ln.startswith("opatlas: warning")]
    assert len(warning) == 1 and "R, S, Q, N, Wstride" in warning[0], err
    assert '"1_1_16_1_4_4_1_1_1_1_1"' in out or "1_1_16_1_4_4_1_1_1_1_1" in out


def test_conv_sizes_as_accel_takes_them_give_the_named_conv(capsys):
    """``bound conv R S P Q C K`` reads sizes as ``bound accel --problem conv`` does: the same
    bound as the 11-field name, each field left out said and taken as 1."""
    code, by_name, _ = cli_in_process(capsys, "bound", "conv", "3_3_16_16_64_64_1_2_1_1_1",
                                      "--json")
    assert code == 0
    sizes = ["3", "3", "16", "16", "64", "64", "1", "2"]
    code, by_sizes, err = cli_in_process(capsys, "bound", "conv", *sizes, "--json")
    assert code == 0 and json.loads(by_sizes) == json.loads(by_name)
    assert "warning" not in err  # N and the strides are optional, 1 as the help says
    code, _, err = cli_in_process(capsys, "bound", "conv", "3", "3", "16", "16", "64")
    warning = [ln for ln in err.splitlines() if ln.startswith("opatlas: warning")]
    assert code == 0 and len(warning) == 1 and "K, N, Wstride" in warning[0], err
    from opatlas.cli.bound_cmd import _accel_problem

    assert _accel_problem("conv", [3, 3, 16, 16, 64, 64, 1, 2]).name == \
        "3_3_16_16_64_64_1_2_1_1_1"


@pytest.mark.parametrize(("args", "needle"), [
    (["3", "x"], "expected sizes"), ([str(i) for i in range(1, 13)], "takes 1 to 11 sizes"),
    (["3", "0"], "S must be an int >= 1, got 0"), (["3", "3", "--r", "2"], "not both")])
def test_conv_bad_sizes_are_one_line(capsys, args, needle):
    code, _, err = cli_in_process(capsys, "bound", "conv", *args)
    one_error(code, err, needle)


@pytest.mark.parametrize("text", ["Conv(P=16, X=3)", "Conv(P=16, P=3)", "3_3_a_16_64_64_1_1_1_1_1"])
def test_conv_bad_keyword_or_field_names_it(capsys, text):
    code, _, err = cli_in_process(capsys, "bound", "conv", text)
    one_error(code, err, repr(text))


def test_einsum_dim_not_in_expression_is_named(capsys):
    code, _, err = cli_in_process(capsys, "bound", "einsum", "bmk,bkn->bmn",
                                  "--dims", "b=8,m=512,k=64,n=512,z=3")
    one_error(code, err, "'z'", "bmk,bkn->bmn")


@pytest.mark.parametrize(("dims", "needle"), [("b=8,m=512,k=64,n", "'n'"),
                                              ("b=8,m=512,k=x,n=5", "'k=x'"),
                                              ("b=8,m=512,k=64,n=512,b=3", "b given twice"),
                                              ("b=8,m=512,k=64,n=0", "n=0")])
def test_einsum_bad_dims_are_one_line(capsys, dims, needle):
    code, _, err = cli_in_process(capsys, "bound", "einsum", "bmk,bkn->bmn", "--dims", dims)
    one_error(code, err, needle)


@pytest.mark.parametrize(("args", "needle"), [
    (("--problem", "gemm"), "give its sizes after the architecture, M K N"),
    (("--problem", "conv"), "R S P Q C K"),
    (("--problem", "gbmm", "64", "64", "64", "4", "3"), "4 heads do not split evenly into 3"),
    (("--problem", "gemm", "64", "64", "64", "--buffer-sizes", "1,,8"), "--buffer-sizes"),
])
def test_accel_problem_mistakes_are_one_clear_line(capsys, args, needle):
    one_error(*cli_in_process(capsys, "bound", "accel", "simba", *args)[::2], needle)


def test_accel_takes_a_problem_quoted_with_its_sizes(capsys):
    from opatlas.cli.bound_cmd import _accel_problem

    assert _accel_problem("gemm 64 32 16", []).ranks == {"M": 64, "K": 32, "N": 16}
