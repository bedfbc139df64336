"""Where estimate-train-time sample files live and how they are named, without importing the
store (DuckDB): the bundled dataset, ``{GPU}_{op}_{precision}[_{nodes}_{gpn}].csv`` names, and
the name a folder files a device under."""

from __future__ import annotations

import re
from pathlib import Path

from opatlas.errors import StoreError

_NAME = re.compile(r"^(?P<gpu>[^_]+)_(?P<op>.+)_(?P<prec>fp16|bf16|fp32)"
                   r"(?:_(?P<nodes>\d+)_(?P<gpn>\d+))?$")


def parse_sample_name(path: Path) -> dict[str, str] | None:
    m = _NAME.match(path.stem)
    return m.groupdict() if m else None


def filed_device_name(folder: str | Path, device: str) -> str:
    """The name a folder of sampling CSVs files ``device`` under (any alias of the same catalog
    device matches, e.g. A100 -> NVIDIAA100-SXM4-80GB); warns when it holds none."""
    import warnings

    from opatlas.devices import same_device

    folder = Path(folder)
    names = sorted({m["gpu"] for f in folder.glob("*.csv") if (m := parse_sample_name(f))})
    for name in names:
        if same_device(name, device):
            return name
    warnings.warn(f"no measured collectives for device {device!r} in {folder} (it holds "
                  f"{', '.join(names) or 'none'}): the alpha-beta model is used", stacklevel=2)
    return str(device).replace(" ", "")


# the op datasets a name selects (``--data NAME``, a config's ``ops.data``): folder under
# opatlas/data holding ``operator/`` sample CSVs
BUNDLED_OPS = {"bundled": "ett-a100", "a100": "ett-a100", "h100": "h100"}


def op_data_path(source: str | Path) -> Path:
    """Where op data named ``source`` lives: a bundled dataset's ``operator`` folder for one of
    :data:`BUNDLED_OPS`'s names (unless a file or folder of that name is here: a path the user
    gives wins), else ``source`` as a path."""
    name = str(source)
    if name in BUNDLED_OPS and not Path(name).exists():
        return bundled_dataset(BUNDLED_OPS[name]) / "operator"
    return Path(source)


def bundled_dataset(name: str = "ett-a100") -> Path:
    from importlib import resources

    path = Path(str(resources.files("opatlas") / "data" / name))
    if not path.is_dir():
        raise StoreError(f"no bundled dataset {name!r}")
    return path
