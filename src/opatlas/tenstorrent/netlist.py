"""A PyBuda netlist, read the way PyBuda's perf analyzer reads it (shared/specs/tenstorrent.md §B.1):
the ``graphs`` (one per spatial epoch; ops with grid, blocks, t, inputs, attributes), the
``queues``, the ``programs`` (which queues a graph reads as non-prologue inputs), and
``devices.arch``. From them: which op inputs and outputs live in DRAM, the temporal epoch of
each graph, the core count of the arch, and the device count."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError

from opatlas.errors import OpatlasError, SpecError

SECTIONS = ("graphs", "queues", "programs", "devices")
# the analyzer's assumption: Wormhole has one row harvested ([9, 8]); Grayskull [11, 10]
ARCH_GRID = {"wormhole_b0": (9, 8), "wormhole": (9, 8), "grayskull": (11, 10)}
ARCH_CLOCK_HZ = {"wormhole_b0": 1e9, "wormhole": 1e9, "grayskull": 1.2e9}
_TEMPORAL = re.compile(r"_temporal_epoch_(\d+)$")
# The data formats the backend's netlist parser takes (tt-budabackend netlist_utils.cpp
# get_data_format; Tf32, a format of the backend's enum, as well), with the bytes of one 32x32
# tile: the data plus the shared exponents of block floats (size_lib get_tile_size_in_bytes
# without the 32-byte header)
TILE_BYTES = {"Float32": 4096, "Tf32": 4096, "Float16": 2048, "Float16_b": 2048,
              "Bfp8": 1088, "Bfp8_b": 1088, "Bfp4": 576, "Bfp4_b": 576, "Bfp2": 320,
              "Bfp2_b": 320, "Lf8": 1024, "Fp8_e4m3": 1024, "Int8": 1024, "UInt8": 1024,
              "UInt16": 2048, "Int32": 4096, "RawUInt8": 1024, "RawUInt16": 2048,
              "RawUInt32": 4096}


def _integer(value: Any) -> Any:
    """YAML's true/false is not a count (pydantic would read it as 1 or 0)."""
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, not {str(value).lower()}")
    return value


def _positive(value: int) -> int:
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


def _pair(least: int, what: str) -> Any:
    def check(value: tuple[int, int]) -> tuple[int, int]:
        if any(v < least for v in value):
            raise ValueError(f"must be two {what} integers")
        return value
    return check


def _data_format(value: str) -> str:
    if value not in TILE_BYTES:
        raise ValueError(f"unknown data format; known: {', '.join(TILE_BYTES)}")
    return value


_Int = Annotated[int, BeforeValidator(_integer)]
Positive = Annotated[_Int, AfterValidator(_positive)]
# a block count or shape: PyBuda's netlist format takes positive counts only (0 or fewer cores,
# tiles or t slices is no op); a grid location: a core's row and column, from 0
PositivePair = Annotated[tuple[_Int, _Int], AfterValidator(_pair(1, "positive"))]
LocationPair = Annotated[tuple[_Int, _Int], AfterValidator(_pair(0, "non-negative"))]
DataFormat = Annotated[str, AfterValidator(_data_format)]


def _mapping(value: Any) -> Any:
    """An op's attributes: a mapping of names to values (none given: null)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("expected a mapping of attribute names to values")
    return value


class _Attributes(BaseModel):
    """The op attributes the estimate computes with, checked; the others are kept as given."""

    model_config = ConfigDict(extra="allow")
    m_k: Positive | None = None   # a matmul's inner dimension: m_k blocks of u_kt tiles
    u_kt: Positive | None = None
    z: Positive | None = None     # reduce over z: the slices reduced


class _OpEntry(BaseModel):
    """The fields of a netlist op the analysis needs; the rest is kept in ``extra``."""

    model_config = ConfigDict(extra="allow")
    type: str
    grid_loc: LocationPair
    grid_size: PositivePair
    t: Positive
    mblock: PositivePair
    ublock: PositivePair
    inputs: list[str]
    attributes: Annotated[_Attributes, BeforeValidator(_mapping)] = _Attributes()
    in_df: list[DataFormat] = []
    out_df: DataFormat = "Float16_b"
    # the backend's four (opatlas.devices.FIDELITY_PHASES); None: the op states none
    math_fidelity: Literal["LoFi", "HiFi2", "HiFi3", "HiFi4"] | None = None


_M = TypeVar("_M", bound=BaseModel)


class _QueueEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    input: str
    type: str = "queue"
    loc: str = "dram"
    grid_size: PositivePair = (1, 1)
    t: Positive = 1
    mblock: PositivePair = (1, 1)
    ublock: PositivePair = (1, 1)
    df: DataFormat = "Float16_b"


@dataclass
class NetOp:
    name: str
    graph: str
    spatial_epoch: int
    temporal_epoch: int
    type: str
    grid: tuple[int, int]            # rows, columns (PyBuda's order)
    grid_loc: tuple[int, int]
    t: int
    mblock: tuple[int, int]
    ublock: tuple[int, int]
    inputs: list[str]
    input_is_dram: list[bool]
    output_is_dram: bool
    attributes: dict[str, Any]
    in_df: list[str]
    out_df: str
    math_fidelity: str | None        # LoFi ... HiFi4; None where the netlist states none
    input_tms: dict[int, list[Any]] = field(default_factory=dict)

    @property
    def cores(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def m_k(self) -> int | None:
        return self.attributes.get("m_k") if "u_kt" in self.attributes else None

    @property
    def u_kt(self) -> int | None:
        return self.attributes.get("u_kt")

    @property
    def is_sparse(self) -> bool:
        return self.type == "matmul" and ("num_sparse_tiles" in self.attributes
                                           or bool(self.attributes.get("identity")))

    @property
    def is_dense_matmul(self) -> bool:
        """A matmul with an inner dimension and no sparse operand: the ops with a math floor
        (PyBuda's theoretical cycles) and GEMM dimensions."""
        return self.type == "matmul" and self.u_kt is not None and not self.is_sparse

    @property
    def tiles_per_core(self) -> int:
        """Output tiles one core produces per input."""
        return self.t * self.mblock[0] * self.mblock[1] * self.ublock[0] * self.ublock[1]

    @property
    def out_tiles(self) -> tuple[int, int]:
        """The output tensor's height and width in tiles (one t slice)."""
        return (self.grid[0] * self.mblock[0] * self.ublock[0],
                self.grid[1] * self.mblock[1] * self.ublock[1])

    @property
    def pass_(self) -> str:
        return "bwd" if self.graph.startswith("bwd") else "fwd"


@dataclass
class Queue:
    name: str
    producer: str
    loc: str
    grid: tuple[int, int]
    t: int
    mblock: tuple[int, int]
    ublock: tuple[int, int]
    df: str

    @property
    def out_tiles(self) -> tuple[int, int]:
        return (self.grid[0] * self.mblock[0] * self.ublock[0],
                self.grid[1] * self.mblock[1] * self.ublock[1])


@dataclass
class Netlist:
    path: Path
    arch: str
    graphs: list[str]                 # spatial epochs, in file order
    temporal: list[int]               # temporal epoch of each graph
    ops: dict[str, dict[str, NetOp]]  # graph -> op name -> op
    queues: dict[str, Queue]
    core_count: int
    device_count: int

    @property
    def clock_hz(self) -> float:
        return ARCH_CLOCK_HZ[self.arch]

    def all_ops(self) -> list[NetOp]:
        return [op for g in self.graphs for op in self.ops[g].values()]


def parse_yaml(path: Path, text: str) -> Any:
    """The netlist's YAML. yaml-rs (Rust, the opatlas[tt] extra) when installed: it parses a
    1 MB netlist ~20x faster than PyYAML's C loader into the same objects (a test checks the
    real netlists); PyYAML otherwise. Duplicate keys: the last wins, as in PyYAML."""
    try:
        import yaml_rs
    except ImportError:
        yaml_rs = None
    if yaml_rs is not None:
        try:
            return yaml_rs.loads(text, parse_datetime=False,
                                 duplicate_key_policy=yaml_rs.DuplicateKeyPolicy.LastWins)
        except yaml_rs.YAMLDecodeError as exc:
            raise _fail(path, f"it is not valid YAML ({_short(exc)})") from None
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise _fail(path, f"it is not valid YAML ({_short(exc)})") from None


def _short(exc: Exception, limit: int = 300) -> str:
    """A parser's message without the whole offending line (a CSV given as a netlist quotes
    kilobytes of it)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _fail(path: Path, msg: str) -> OpatlasError:
    return OpatlasError(f"{path} is not a usable PyBuda netlist: {msg}")


def load_netlist(path: str | Path) -> Netlist:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise OpatlasError(f"{path}: no such netlist file") from None
    doc = parse_yaml(path, text)
    if not isinstance(doc, dict):
        raise _fail(path, "the file holds no YAML mapping")
    missing = [s for s in SECTIONS if s not in doc]
    if missing:
        raise _fail(path, f"the section(s) {', '.join(missing)} are missing (a netlist has "
                          f"{', '.join(SECTIONS)})")
    arch = (doc["devices"] or {}).get("arch") if isinstance(doc["devices"], dict) else None
    if isinstance(arch, list):
        arch = arch[0] if arch else None
    if arch not in ARCH_GRID:
        raise SpecError(f"unknown arch; known: {', '.join(ARCH_GRID)}", file=str(path),
                        key="devices.arch", value=arch)
    queues = _queues(path, doc["queues"] or {})
    graphs_doc = doc["graphs"] or {}
    dram_names = _dram_names(path, queues, doc["programs"] or [], graphs_doc)
    graphs = list(graphs_doc)
    temporal = _temporal_map(graphs)
    ops: dict[str, dict[str, NetOp]] = {}
    for e, g in enumerate(graphs):
        ops[g] = _graph_ops(path, g, e, temporal[e], graphs_doc[g] or {}, dram_names[g])
    _check_inputs(path, ops, queues)
    return Netlist(path, arch, graphs, temporal, ops, queues,
                   _core_count(arch, ops), _device_count(path, graphs_doc))


def _entry(model: type[_M], data: Any, path: Path, where: str) -> _M:
    """One netlist entry validated; an error names the file, the full key of each bad value
    (``where``: the entry's, then the field's) and that value, or says which key is missing.
    The words are the shared spec formatter's (``opatlas.spec.loader.spec_error``)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        from opatlas.spec.loader import spec_error

        if not isinstance(data, Mapping):  # the entry is no mapping: that is the value at fault
            err = spec_error(exc, {}, str(path))
            raise SpecError(err.detail, file=str(path), key=where, value=data) from None
        raise spec_error(exc, data, str(path), prefix=where) from None


def _queues(path: Path, section: dict[str, Any]) -> dict[str, Queue]:
    out = {}
    for name, q in section.items():
        e = _entry(_QueueEntry, q, path, f"queues.{name}")
        out[name] = Queue(name, e.input, e.loc, e.grid_size, e.t, e.mblock, e.ublock, e.df)
    return out


def _dram_names(path: Path, queues: dict[str, Queue], programs: list[Any],
                graphs: dict[str, Any]) -> dict[str, set[str]]:
    """Per graph, the names PyBuda's analyzer counts as DRAM: every queue's producer that is
    not HOST (for all graphs alike, as the original does), plus the queues a graph's
    ``execute`` reads without prologue."""
    producers = {q.producer for q in queues.values() if q.producer != "HOST"}
    names = {g: set(producers) for g in graphs}
    for program in programs:
        if not isinstance(program, dict):
            raise _fail(path, "each entry of 'programs' must be a mapping of name to "
                              "instructions")
        for instructions in program.values():
            for ins in instructions or []:
                if isinstance(ins, dict) and "execute" in ins:
                    ex = ins["execute"]
                    g = ex.get("graph_name")
                    if g not in names:
                        raise SpecError("an execute instruction names a graph that is not "
                                        "in 'graphs'", file=str(path),
                                        key="programs.execute.graph_name", value=g)
                    for qname, settings in (ex.get("queue_settings") or {}).items():
                        if not (settings or {}).get("prologue", False):
                            names[g].add(qname)
    return names


def _temporal_map(graphs: list[str]) -> list[int]:
    out: list[int] = []
    for g in graphs:
        m = _TEMPORAL.search(g)
        out.append(int(m.group(1)) if m else (out[-1] + 1 if out else 0))
    return out


def _graph_ops(path: Path, graph: str, spatial: int, temporal: int, section: dict[str, Any],
               dram: set[str]) -> dict[str, NetOp]:
    ops = {}
    for name, d in section.items():
        if not isinstance(d, dict):
            continue  # target_device, input_count ...
        e = _entry(_OpEntry, d, path, f"graphs.{graph}.{name}")
        _check_inner_dim(path, f"graphs.{graph}.{name}", e.attributes)
        tms = {i: d[f"input_{i}_tms"] for i in range(len(e.inputs)) if d.get(f"input_{i}_tms")}
        ops[name] = NetOp(name, graph, spatial, temporal, e.type, e.grid_size, e.grid_loc, e.t,
                          e.mblock, e.ublock, e.inputs, [i in dram for i in e.inputs],
                          name in dram, e.attributes.model_dump(exclude_unset=True),
                          e.in_df, e.out_df, e.math_fidelity, tms)
    return ops


def _check_inner_dim(path: Path, where: str, attributes: _Attributes) -> None:
    """A matmul's inner dimension is m_k · u_kt tiles: one without the other says nothing."""
    given = attributes.model_fields_set & {"m_k", "u_kt"}
    if len(given) == 1:
        (has,) = given
        missing = "u_kt" if has == "m_k" else "m_k"
        raise SpecError(f"{missing} is missing (the inner dimension is m_k x u_kt tiles: "
                        f"{has} alone does not give it)", file=str(path),
                        key=f"{where}.attributes.{missing}")


def _check_inputs(path: Path, ops: dict[str, dict[str, NetOp]],
                  queues: dict[str, Queue]) -> None:
    """Every op input names a queue (or ram) or an op (the netlist format's rule). An op is
    read directly only within its temporal epoch (a graph, or the graphs of the chips that run
    together); the cores of another temporal epoch are reprogrammed before it runs, so its ops
    pass data through a queue. A name that is neither would be counted as NoC traffic from
    nowhere."""
    producers = {name: op for graph in ops.values() for name, op in graph.items()}
    for g, graph in ops.items():
        for op in graph.values():
            for i, name in enumerate(op.inputs):
                src = producers.get(name)
                if name in queues or (src is not None
                                      and src.temporal_epoch == op.temporal_epoch):
                    continue
                why = ("no queue and no op of the netlist has that name" if src is None else
                       f"it is an op of graph {src.graph}, temporal epoch "
                       f"{src.temporal_epoch}, not {op.temporal_epoch} (another temporal "
                       f"epoch's op is read through a queue)")
                raise SpecError(f"an op input must name a queue or an op: {why}",
                                file=str(path), key=f"graphs.{g}.{op.name}.inputs.{i}",
                                value=name)


def _core_count(arch: str, ops: dict[str, dict[str, NetOp]]) -> int:
    """The arch's assumed grid, enlarged to the bottom-right core the netlist uses (compared
    as PyBuda's analyzer does: the last used index against the grid's size)."""
    grid = list(ARCH_GRID[arch])
    for graph in ops.values():
        for op in graph.values():
            for i in range(2):
                grid[i] = max(grid[i], op.grid_loc[i] + op.grid[i] - 1)
    return grid[0] * grid[1]


def _device_count(path: Path, graphs: dict[str, Any]) -> int:
    devices = {g.get("target_device") for g in graphs.values()
               if isinstance(g, dict) and "target_device" in g}
    if not devices:
        raise _fail(path, "no graph has a 'target_device'")
    return len(devices)
