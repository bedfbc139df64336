#!/usr/bin/env bash
# Run HERE (a machine with PyPI), before a GPU session: downloads the wheels opatlas needs that
# the device image lacks (it has torch, numpy, pandas, pyarrow, numba, typer, rich, pytest, ...
# but no DuckDB, pydantic or platformdirs) into .whl/, which git ignores, for `carry: [".whl"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl && mkdir .whl
PY=${PY_VERSION:-3.12}  # the device's python3
# the versions the dev and CI venvs resolve to (a store must read back here unchanged)
for req in "duckdb==2.0.0" "pydantic==2.14.3" "pydantic-core==2.50.4" "annotated-types==0.7.0" \
           "typing-inspection==0.4.5" "platformdirs==4.14.7"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$req"
done
du -sh .whl && ls .whl
