"""Predicted vs measured step times of Megatron-LM's published runs on Selene (DGX A100).

Three tables, each run an opatlas config beside it with every assumption the table leaves open
written in its comments (see each folder's PROVENANCE.md):

- ``selene-2021``: Narayanan et al. SC'21, Table 1, GPT 1.7B–1T (``examples/validation/``);
- ``korthikanti-2022``: Korthikanti et al. 2022, the full-recomputation baseline of GPT 22B–1T
  (``examples/validation/korthikanti-2022/``);
- ``korthikanti-2022-selective``: the same runs with the paper's own method, sequence
  parallelism and selective recomputation (``examples/validation/korthikanti-2022/selective/``).

This prints, per run, the estimate, the measured step time and the signed error, then each
table's mean absolute error.

    PYTHONPATH=src python benchmarks/validate_megatron.py [--json] [--table NAME] [gpt-1.7b ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "examples" / "validation"


@dataclass(frozen=True)
class Table:
    folder: Path
    csv_name: str
    time_column: str

    @property
    def path(self) -> Path:
        return self.folder / self.csv_name


TABLES = {
    "selene-2021": Table(FOLDER, "megatron_selene_a100_2021.csv", "step_time_s_derived"),
    "korthikanti-2022": Table(FOLDER / "korthikanti-2022", "megatron_full_recompute_a100_2022.csv",
                              "iteration_time_s"),
    "korthikanti-2022-selective": Table(FOLDER / "korthikanti-2022" / "selective",
                                        "megatron_selective_sp_a100_2022.csv", "iteration_time_s"),
}
DEFAULT_TABLE = "selene-2021"


@dataclass(frozen=True)
class Run:
    name: str
    measured_s: float
    predicted_s: float
    breakdown: dict[str, float]

    @property
    def error(self) -> float:
        """Signed relative error of the estimate."""
        return self.predicted_s / self.measured_s - 1.0


def config_name(model: str) -> str:
    """``GPT 1.7B`` -> ``gpt-1.7b``, the config's file stem."""
    return "gpt-" + model.split()[1].lower()


def config_path(name: str, table: str = DEFAULT_TABLE) -> Path:
    return TABLES[table].folder / f"{name}.yml"


def measured(table: str = DEFAULT_TABLE) -> dict[str, float]:
    """Step time in seconds per run, as the table gives or derives it."""
    t = TABLES[table]
    with t.path.open() as f:
        return {config_name(r["model"]): float(r[t.time_column]) for r in csv.DictReader(f)}


def validate(names: list[str] | None = None, table: str = DEFAULT_TABLE) -> list[Run]:
    from opatlas.estimate import estimate_step, load_config

    runs = []
    for name, step in measured(table).items():
        if names and name not in names:
            continue
        est = estimate_step(load_config(config_path(name, table)))
        runs.append(Run(name, step, est.step_time_s, est.breakdown))
    return runs


def mean_abs_error(runs: list[Run]) -> float:
    return sum(abs(r.error) for r in runs) / len(runs)


def _print(table: str, runs: list[Run]) -> None:
    print(f"{table}: {TABLES[table].path.relative_to(FOLDER.parents[1])}")
    print(f"{'run':10s} {'predicted s':>12s} {'measured s':>11s} {'error':>7s}")
    for r in runs:
        print(f"{r.name:10s} {r.predicted_s:12.3f} {r.measured_s:11.3f} {100 * r.error:+6.1f}%")
    print(f"mean absolute error {100 * mean_abs_error(runs):.1f}% over {len(runs)} runs\n")


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Predicted vs measured step times of "
                                                 "Megatron-LM's published Selene runs.")
    parser.add_argument("runs", nargs="*", help="only these runs, e.g. gpt-1.7b gpt-530b")
    parser.add_argument("--table", choices=list(TABLES), help="one table (default: all)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    tables = [args.table] if args.table else list(TABLES)
    known = {name for t in tables for name in measured(t)}
    if unknown := [r for r in args.runs if r not in known]:
        parser.error(f"no run {', '.join(unknown)} in {', '.join(tables)}; runs: "
                     f"{', '.join(sorted(known))}")
    return args


def main(argv: list[str]) -> None:
    import warnings

    warnings.showwarning = lambda msg, *_, **__: print(f"warning: {msg}", file=sys.stderr)
    args = _args(argv)
    tables = [args.table] if args.table else list(TABLES)
    results = {t: validate(args.runs or None, t) for t in tables}
    results = {t: runs for t, runs in results.items() if runs}
    if args.json:
        print(json.dumps({t: {"runs": [{"name": r.name, "measured_s": r.measured_s,
                                        "predicted_s": r.predicted_s, "error": r.error,
                                        "breakdown": r.breakdown} for r in runs],
                              "mean_abs_error": mean_abs_error(runs)}
                          for t, runs in results.items()}))
        return
    for t, runs in results.items():
        _print(t, runs)


if __name__ == "__main__":
    main(sys.argv[1:])
