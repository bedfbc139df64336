"""The models' part of ``opatlas demo``: fit on what the demo measured, evaluate, predict."""

from __future__ import annotations

import warnings
from pathlib import Path

from rich.console import Console
from rich.table import Table

from opatlas.fit.data import load_op_data
from opatlas.fit.evaluate import evaluate_all
from opatlas.predict import Predictor


def demo_fit(out: Path, console: Console) -> None:
    console.rule("[bold]3. fit + predict: hybrid models on the CPU measurements")
    store = out / "opatlas.duckdb"
    data = load_op_data(store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the default 20% test share: the 12-row layernorm sweep keeps the 10 training rows
        # a model is fitted on (recipes.MIN_FIT_ROWS)
        evs = evaluate_all(data, "hybrid", "random:0.2", baseline=False)
    table = Table("op", "pass", "n train/test", "held-out MAPE %", title="fitted on this CPU")
    for e in evs:
        table.add_row(e.op, e.pass_, f"{e.n_train}/{e.n_test}", f"{100 * e.mape:.1f}")
    console.print(table)
    device = data["device"].iloc[0]
    pred = Predictor(device=device, dtype="fp32", data=store, cache_dir=out / "models")
    shape = {"b": 1, "l": 1024, "dim": 1024, "mp": 1, "role": "qkv"}
    fwd = pred.predict("linear", [shape])[0]
    console.print(f"  predicted linear/qkv fwd at b=1 l=1024 dim=1024 (beyond the sweep): "
                  f"{fwd:,.0f} µs on this CPU")
