"""Review s36 of ``opatlas analyze`` on PyBuda netlists: a bad number, data format or input
name in a netlist is one error line naming the file, the op's key and the bad value (exit 2),
not a ZeroDivisionError, negative FLOPs and cycles, a 2048-byte guess or NoC traffic from
nowhere; a missing key is named, not the whole op printed as its "value"."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import cli_in_process, one_error
from opatlas.errors import OpatlasError, SpecError
from opatlas.tenstorrent.netlist import TILE_BYTES, load_netlist
from opatlas.tenstorrent.opmodel import input_pipe, limiter, tile_bytes
from test_analyze_pybuda import NETLIST

RESNET = Path(__file__).parent / "data" / "tenstorrent" / "resnet50_hifi3_fp16b.netlist.yaml"
G0, G1 = "fwd_0_0_temporal_epoch_0", "fwd_0_1_temporal_epoch_1"


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "bad_netlist.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _with(tmp_path: Path, graph: str, op: str, **changes: Any) -> Path:
    """The synthetic netlist with op ``op`` of ``graph`` changed (a None value drops the key;
    ``attributes`` replaces the attributes mapping)."""
    doc = copy.deepcopy(NETLIST)
    entry = doc["graphs"][graph][op]
    for key, value in changes.items():
        if value is None:
            entry.pop(key)
        else:
            entry[key] = value
    return _write(tmp_path, doc)


def _error(capsys: pytest.CaptureFixture[str], path: Path, *needles: str) -> str:
    code, out, err = cli_in_process(capsys, "analyze", str(path), "--json")
    assert out == ""
    return one_error(code, err, str(path), *needles)


# ---------------------------------------------------------------- the reviewer's edits

def _resnet_edit(tmp_path: Path, old: str, new: str, line: int | None = None) -> Path:
    """The bundled resnet netlist with ``old`` replaced by ``new`` once (in the op line
    holding ``line`` when given)."""
    lines = RESNET.read_text().splitlines(keepends=True)
    for i, text in enumerate(lines):
        if (line is None or line in (i, i - 1, i - 2, i - 3)) and old in text:
            lines[i] = text.replace(old, new, 1)
            break
    else:
        raise AssertionError(f"{old!r} not found")
    path = tmp_path / "resnet_netlist.yaml"
    path.write_text("".join(lines))
    return path


def _op_line(name: str) -> int:
    return next(i for i, text in enumerate(RESNET.read_text().splitlines())
                if text.lstrip().startswith(f"{name}:"))


MM8 = "conv2d_71.dc.matmul.8"


@pytest.mark.parametrize(("old", "new", "key", "value"), [
    ("grid_size: [1, 1]", "grid_size: [0, 1]", "grid_size", "value [0, 1]"),
    ("m_k: 1,", "m_k: -4,", "attributes.m_k", "value -4"),
    ("m_k: 1,", "m_k: 0,", "attributes.m_k", "value 0"),
    ("t: 14,", "t: -14,", ".t'", "value -14"),
], ids=["grid0", "m_k-4", "m_k0", "t-14"])
def test_the_reviewers_bad_numbers_are_one_error(tmp_path, capsys, old, new, key, value):
    path = _resnet_edit(tmp_path, old, new, line=_op_line(MM8))
    line = _error(capsys, path, f"graphs.{G1}.{MM8}.", key, value)
    assert "positive integer" in line and "Traceback" not in line


def test_an_unknown_queue_data_format_is_named(tmp_path, capsys):
    path = _resnet_edit(tmp_path, "df: Float16_b, target_device: 0, loc: host",
                        "df: Float99, target_device: 0, loc: host")
    line = _error(capsys, path, "queues.pixel_values.df", "'Float99'")
    assert "unknown data format" in line and "Bfp8_b" in line


def test_an_input_naming_nothing_is_named(tmp_path, capsys):
    op = "conv2d_0.dc.conv2d.3.dc.conv2d.1.dc.sparse_matmul.9.dc.sparse_matmul.1.lc2"
    path = _resnet_edit(tmp_path, "inputs: [lc.input_tensor",
                        "inputs: [nonexistent_op_xyz, lc.input_tensor", line=_op_line(op))
    line = _error(capsys, path, f"graphs.{G0}.{op}.inputs.0", "'nonexistent_op_xyz'")
    assert "no queue and no op" in line


def test_a_missing_grid_size_is_one_short_line(tmp_path, capsys):
    op = "conv2d_0.dc.conv2d.3.dc.conv2d.1.dc.sparse_matmul.9.dc.sparse_matmul.1.lc2"
    path = _resnet_edit(tmp_path, "grid_size: [7, 1]", "grid_sizeX: [7, 1]", line=_op_line(op))
    line = _error(capsys, path, f"graphs.{G0}.{op}.grid_size", "'grid_size' is missing")
    assert "value" not in line and "'type'" not in line and "Field required" not in line
    assert line.endswith(f"{op}.grid_size': required key 'grid_size' is missing")


# ---------------------------------------------------------------- each checked field

@pytest.mark.parametrize(("change", "key", "value"), [
    ({"grid_size": [2, 0]}, "mm0.grid_size", "[2, 0]"),
    ({"grid_size": [2, 2, 2]}, "mm0.grid_size", "[2, 2, 2]"),
    ({"grid_loc": [-1, 0]}, "mm0.grid_loc", "[-1, 0]"),
    ({"mblock": [0, 2]}, "mm0.mblock", "[0, 2]"),
    ({"ublock": [2, -2]}, "mm0.ublock", "[2, -2]"),
    ({"t": 0}, "mm0.t", "value 0"),
    ({"t": True}, "mm0.t", "value True"),
    ({"attributes": {"m_k": 4, "u_kt": 0}}, "mm0.attributes.u_kt", "value 0"),
    ({"attributes": {"m_k": 2.5, "u_kt": 2}}, "mm0.attributes.m_k", "value 2.5"),
    ({"in_df": ["Float16_b", "Float99"]}, "mm0.in_df.1", "'Float99'"),
    ({"out_df": "bfloat16"}, "mm0.out_df", "'bfloat16'"),
    ({"attributes": [1, 2]}, "mm0.attributes", "expected a mapping of attribute names"),
], ids=["grid-col0", "grid-3", "loc-neg", "mblock0", "ublock-neg", "t0", "t-bool", "u_kt0",
        "m_k-float", "in_df", "out_df",
        "attributes-list"])
def test_each_bad_op_field_is_named_with_its_value(tmp_path, capsys, change, key, value):
    _error(capsys, _with(tmp_path, G0, "mm0", **change), f"graphs.{G0}.{key}", value)


@pytest.mark.parametrize("missing", ["m_k", "u_kt"])
def test_half_an_inner_dimension_is_named(tmp_path, capsys, missing):
    attrs = {"m_k": 4, "u_kt": 2}
    attrs.pop(missing)
    line = _error(capsys, _with(tmp_path, G0, "mm0", attributes=attrs),
                  f"graphs.{G0}.mm0.attributes.{missing}", f"{missing} is missing")
    assert "value" not in line


def test_a_reduce_over_z_of_zero_slices_is_named(tmp_path, capsys):
    path = _with(tmp_path, G0, "gelu0", type="reduce",
                 attributes={"dim": "z", "type": "max", "z": 0})
    _error(capsys, path, f"graphs.{G0}.gelu0.attributes.z", "value 0")


@pytest.mark.parametrize(("key", "value"), [("t", -1), ("grid_size", [0, 1]),
                                            ("mblock", [8, 0]), ("df", "Float99")])
def test_each_bad_queue_field_is_named(tmp_path, capsys, key, value):
    doc = copy.deepcopy(NETLIST)
    doc["queues"]["w"][key] = value
    _error(capsys, _write(tmp_path, doc), f"queues.w.{key}", repr(value))


def test_a_missing_key_names_no_value(tmp_path, capsys):
    line = _error(capsys, _with(tmp_path, G0, "mm0", inputs=None),
                  f"graphs.{G0}.mm0.inputs", "'inputs' is missing")
    assert "value" not in line and "matmul" not in line


def test_a_queue_that_is_no_mapping_is_named(tmp_path, capsys):
    doc = copy.deepcopy(NETLIST)
    doc["queues"]["w"] = "HOST"
    _error(capsys, _write(tmp_path, doc), "queues.w", "'HOST'")


def test_several_problems_of_one_op_each_say_their_key_and_value(tmp_path, capsys):
    path = _with(tmp_path, G0, "mm0", t=-1, grid_size=[0, 2])
    code, _, err = cli_in_process(capsys, "analyze", str(path), "--json")
    first = one_error(code, err, f"graphs.{G0}.mm0.grid_size", "[0, 2]", "1 more problem")
    assert f"also: key 'graphs.{G0}.mm0.t', value -1" in err and first in err


def test_null_attributes_are_none(tmp_path):
    doc = copy.deepcopy(NETLIST)
    doc["graphs"][G0]["gelu0"]["attributes"] = None
    nl = load_netlist(_write(tmp_path, doc))
    assert nl.ops[G0]["gelu0"].attributes == {}


def test_attributes_are_kept_as_given(tmp_path):
    attrs = {"m_k": 4, "u_kt": 2, "kernel_broadcast": {"input_1": 2}, "l1_acc": True}
    nl = load_netlist(_with(tmp_path, G0, "mm0", attributes=attrs))
    mm0 = nl.ops[G0]["mm0"]
    assert mm0.attributes == attrs and (mm0.m_k, mm0.u_kt) == (4, 2)


# ---------------------------------------------------------------- inputs

def test_an_input_may_be_an_op_of_the_same_temporal_epoch_on_another_chip(tmp_path):
    """Two chips' graphs of one temporal epoch: an op reads the other chip's op directly
    (over ethernet, not a queue); its pipe is the NoC's, as before."""
    doc = copy.deepcopy(NETLIST)
    doc["graphs"]["fwd_1_0_temporal_epoch_0"] = {
        "target_device": 1, "input_count": 64,
        "gelu1": {"type": "gelu", "grid_loc": [0, 0], "grid_size": [1, 1], "t": 1,
                  "mblock": [1, 1], "ublock": [2, 2], "inputs": ["gelu0"],
                  "in_df": ["Float16_b"], "out_df": "Float16_b"}}
    nl = load_netlist(_write(tmp_path, doc))
    gelu1 = nl.ops["fwd_1_0_temporal_epoch_0"]["gelu1"]
    assert input_pipe(gelu1, 0, nl, nl.ops["fwd_1_0_temporal_epoch_0"]) == "noc"


def test_an_input_from_another_temporal_epochs_op_is_named(tmp_path, capsys):
    path = _with(tmp_path, G1, "add0", inputs=["mm0", "bias"])  # mm0 runs in epoch 0
    line = _error(capsys, path, f"graphs.{G1}.add0.inputs.0", "'mm0'")
    assert "temporal epoch 0, not 1" in line and "through a queue" in line


def test_input_pipe_refuses_a_name_of_nothing(tmp_path):
    nl = load_netlist(_write(tmp_path, copy.deepcopy(NETLIST), "ok_netlist.yaml"))
    gelu0 = copy.copy(nl.ops[G0]["gelu0"])
    gelu0.inputs = ["nowhere"]
    with pytest.raises(OpatlasError, match="'nowhere', names no queue and no op"):
        input_pipe(gelu0, 0, nl, nl.ops[G0])


# ---------------------------------------------------------------- the op model's guards

def test_tile_bytes_refuses_an_unknown_format():
    assert tile_bytes("Bfp8_b") == 1088 and tile_bytes("RawUInt16") == 2048
    with pytest.raises(OpatlasError, match="unknown data format 'Float99'"):
        tile_bytes("Float99")


def test_every_netlist_format_has_its_tile_size():
    # the backend's netlist formats: 1, 2 or 4 bytes a datum; block floats their exponents
    for df, size in TILE_BYTES.items():
        assert size in (1024, 2048, 4096) or df.startswith("Bfp"), df
    assert {"Lf8", "Fp8_e4m3", "UInt8", "RawUInt8", "RawUInt16", "RawUInt32"} <= set(TILE_BYTES)


def test_limiter_refuses_an_op_without_cores(tmp_path):
    nl = load_netlist(_write(tmp_path, copy.deepcopy(NETLIST), "ok_netlist.yaml"))
    mm0 = copy.copy(nl.ops[G0]["mm0"])
    mm0.grid = (0, 2)
    with pytest.raises(OpatlasError, match="no core"):
        limiter(mm0, 100, nl, nl.ops[G0])


def test_the_errors_are_spec_errors_with_file_key_and_value(tmp_path):
    path = _with(tmp_path, G0, "mm0", t=-3)
    with pytest.raises(SpecError) as info:
        load_netlist(path)
    assert (info.value.file, info.value.key, info.value.value) == (
        str(path), f"graphs.{G0}.mm0.t", -3)


def test_the_bundled_netlists_still_load():
    for name in ("resnet50_hifi3_fp16b", "bert_large_train_encoders"):
        nl = load_netlist(RESNET.with_name(f"{name}.netlist.yaml"))
        assert all(op.cores > 0 and op.t > 0 for op in nl.all_ops())
