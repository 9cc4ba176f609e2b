#!/bin/sh
# pip install ./python in a fresh virtual environment, offline (the system's setuptools, no build
# isolation): the package builds and bundles libtidepool, and from outside the source tree, with no
# TIDEPOOL_LIBRARY, `python -m tidepool` names the bundled library and the simulated device works
# from Python. Exit 77 (skipped) where the Python lacks venv, setuptools or wheel.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
py=${TIDE_PACKAGE_PYTHON:-/usr/bin/python3}
if ! "$py" -c "import venv, ensurepip, setuptools, wheel" 2>/dev/null; then
    echo "skipped: $py lacks venv, ensurepip, setuptools or wheel (scripts/install-deps.sh python installs them)"
    exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m venv --system-site-packages "$work/env"
"$work/env/bin/python" -m pip install -q --no-build-isolation --no-deps "$root/python"
cd "$work"
unset TIDEPOOL_LIBRARY PYTHONPATH
out=$("$work/env/bin/python" -m tidepool)
echo "$out"
echo "$out" | grep -q "^library: $work/env/lib/.*/site-packages/tidepool/libtidepool.so$" ||
    { echo "FAIL: python -m tidepool does not use the library installed with the package"; exit 1; }
echo "$out" | grep -q "^simulated device: available" || { echo "FAIL: no simulated device"; exit 1; }
"$work/env/bin/python" - "$root/include/tidepool.h" <<'PY'
import re, sys
import tidepool
from tidepool.sim import SimulatedDevice
header = open(sys.argv[1]).read()
want = ".".join(re.search(r"#define TIDE_VERSION_%s (\d+)" % k, header).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
assert tidepool.__version__ == want, (tidepool.__version__, want)
with SimulatedDevice(1 << 30, "expandable_segments:True") as dev:
    ptrs = [dev.malloc(size) for size in (1000, 3 << 20, 40 << 20)]
    assert dev.stats()["allocation.all.current"] == 3
    for p in ptrs:
        dev.free(p)
    try:
        dev.free(ptrs[0])
        raise SystemExit("FAIL: a double free was accepted")
    except tidepool.TidepoolError as e:
        assert "tide_free" in str(e), e
    dev.empty_cache()
    assert dev.stats()["reserved_bytes.all.current"] == 0
    dev.check()
print("ok: the installed package runs the simulated device from Python")
PY
