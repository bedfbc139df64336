"""An --ops-module that registers no op is said (an error under --strict): the user's ops are
not there, and what follows would fail on them with a less direct message."""

from __future__ import annotations

import pytest

from conftest import cli_in_process, one_error
from opatlas.cli.common import load_ops_modules
from opatlas.errors import OpatlasError
from opatlas.ops import get_op, load_ops_module


def test_a_module_registering_nothing_is_said(tmp_path, capsys):
    empty = tmp_path / "empty_ops.py"
    empty.write_text("X = 1\n")
    code, _, err = cli_in_process(capsys, "ops", "--ops-module", str(empty), "--json")
    assert code == 0
    assert f"--ops-module {empty}: registers no op" in err


def test_strict_refuses_it(tmp_path):
    empty = tmp_path / "empty_strict.py"
    empty.write_text("X = 1\n")
    with pytest.raises(OpatlasError, match=r"registers no op.*--strict"):
        load_ops_modules([str(empty)], strict=True)


def test_a_module_with_an_op_is_not_said_even_imported_twice(tmp_path, monkeypatch):
    from opatlas.ops import registry

    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))  # leaves no alias behind
    mod = tmp_path / "one_op.py"
    mod.write_text(
        "from opatlas.ops import register_alias\n"
        "register_alias('linear_s35_probe', 'linear', role='qkv')\n")
    assert load_ops_module(mod) is True
    assert load_ops_module(mod) is True  # imported before: nothing to say
    assert get_op("linear_s35_probe")[0].name == "linear"
    load_ops_modules([str(mod)], strict=True)


def test_predict_strict_refuses_an_empty_module(tmp_path, capsys):
    empty = tmp_path / "empty_predict.py"
    empty.write_text("X = 1\n")
    code, _, err = cli_in_process(capsys, "predict", "linear1", "--shape",
                                  "mp=1,b=1,l=512,dim=1024", "--ops-module", str(empty),
                                  "--strict")
    one_error(code, err, "registers no op", str(empty))


def test_a_module_imported_elsewhere_answers_by_its_ops(tmp_path, capsys, monkeypatch):
    """``--ops-module os`` (imported long before, never an ops module) is said like any module
    that registers nothing; an empty file imported twice is said both times; the built-in
    catalog's module, imported before too, registers ops."""
    code, _, err = cli_in_process(capsys, "ops", "--ops-module", "os", "--json")
    assert code == 0 and "--ops-module os: registers no op" in err
    empty = tmp_path / "empty_twice.py"
    empty.write_text("X = 1\n")
    assert load_ops_module(empty) is False
    monkeypatch.chdir(tmp_path)
    assert load_ops_module("empty_twice.py") is False  # the same file by another path
    assert load_ops_module("opatlas.ops.basic") is True
    assert load_ops_module("opatlas.ops") is True  # a package holding op modules


def test_a_module_registering_only_an_alias_imported_by_another_first(tmp_path, monkeypatch,
                                                                      capsys):
    """``--ops-module mya --ops-module myb`` where mya imports myb, whose one call registers
    an alias: myb registered it (not "registers no op", not an error under --strict)."""
    from opatlas.ops import registry

    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    (tmp_path / "mya_s39.py").write_text("import myb_s39  # noqa: F401\n")
    (tmp_path / "myb_s39.py").write_text(
        "from opatlas.ops import register_alias\n"
        "register_alias('linear_s39_probe', 'linear', role='qkv')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    load_ops_modules(["mya_s39", "myb_s39"], strict=True)
    assert get_op("linear_s39_probe")[0].name == "linear"


def test_a_package_folder_by_its_bare_name_is_imported_as_a_module(tmp_path, monkeypatch):
    """``--ops-module mypkg`` with ``mypkg/`` (a package) in the current folder imports the
    package, as ``python -m`` finds it, instead of "no such file"; a plain folder is refused
    as one."""
    from opatlas.errors import OpatlasError

    pkg = tmp_path / "mypkg_s39"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from opatlas.ops import register_alias\n"
        "register_alias('linear_s39_pkg', 'linear', role='qkv')\n")
    (tmp_path / "plain_s39").mkdir()
    monkeypatch.chdir(tmp_path)
    from opatlas.ops import registry

    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    assert load_ops_module("mypkg_s39") is True
    assert get_op("linear_s39_pkg")[0].name == "linear"
    with pytest.raises(OpatlasError, match="plain_s39: is a folder"):
        load_ops_module("plain_s39")
