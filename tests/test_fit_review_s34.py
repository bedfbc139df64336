"""fit's table shows the split as typed: Rich would read ':b:' in extrapolate:b:0.2 as an
emoji code; predict takes the dtype as --dtype, not in --shape (it was taken and ignored)."""

from __future__ import annotations

from conftest import cli_in_process, one_error


def test_the_split_in_the_title_is_shown_as_typed(capsys):
    code, out, err = cli_in_process(capsys, "fit", "--op", "linear1", "--split",
                                    "extrapolate:b:0.2", "--no-baseline")
    assert code == 0, err
    assert "split extrapolate:b:0.2" in out


def test_a_dtype_in_the_shape_points_to_the_dtype_option(capsys):
    code, _, err = cli_in_process(capsys, "predict", "linear1", "--shape",
                                  "mp=2,b=4,l=4096,dim=4096,dtype=bf16")
    one_error(code, err, "--shape 'dtype=bf16'", "not a shape parameter", "--dtype bf16")
