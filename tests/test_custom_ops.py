"""A user's own op from their module, without editing opatlas."""

from __future__ import annotations

from conftest import run_cli, write_spec

MODULE = '''
from opatlas.ops import Op, register_op

@register_op
class Scale(Op):
    name = "scale"
    params = ("n",)
    def flops(self, p): return {"fwd": float(p["n"]), "bwd": float(p["n"])}
    def min_bytes(self, p): return {"fwd": 8.0 * p["n"], "bwd": 12.0 * p["n"]}
    def build(self, p, device):
        import torch
        return torch.randn(p["n"], device=device, requires_grad=True)
    def forward(self, x): return 2 * x
'''


def test_ops_module_plugs_a_new_op_into_expand_and_run(tmp_path):
    mod = tmp_path / "my_ops.py"
    mod.write_text(MODULE)
    spec = write_spec(tmp_path / "s.yml", {"op": "scale", "params": {"n": [16, 32]},
                                          "repeats": 2, "warmup": 0})
    assert run_cli("sweep", "expand", str(spec)).returncode == 2  # unknown without the module
    out = run_cli("sweep", "expand", str(spec), "--ops-module", str(mod), "--json", check=True)
    assert '"valid": 2' in out.stdout
    store = tmp_path / "s.duckdb"
    run_cli("run", str(spec), "--ops-module", str(mod), "--store", str(store), check=True)
    rows = run_cli("results", "--store", str(store), "--format", "csv", check=True).stdout
    assert rows.count("scale,") >= 4 and ",ok," in rows
