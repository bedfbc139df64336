"""A --set value that is no valid tp or pp, given with --gpus, is blamed on the --set that gave
it: dp = gpus / (tp·pp) is derived only from valid values, so the config's validation names
the bad one."""

from __future__ import annotations

import pytest

from conftest import cli_in_process, one_error


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("tp", "abc", "valid integer"), ("pp", "abc", "valid integer"),
    ("tp", "0", "greater than 0")])
def test_a_bad_set_with_gpus_names_the_set(capsys, key, value, needle):
    code, _, err = cli_in_process(capsys, "estimate", "qwen3-8b", "--gpus", "64", "--set",
                                  f"parallel.{key}={value}")
    line = one_error(code, err, "In --set", f"key 'parallel.{key}'", needle)
    assert "qwen3-8b.json" not in line


def test_a_valid_tp_that_does_not_divide_gpus_says_the_set_in_play(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "qwen3-8b", "--gpus", "64", "--set",
                                  "parallel.tp=3")
    one_error(code, err, "--gpus 64 is not a multiple of tp·pp = 3·1",
              "(with --set parallel.tp=3)")


@pytest.mark.parametrize(("item", "needle"), [
    ("model.kv_heads=1", "key 'parallel.tp', value 2: tp 2 must divide kv_heads 1"),
    ("model.heads=31", "hidden 4096 is not divisible by heads 31")])
def test_a_rule_broken_by_a_set_of_its_other_key_names_that_set(capsys, item, needle):
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--set", item)
    one_error(code, err, needle, f"(with --set {item})")
