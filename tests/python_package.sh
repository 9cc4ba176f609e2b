#!/bin/sh
# README.md's `pip install ./python`, as written, in a plain virtual environment (python3 -m venv, no
# system packages) with no package index (PIP_NO_INDEX): the package builds with its own backend
# (python/tidepool_build.py, the standard library alone) and bundles libtidepool, and from outside the
# source tree, with no TIDEPOOL_LIBRARY, `python -m tidepool` names the bundled library and the
# simulated device works from Python. The same with --no-build-isolation. Exit 77 (skipped) where the
# Python lacks venv or ensurepip (Debian's python3-venv).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
py=${TIDE_PACKAGE_PYTHON:-/usr/bin/python3}
if ! "$py" -c "import venv, ensurepip" 2>/dev/null; then
    echo "skipped: $py lacks venv or ensurepip (scripts/install-deps.sh python installs python3-venv)"
    exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command=$(grep -o '^pip install [^ ]*' "$root/README.md" | head -n 1)
[ "$command" = "pip install ./python" ] || { echo "FAIL: README.md's install command is now '$command'"; exit 1; }
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
"$py" -m venv "$work/plain"
# shellcheck disable=SC2086 # the README's words, split as a shell splits them
(cd "$root" && "$work/plain/bin/"$command -q) || { echo "FAIL: '$command' in a plain venv, offline"; exit 1; }
echo "ok: '$command' in a plain venv, offline"
"$py" -m venv "$work/env"
# shellcheck disable=SC2086
(cd "$root" && "$work/env/bin/"$command -q --no-build-isolation) ||
    { echo "FAIL: '$command --no-build-isolation' in a plain venv"; exit 1; }
echo "ok: '$command --no-build-isolation' in a plain venv"
cd "$work"
unset TIDEPOOL_LIBRARY PYTHONPATH
out=$("$work/env/bin/python" -m tidepool)
echo "$out"
echo "$out" | grep -q "^library: $work/env/lib/.*/site-packages/tidepool/libtidepool.so.[0-9]*$" ||
    { echo "FAIL: python -m tidepool does not use the library installed with the package"; exit 1; }
# The C++ hooks link against the installed library and load it by its soname through their rpath:
# the file must carry that name (a wheel that held it as libtidepool.so broke tidepool.torch.enable()).
lib=$(echo "$out" | sed -n 's/^library: //p')
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = "$(basename "$lib")" ] ||
    { echo "FAIL: the installed library is $(basename "$lib") but its soname is '$soname'"; exit 1; }
echo "ok: the installed library is named as its soname ($soname)"
echo "$out" | grep -q "^simulated device: available" || { echo "FAIL: no simulated device"; exit 1; }
# No torch in this venv's build: the wheel holds no prebuilt C++ hooks, and its manifest and
# `python -m tidepool` say why, in words (tidepool/_torch_hooks.py).
manifest=$(dirname "$lib")/_torch_hooks.json
grep -q '"prebuilt": false' "$manifest" && grep -q 'torch does not import in the build environment' "$manifest" ||
    { echo "FAIL: the wheel's $manifest does not say why no hooks were prebuilt"; cat "$manifest"; exit 1; }
ls "$(dirname "$lib")"/_torch_allocator_torch*.so >/dev/null 2>&1 &&
    { echo "FAIL: prebuilt hooks in a wheel built without torch"; exit 1; }
echo "$out" | grep -q "^C++ hooks for PyTorch, prebuilt: none: the wheel was built without them (torch does not import" ||
    { echo "FAIL: python -m tidepool does not say that no C++ hooks were prebuilt, and why"; exit 1; }
echo "ok: built without torch, the wheel has no prebuilt hooks, and says why"
# Without a driver, the reason names the one file the driver is (not a second name tried after it).
if echo "$out" | grep "^CUDA devices: 0 (the CUDA driver" | grep -q "libcuda\.so:"; then
    echo "FAIL: the missing driver is named as two different files"; exit 1
fi
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
