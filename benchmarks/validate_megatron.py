"""Predicted vs measured step times of Megatron-LM's published Selene (DGX A100) runs.

Each run of ``examples/validation/megatron_selene_a100_2021.csv`` (Narayanan et al. SC'21,
Table 1; see that folder's PROVENANCE.md) is an opatlas config beside it, with every assumption
the table leaves open written in its comments. This prints, per run, the estimate, the measured
step time and the signed error, then the mean absolute error.

    PYTHONPATH=src python benchmarks/validate_megatron.py [--json] [gpt-1.7b gpt-18b ...]
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "examples" / "validation"
TABLE = FOLDER / "megatron_selene_a100_2021.csv"


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


def measured() -> dict[str, float]:
    """Step time in seconds per run, as the table derives it."""
    with TABLE.open() as f:
        return {config_name(r["model"]): float(r["step_time_s_derived"]) for r in csv.DictReader(f)}


def validate(names: list[str] | None = None) -> list[Run]:
    from opatlas.estimate import estimate_step, load_config

    runs = []
    for name, step in measured().items():
        if names and name not in names:
            continue
        est = estimate_step(load_config(FOLDER / f"{name}.yml"))
        runs.append(Run(name, step, est.step_time_s, est.breakdown))
    return runs


def mean_abs_error(runs: list[Run]) -> float:
    return sum(abs(r.error) for r in runs) / len(runs)


def main(argv: list[str]) -> None:
    as_json = "--json" in argv
    runs = validate([a for a in argv if not a.startswith("--")] or None)
    if as_json:
        print(json.dumps({"runs": [{"name": r.name, "measured_s": r.measured_s,
                                    "predicted_s": r.predicted_s, "error": r.error,
                                    "breakdown": r.breakdown} for r in runs],
                          "mean_abs_error": mean_abs_error(runs)}))
        return
    print(f"{'run':10s} {'predicted s':>12s} {'measured s':>11s} {'error':>7s}")
    for r in runs:
        print(f"{r.name:10s} {r.predicted_s:12.3f} {r.measured_s:11.3f} {100 * r.error:+6.1f}%")
    print(f"mean absolute error {100 * mean_abs_error(runs):.1f}% over {len(runs)} runs")


if __name__ == "__main__":
    main(sys.argv[1:])
