"""One entry point for everything ``opatlas estimate`` accepts as its run description: an
opatlas or estimate-train-time YAML, a Hugging Face ``config.json`` (or a bundled name), or
Megatron-LM launch arguments; then ``--set`` what-ifs, ``--gpus`` and ``--gpus-per-node``.
Returns the validated config with every assumption made on the way, for the caller to show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opatlas.errors import OpatlasError, SpecError
from opatlas.estimate.config import TrainConfig, read_config, upstream_names, validate_config
from opatlas.estimate.defaults import assumed_defaults
from opatlas.estimate.overrides import SOURCE as SET_SOURCE
from opatlas.estimate.overrides import apply_overrides, override_keys

if TYPE_CHECKING:
    from opatlas.estimate.hf import Assumption


@dataclass
class Inputs:
    """The config, notes for the user, and the run length the input itself asks for
    (Megatron's ``--train-iters``/``--train-samples``), if any."""

    config: TrainConfig
    notes: list[str] = field(default_factory=list)
    steps: int | None = None
    pinned: dict[str, object] = field(default_factory=dict)  # searched keys --set holds


def load_inputs(config: str | None = None, *, megatron_args: str | None = None,
                gpus: int | None = None, gpus_per_node: int | None = None,
                sets: Sequence[str] = (), search: bool = False, strict: bool = False,
                notes: list[str] | None = None, analytical: bool = False) -> Inputs:
    """Build the training config from a file or Megatron arguments plus overrides.

    ``gpus`` is the world size: for Megatron arguments it sets dp = gpus / (tp·pp); for a
    config that does not fix ``parallel.dp`` (a Hugging Face one) likewise, unless ``search``
    (where it is the search's GPU count); a config whose dp·tp·pp disagrees is an error.
    ``strict``: Megatron flags that are not modelled are errors, not notes, and so is a
    default the input leaves a key to (``assumed_defaults``), and so is a value opatlas takes
    for what a Hugging Face config.json leaves out (``_refuse_hf_defaults``). ``notes``: a list
    to collect the assumptions in as they are made, so that a caller can show them even when
    a later step fails (an assumed batch is why a layout does not divide it).
    ``analytical``: the input's measured data will be dropped (``with_flags``), so a data
    folder that is not there is no error under ``strict``, and the device must be one the
    roofline knows.
    """
    notes = [] if notes is None else notes
    steps = None
    _check_analytical(sets, analytical)
    if megatron_args is not None:
        if config is not None:
            raise OpatlasError("give either a config or --megatron-args, not both (use --set "
                               "for the cluster, e.g. --set cluster.preset=dgx-a100)")
        if gpus_per_node is None:
            gpus_per_node = _launcher_gpus_per_node(megatron_args, sets)
        raw, path, steps, gpus = _from_megatron(megatron_args, gpus, gpus_per_node, strict,
                                                notes)
    elif config is not None:
        raw, path = read_config(config, notes, strict and not analytical)
    else:
        raise OpatlasError("give a config (YAML, config.json or a bundled name) or "
                           "--megatron-args")
    sets = list(sets)
    if gpus_per_node is not None:
        sets.append(f"cluster.gpus_per_node={gpus_per_node}")
    before = _layout_gpus(raw)
    raw = apply_overrides(raw, sets)
    after = _layout_gpus(raw)
    if not search and gpus is None and before and after and before != after:
        notes.append(f"--set changes the layout's GPU count from {before} to {after} "
                     f"(dp·tp·pp: --set parallel.dp too to keep the count)")
    if search:
        return _for_search(raw, path, sets, gpus, notes, steps, strict, analytical,
                           megatron_args is not None)
    try:
        if gpus is not None:
            raw = _spread_gpus(raw, gpus, path, notes, quiet=megatron_args is not None)
        cfg = validate_config(raw, path, notes, analytical)
    except SpecError as exc:
        raise _named(exc, sets, raw) from None
    _refuse_hf_defaults(raw, path, cfg, strict)
    _assume(notes, assumed_defaults(raw), strict, str(path))
    _assume_unstated(notes, raw, cfg, strict, str(path), megatron_args is not None,
                     analytical)
    if gpus is not None and cfg.gpus != gpus:
        raise OpatlasError(f"--gpus {gpus} disagrees with the config's dp·tp·pp = "
                           f"{cfg.parallel.dp}·{cfg.parallel.tp}·{cfg.parallel.pp} = {cfg.gpus}"
                           f" (use --search to choose a layout of {gpus} GPUs)")
    return Inputs(cfg, notes, steps)


def _launcher_gpus_per_node(megatron_args: str, sets: Sequence[str]) -> int | None:
    """The launcher's ``--nproc-per-node``, taken as ``--gpus-per-node`` so that it wins over
    a ``--set cluster.preset`` as an explicit field does, unless ``--set
    cluster.gpus_per_node`` replaces it."""
    from opatlas.estimate.megatron import launcher_gpus_per_node

    if "cluster.gpus_per_node" in override_keys(sets):
        return None
    return launcher_gpus_per_node(megatron_args)


# --set items that ask for the measured data --analytical drops
DATA_SETS = {("ops", "mode"): "data", ("cluster", "nccl_data"): None}


def _check_analytical(sets: Sequence[str], analytical: bool) -> None:
    """``--analytical`` with a ``--set`` asking for measured data (``ops.mode=data``,
    ``cluster.nccl_data=...``): an error naming both, not one silently ignored."""
    from opatlas.estimate.overrides import parse_item

    if not analytical:
        return
    for item in sets:
        path, value = parse_item(item)
        if path in DATA_SETS and DATA_SETS[path] in (None, value):
            raise OpatlasError(f"--analytical and --set {item.strip()} contradict each other "
                               f"(--analytical times every op and collective without measured "
                               f"data): keep one")


def _for_search(raw: dict[str, Any], path: Path, sets: Sequence[str], gpus: int | None,
                notes: list[str], steps: int | None, strict: bool = False,
                analytical: bool = False, megatron: bool = False) -> Inputs:
    """The config a search starts from: the input's own layout (the keys the search chooses)
    dropped, so that it cannot make a value --set holds invalid (a file's virtual_stages 5
    against --set parallel.schedule=1f1b); the held values, checked one by one, come back
    in ``pinned`` for the search to keep, and the layouts it builds are validated whole."""
    from opatlas.estimate.search import SEARCHED
    from opatlas.estimate.sources import resolve_sources

    held = [k for k in SEARCHED if k in override_keys(sets)]
    try:  # an assumed batch divides into the GPUs, and into held dp and micro-batch
        resolved = resolve_sources(_without(raw, SEARCHED, keep=held), path, notes, gpus)
        cfg = validate_config(_without(resolved, SEARCHED), path, notes, analytical)
        pinned = _held_values(resolved, held, cfg)
    except SpecError as exc:
        raise _named(exc, sets, raw) from None
    _refuse_hf_defaults(raw, path, cfg, strict)
    _assume(notes, assumed_defaults(raw, search=True), strict, str(path))
    _assume_unstated(notes, raw, cfg, strict, str(path), megatron, analytical,
                     search_gpus=gpus or 1)
    return Inputs(cfg, notes, steps, pinned)


def _without(raw: dict[str, Any], keys: Sequence[str], keep: Sequence[str] = ()
             ) -> dict[str, Any]:
    """``raw`` without the dotted ``keys`` (but those in ``keep``): they take the defaults."""
    out = dict(raw)
    for key in keys:
        section, name = key.split(".")
        if key not in keep and isinstance(out.get(section), dict) and name in out[section]:
            out[section] = {k: v for k, v in out[section].items() if k != name}
    return out


def _held_values(raw: dict[str, Any], held: Sequence[str], cfg: TrainConfig
                 ) -> dict[str, object]:
    """The values --set gives the searched keys ``held``, each validated as its section's
    field (the rules across keys are the search's to apply to the layouts it builds)."""
    from pydantic import ValidationError

    from opatlas.estimate.config import ParallelConfig, TrainingConfig

    out: dict[str, object] = {}
    for key in held:
        section, name = key.split(".")
        value = raw[section][name]
        model, base = (ParallelConfig, {}) if section == "parallel" else \
            (TrainingConfig, cfg.training.model_dump())
        try:
            out[key] = getattr(model.model_validate({**base, name: value}), name)
        except ValidationError as exc:
            msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise SpecError(msg, file=SET_SOURCE, key=key, value=value) from None
    return out


def _from_megatron(args: str, gpus: int | None, gpus_per_node: int | None, strict: bool,
                   notes: list[str]) -> tuple[dict[str, Any], Path, int | None, int]:
    """(raw config without dp, its label, the run's steps, the world size): dp is derived
    again after --set, so that a what-if on tp or pp keeps the GPU count."""
    from opatlas.estimate.megatron import megatron_config

    run = megatron_config(args, gpus, gpus_per_node, strict)
    notes.extend(run.report())
    parallel = dict(run.config["parallel"])
    world = parallel["tp"] * parallel["pp"] * parallel.pop("dp")
    path = Path(args[1:] if args.startswith("@") else "--megatron-args")
    return {**run.config, "parallel": parallel}, path, run.steps, world


def _layout_gpus(raw: dict[str, Any]) -> int | None:
    """dp·tp·pp of a raw config that gives dp, else None."""
    p = raw.get("parallel")
    if not isinstance(p, dict) or "dp" not in p:
        return None
    values = [p.get(k, 1) for k in ("dp", "tp", "pp")]
    valid = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)
    return values[0] * values[1] * values[2] if valid else None  # else validation says why


def _spread_gpus(raw: dict[str, Any], gpus: int, path: Path, notes: list[str],
                 quiet: bool = False) -> dict[str, Any]:
    """dp = gpus / (tp·pp) when the config does not fix dp itself. A tp or pp that is no
    positive integer is left for validation to name (with the --set that gave it)."""
    parallel = raw.get("parallel") or {}
    if not isinstance(parallel, dict) or "dp" in parallel:
        return raw
    tp, pp = parallel.get("tp", 1), parallel.get("pp", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (tp, pp)):
        return raw
    if gpus % (tp * pp):
        raise SpecError(f"--gpus {gpus} is not a multiple of tp·pp = {tp}·{pp}", file=str(path),
                        key="parallel")
    if not quiet:
            notes.append(f"parallel.dp = --gpus / (tp·pp) = {gpus // (tp * pp)} (tp {tp}, pp {pp}; "
                     f"--set parallel.tp=... to change, or --search)")
    return {**raw, "parallel": {**parallel, "dp": gpus // (tp * pp)}}


def _assume(notes: list[str], assumed: list[str], strict: bool, source: str | None,
            how: str = "give these keys") -> None:
    """The defaults ``assumed`` said in ``notes``; under ``strict`` the first is an error
    naming them and ``how`` to give them (in ``source``, the config, or with --set)."""
    if strict and assumed:
        raise strict_refusal(assumed[0], how, file=source)
    notes.extend(assumed)


# the model's keys whose opatlas defaults shape every op (a value, or how it is shown)
MODEL_DEFAULTS = ("vocab", "ffn", "ffn_kind", "norm", "attention")
# the line said (and refused under --strict) for collectives left to the alpha-beta model
NO_NCCL_DATA = ("assumed (no cluster.nccl_data given) every collective timed by the "
                "alpha-beta model of the cluster's links (cluster.*_bw_gbps, "
                "cluster.*_latency_us) although ops.mode is data")
NO_NCCL_DATA_HOW = ("--set cluster.nccl_data=FOLDER (or =bundled, the A100 samples) to time "
                    "them from measured samples, or --analytical to model every op and "
                    "collective by choice")


def unstated_defaults(raw: dict[str, Any], cfg: TrainConfig, *, model: bool = True,
                      search_gpus: int | None = None) -> list[tuple[str, object]]:
    """The keys ``raw`` leaves to opatlas's defaults beyond ``assumed_defaults``' (which
    names the layout, the GPU and how ops are timed), with the values taken, where those
    change the estimate: the model's vocab, FFN width and kind, norm and attention always
    (``model``: the input is an opatlas YAML; a Hugging Face config.json, Megatron-LM's
    arguments and estimate-train-time's conversion decide them, and say what they assume
    themselves); parallel.sequence_parallel only with tp > 1, parallel.schedule only with
    pp > 1 (neither in a search, which tries them), parallel.dp_overlap and bucket_mb only
    with dp > 1 (in a search: more than one GPU); the links' latencies only where the
    alpha-beta model times collectives without measured samples (no cluster.nccl_data):
    intra_latency_us with more than one GPU and GPUs per node, inter_latency_us with more
    GPUs than a node holds. ``search_gpus``: a search of that many GPUs, whose layout is
    not yet chosen."""
    def given(section: str) -> dict[str, Any]:
        found = raw.get(section)
        return found if isinstance(found, dict) else {}

    p, c = cfg.parallel, cfg.cluster
    gpus = cfg.gpus if search_gpus is None else search_gpus
    out: list[tuple[str, object]] = []
    if model and "hf" not in given("model") and raw.get("source") != "ett":
        out += [(f"model.{k}", getattr(cfg.model, k) if k != "ffn" else cfg.model.ffn_width)
                for k in MODEL_DEFAULTS if k not in given("model")]
    searching = search_gpus is not None
    matters = {"sequence_parallel": not searching and p.tp > 1,
               "schedule": not searching and p.pp > 1,
               "dp_overlap": gpus > 1 if searching else p.dp > 1,
               "bucket_mb": gpus > 1 if searching else p.dp > 1}
    out += [(f"parallel.{k}", getattr(p, k)) for k, used in matters.items()
            if used and k not in given("parallel")]
    latencies = {"intra_latency_us": gpus > 1 and c.gpus_per_node > 1,
                 "inter_latency_us": gpus > c.gpus_per_node}
    if not c.nccl_data:
        out += [(f"cluster.{k}", getattr(c, k)) for k, used in latencies.items()
                if used and k not in given("cluster")]
    return out


def unstated_line(keys: Sequence[tuple[str, object]]) -> str:
    """``keys`` (from ``unstated_defaults``) as one line in the words of ``assumed_defaults``."""
    def shown(key: str, value: object) -> str:
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return f"{text} (4 · model.hidden)" if key == "model.ffn" else text

    values = ", ".join(f"{k} = {shown(k, v)}" for k, v in keys)
    return f"assumed (the defaults) {values}; --set KEY=VALUE or write them into the config"


def unstated_how(keys: Sequence[tuple[str, object]]) -> str:
    """How to state ``keys`` (from ``unstated_defaults``), the first one's value shown."""
    key, value = keys[0]
    text = str(value).lower() if isinstance(value, bool) else value
    return f"state them in the config or with --set, e.g. --set {key}={text}"


def _assume_unstated(notes: list[str], raw: dict[str, Any], cfg: TrainConfig, strict: bool,
                     source: str, megatron: bool, analytical: bool,
                     search_gpus: int | None = None) -> None:
    """``unstated_defaults`` said in one line (an error under ``strict``), and in data mode
    collectives timed by the alpha-beta model for want of ``cluster.nccl_data`` (an error
    under ``strict`` or ``ops.strict``, as the data's other fallbacks are); not where
    ``analytical`` (--analytical) will model them anyway."""
    keys = unstated_defaults(raw, cfg, model=not megatron, search_gpus=search_gpus)
    if keys:
        _assume(notes, [unstated_line(keys)], strict, source, unstated_how(keys))
    gpus = cfg.gpus if search_gpus is None else search_gpus
    if analytical or cfg.ops.mode != "data" or cfg.cluster.nccl_data or gpus <= 1:
        return
    if strict or cfg.ops.strict:
        raise strict_refusal(NO_NCCL_DATA, NO_NCCL_DATA_HOW, file=source,
                             key="cluster.nccl_data")
    notes.append(NO_NCCL_DATA)


def strict_refusal(assumption: str, how: str, *, file: str | None, key: str | None = None,
                   value: object = None) -> SpecError:
    """The one error ``--strict`` makes of a default the input leaves to opatlas: the
    ``assumption`` and ``how`` to state the value instead."""
    return SpecError(f"{assumption} (--strict refuses defaults: {how})", file=file, key=key,
                     value=value)


def _refuse_hf_defaults(raw: dict[str, Any], path: Path, cfg: TrainConfig,
                        strict: bool) -> None:
    """Under ``strict``, the first value taken for a field a Hugging Face config.json leaves
    out (``model.hf``: already said in the notes as it was mapped) is an error, unless the
    input gives the opatlas key that states it (``--set model.kv_heads=...``); so is the
    global batch assumed beside it."""
    model = raw.get("model")
    if not strict or not isinstance(model, dict) or "hf" not in model:
        return
    from opatlas.estimate.hf import Assumption, map_hf_config, read_hf_config, unstated
    from opatlas.estimate.sources import _hf_path

    file = _hf_path(model["hf"], path)  # validated already: it maps as it did then
    seq_len = cfg.model.seq_len if "seq_len" in model else None  # as validation read it
    mapped = map_hf_config(read_hf_config(file), str(file), seq_len)
    left = unstated(mapped, {f"model.{k}" for k in model if k != "hf"})
    training = raw.get("training")
    if not isinstance(training, dict) or "global_batch" not in training:
        left.append(Assumption("training.global_batch", cfg.training.global_batch,
                               "about 4 Mi tokens per step", "training.global_batch"))
    if left:
        a = left[0]
        raise strict_refusal(f"the config.json leaves it out; {a.value} would be assumed "
                             f"({a.why})", f"state it with {_how(a)}",
                             file=str(file), key=a.key, value=a.value)


def _how(a: Assumption) -> str:
    """How to state the value of the Assumption ``a`` explicitly."""
    value = str(a.given).lower() if isinstance(a.given, bool) else a.given
    how = f"--set {a.stated_by}={value}"
    return how if a.key == a.stated_by else f"{how}, or write {a.key} into the config.json"


def _named(exc: SpecError, sets: Sequence[str], raw: dict[str, Any]) -> SpecError:
    """``exc`` blamed on the --set that holds the bad value (``_blame``), in the words of
    the input's own format (an estimate-train-time config's keys)."""
    return upstream_names(_blame(exc, sets), raw, override_keys(sets))


def _blame(exc: SpecError, sets: Sequence[str]) -> SpecError:
    """Name --set when an override holds the bad value; a rule spanning keys (heads vs tp)
    names the overrides in play rather than echoing the whole config."""
    if exc.key is not None and exc.key in override_keys(sets):
        return SpecError(exc.detail, file=SET_SOURCE, key=exc.key, value=exc.value)
    if exc.key is None:  # a rule across keys (validate_config no longer echoes the mapping)
        given = f" (with --set {' --set '.join(sets)})" if sets else ""
        return SpecError(exc.detail + given, file=exc.file)
    key = exc.key
    inside = [s for s in sets if (k := s.partition("=")[0].strip()).startswith(key + ".")
              or k in RULE_PARTNERS.get(key, ())]
    if inside:  # a rule across keys (hidden vs heads, tp vs kv_heads), an override among them
        return SpecError(f"{exc.detail} (with --set {' --set '.join(inside)})", file=exc.file,
                         key=key, value=None if isinstance(exc.value, dict | list) else exc.value)
    return exc


# the other keys of the rules an error is reported at this key for (estimate.config's
# validators): an override of one of them is in play when the rule breaks
RULE_PARTNERS = {"parallel.tp": ("model.heads", "model.kv_heads", "model.ffn", "model.hidden"),
                 "model.kv_heads": ("model.heads",),
                 "parallel.ep": ("model.experts", "parallel.dp"),
                 "model.top_k": ("model.experts",)}


def with_flags(cfg: TrainConfig, strict: bool, analytical: bool,
               notes: list[str] | None = None) -> TrainConfig:
    """``cfg`` as the ``--strict`` and ``--analytical`` flags change it (estimate, analyze):
    ops.strict; roofline ops with alpha-beta collectives (no NCCL data). ``notes`` receives
    what ``--analytical`` assumes that the config's measured data had made moot, as the
    same config written ``ops: {mode: analytical}`` says it: the default efficiencies, and
    the links of the device's own system (else the default links); a default is an error
    under ``strict``."""
    if strict:
        cfg = cfg.model_copy(update={"ops": cfg.ops.model_copy(update={"strict": True})})
    if analytical and (cfg.ops.mode != "analytical" or cfg.cluster.nccl_data):
        cfg = _analytical(cfg, [] if notes is None else notes, strict)
    return cfg


def _analytical(cfg: TrainConfig, notes: list[str], strict: bool = False) -> TrainConfig:
    """Roofline ops and alpha-beta collectives. The fields the input gave
    (``model_fields_set``) are redone as a raw config without its NCCL data, so that the
    links and defaults are filled and said by the code a file's path goes through."""
    from opatlas.estimate.presets import device_links

    given = {k: getattr(cfg.cluster, k) for k in cfg.cluster.model_fields_set
             if k != "nccl_data"}
    cluster = device_links(given, notes) if cfg.cluster.nccl_data else given
    _forget_dropped_data(notes)
    ops = {**{k: getattr(cfg.ops, k) for k in cfg.ops.model_fields_set}, "mode": "analytical"}
    layout = {k: getattr(cfg, k).model_dump() for k in ("training", "parallel")}
    _assume(notes, [n for n in assumed_defaults({**layout, "cluster": cluster, "ops": ops})
                    if n not in notes], strict, "--analytical")
    out = cfg.model_copy(update={
        "ops": cfg.ops.model_copy(update={"mode": "analytical"}),
        "cluster": cfg.cluster.model_copy(update={**cluster, "nccl_data": None})})
    if cfg.cluster.nccl_data:  # the latencies, moot beside the samples, now time collectives
        latencies = [kv for kv in unstated_defaults({**layout, "cluster": cluster}, out,
                                                    model=False) if kv[0].startswith("cluster.")]
        if latencies:
            _assume(notes, [unstated_line(latencies)], strict, "--analytical",
                    unstated_how(latencies))
    return out


# the notes ``read_config`` makes of an estimate-train-time config's data folders
DATA_FOLDER_KEYS = ("nccl_data_folder", "operator_data_folder")


def _forget_dropped_data(notes: list[str]) -> None:
    """``notes`` without what loading said of the measured data ``--analytical`` drops: an
    upstream data folder replaced by the bundled one is not said, and the links of the
    device's own system are said as they are without NCCL data."""
    from opatlas.estimate.presets import BESIDE_NCCL_DATA

    notes[:] = [n.replace(BESIDE_NCCL_DATA, "") for n in notes
                if not n.startswith(tuple(f"{k} " for k in DATA_FOLDER_KEYS))]


# the links' latencies, which the alpha-beta model takes beside their bandwidths
LATENCY_KEYS = ("intra_latency_us", "inter_latency_us")


def fallback_assumptions(cfg: TrainConfig, estimates: Sequence[Any]) -> list[str]:
    """The defaults that data mode's fallbacks in ``estimates`` used: the efficiencies of the
    roofline an op without measured data is timed by, the links of the alpha-beta model a
    collective without samples is timed by."""
    from opatlas.estimate.presets import LINK_KEYS

    out = []
    ops = [k for k in ("compute_efficiency", "memory_efficiency")
           if k not in cfg.ops.model_fields_set]
    if cfg.ops.mode == "data" and ops and any(e.roofline_ops for e in estimates):
        out.append("assumed (the defaults) " + ", ".join(f"ops.{k} = {getattr(cfg.ops, k)}"
                                                         for k in ops)
                   + " for the ops without measured data (the roofline); --set ops.KEY=VALUE")
    # a device with a system of its own had its links filled and said at load (device_links)
    links = [k for k in (*LINK_KEYS, *LATENCY_KEYS) if k not in cfg.cluster.model_fields_set]
    if cfg.cluster.nccl_data and links and any(e.alpha_beta_collectives for e in estimates):
        out.append("assumed (the defaults) " + ", ".join(f"cluster.{k} = "
                                                         f"{getattr(cfg.cluster, k)}"
                                                         for k in links)
                   + " for the collectives without measured samples (the alpha-beta "
                     "model); --set cluster.KEY=VALUE")
    return out


def derived_collectives(cfg: TrainConfig, estimates: Sequence[Any]) -> list[str]:
    """How the NCCL samples timed a collective they have none of but imply (a reduce-scatter:
    ``comm.REDUCE_SCATTER_RULE``), as the estimator's model of the cluster (read once per
    cluster, so the one ``estimates`` used) recorded it; said where ``estimates`` show one,
    an error under ``ops.strict`` (--strict), as other data-mode substitutes are."""
    if not cfg.cluster.nccl_data:
        return []
    from opatlas.estimate.comm import take_derived_note
    from opatlas.estimate.engine import _comm_model

    note = take_derived_note(_comm_model(cfg))
    shown = any(it.name == "reduce_scatter" for e in estimates for it in e.items)
    if note is None or not shown:
        return []
    if cfg.ops.strict:
        raise OpatlasError(f"ops.strict: {note}; measure reduce_scatter into "
                           f"cluster.nccl_data, or drop --strict (ops.strict) to derive it")
    return [note]


def out_of_memory(est: Any) -> str | None:
    """What a layout that does not fit in memory needs, in one phrase; None when it fits (or
    the device's memory is not known)."""
    import math

    if est.fits or not math.isfinite(est.memory_limit_gib):
        return None
    where = (f" on pipeline stage {est.memory_stage}" if est.config.parallel.pp > 1 else "")
    return (f"the layout needs {est.memory_gib:.1f} GiB per GPU{where}, more than the "
            f"{est.memory_limit_gib:.0f} GiB it can use (out of memory)")
