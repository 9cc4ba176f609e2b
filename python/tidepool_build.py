"""The build backend of the tidepool package (PEP 517), in this folder so that `pip install ./python`
needs nothing from a package index and nothing beyond the Python standard library: no setuptools, no
wheel. That is what lets the same command work offline, in a fresh virtual environment, with or without
build isolation (setuptools alone, as a venv has it, cannot write a wheel without the `wheel` package).

The wheel holds the Python package, libtidepool.so built from this repository with CMake, and the
headers the PyTorch allocator compiles against. Where torch imports in the build environment
(pip install --no-build-isolation ./python), it holds tidepool.torch's C++ hooks too, compiled here
against that torch (tidepool/_torch_hooks.py says how), so that enable() compiles nothing for it; where
torch does not import or the compile fails, the wheel is built without them and the build says why in
one line. The version is the one include/tidepool.h defines: it is written there only.
"""
import base64
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NAME = "tidepool"
HEADERS = ("tidepool.h", "tidepool_cuda.h", "tidepool_sim.h")

# The core metadata (https://packaging.python.org/specifications/core-metadata/), version 2.1.
METADATA = [
    ("Summary", "A caching allocator for GPU device memory, for PyTorch, CuPy, numba, cuda.core and RMM"),
    ("Requires-Python", ">=3.8"),
    ("License", "MIT"),
    ("Classifier", "Programming Language :: C"),
    ("Classifier", "Programming Language :: Python :: 3"),
    ("Classifier", "Operating System :: POSIX :: Linux"),
    ("Classifier", "License :: OSI Approved :: MIT License"),
]

def _hooks():
    """tidepool/_torch_hooks.py, loaded by its path: importing the package would load libtidepool."""
    spec = importlib.util.spec_from_file_location("_tidepool_torch_hooks",
                                                  os.path.join(HERE, NAME, "_torch_hooks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch_requirement():
    """The releases tidepool.torch's hooks were written from, as a requirement: torch>=2.8,<2.12."""
    hooks = _hooks()
    return "torch>=%d.%d,<%d.%d" % (hooks.OLDEST_TORCH + (hooks.NEWEST_TORCH[0], hooks.NEWEST_TORCH[1] + 1))


EXTRAS = {"torch": _torch_requirement(), "cupy": "cupy-cuda13x", "numba": "numba-cuda", "cuda-core": "cuda-core"}


def version():
    """TIDE_VERSION_MAJOR.MINOR.PATCH from include/tidepool.h."""
    with open(os.path.join(ROOT, "include", "tidepool.h")) as f:
        text = f.read()
    return ".".join(re.search(r"#define TIDE_VERSION_%s (\d+)" % part, text).group(1)
                    for part in ("MAJOR", "MINOR", "PATCH"))


def _dist_info():
    return "%s-%s.dist-info" % (NAME, version())


def _tag():
    """The wheel carries a shared library loaded with ctypes: any Python 3, this platform only."""
    return "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())


def _metadata_text():
    lines = ["Metadata-Version: 2.1", "Name: " + NAME, "Version: " + version()]
    lines += ["%s: %s" % item for item in METADATA]
    for extra, requirement in EXTRAS.items():
        lines += ["Provides-Extra: " + extra, 'Requires-Dist: %s; extra == "%s"' % (requirement, extra)]
    return "\n".join(lines) + "\n"


def _wheel_text():
    return "Wheel-Version: 1.0\nGenerator: tidepool_build\nRoot-Is-Purelib: false\nTag: %s\n" % _tag()


def _build_library():
    """libtidepool.so, built with CMake in build-python/ beside this folder; its path."""
    build = os.path.join(ROOT, "build-python")
    for what in (["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release"],
                 ["cmake", "--build", build, "--target", "tidepool_shared", "-j"]):
        try:
            # The build's own output goes to stderr: a backend's stdout may be read by the frontend.
            subprocess.run(what, check=True, stdout=sys.stderr)
        except FileNotFoundError:
            raise SystemExit("building libtidepool needs CMake and a C compiler: %s was not found "
                             "(on Debian: apt-get install cmake gcc)" % what[0])
    return os.path.realpath(os.path.join(build, "libtidepool.so"))


def _soname_of(built):
    """libtidepool.so.MAJOR for the built libtidepool.so.MAJOR.MINOR.PATCH: its soname."""
    name = os.path.basename(built)
    stem, _, version = name.partition(".so.")
    return "%s.so.%s" % (stem, version.split(".")[0]) if version else name


def torch_hooks_files(library, out_dir=None):
    """(name in the wheel, path here) of tidepool.torch's C++ hooks compiled against the torch of this
    environment, linked with library, and of their manifest (_torch_hooks.json), which says what they
    were built against or, where none were built, why; that reason is also written as one line to
    stderr. The wheel builds either way."""
    hooks = _hooks()
    out_dir = out_dir or os.path.join(ROOT, "build-python", "torch_hooks")
    os.makedirs(out_dir, exist_ok=True)
    for old in os.listdir(out_dir):  # a build for another torch, left by an earlier wheel
        if old.endswith(".so") or old == hooks.MANIFEST:
            os.remove(os.path.join(out_dir, old))
    files = []
    try:
        module, manifest = hooks.prebuild(os.path.join(HERE, NAME, hooks.SOURCE), os.path.join(ROOT, "include"),
                                          library, out_dir)
        files.append(("%s/%s" % (NAME, os.path.basename(module)), module))
        sys.stderr.write("tidepool: C++ hooks for PyTorch prebuilt for torch %s (CUDA %s, %s): %s\n"
                         % (manifest["torch"], manifest["cuda"], manifest["python"], os.path.basename(module)))
    except hooks.HooksUnavailable as e:
        manifest = {"prebuilt": False, "why": str(e)}
        sys.stderr.write("tidepool: the C++ hooks for PyTorch were not prebuilt: %s; tidepool.torch.enable() "
                         "compiles them on first use\n" % e)
    path = os.path.join(out_dir, hooks.MANIFEST)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    files.append(("%s/%s" % (NAME, hooks.MANIFEST), path))
    return files


def _files():
    """(name in the wheel, path here) for every file of the package."""
    package = os.path.join(HERE, NAME)
    for name in sorted(os.listdir(package)):
        if name.endswith(".py") or name == "_torch_allocator.cpp":
            yield "%s/%s" % (NAME, name), os.path.join(package, name)
    # The library goes in under its soname (libtidepool.so.0, from CMake's libtidepool.so.0.2.0): the C++
    # hooks tidepool.torch compiles link against it, record that name as the one they need, and find
    # it beside the library through their rpath. Under any other name they would not load.
    library = _build_library()
    yield "%s/%s" % (NAME, _soname_of(library)), library
    for item in torch_hooks_files(library):
        yield item
    for header in HEADERS:
        yield "%s/include/%s" % (NAME, header), os.path.join(ROOT, "include", header)
    yield "%s/LICENSE" % _dist_info(), os.path.join(ROOT, "LICENSE")


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


# ---- the PEP 517 hooks ----

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(_metadata_text())
    with open(os.path.join(info, "WHEEL"), "w") as f:
        f.write(_wheel_text())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    wheel_name = "%s-%s-%s.whl" % (NAME, version(), _tag())
    path = os.path.join(wheel_directory, wheel_name)
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        def add(name, data, mode=0o644):
            entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = (0o100000 | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(entry, data)
            record.append(_record_line(name, data))

        for name, source in _files():
            with open(source, "rb") as f:
                add(name, f.read(), 0o755 if re.search(r"\.so(\.\d+)*$", name) else 0o644)
        add("%s/METADATA" % _dist_info(), _metadata_text().encode())
        add("%s/WHEEL" % _dist_info(), _wheel_text().encode())
        record.append("%s/RECORD,," % _dist_info())
        whl.writestr(zipfile.ZipInfo("%s/RECORD" % _dist_info(), date_time=(1980, 1, 1, 0, 0, 0)),
                     "\n".join(record) + "\n")
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    """The package's sources with this backend; the library is built from the repository around it,
    so an sdist alone does not build: install from a clone (pip install ./python)."""
    raise SystemExit("tidepool has no source distribution: pip install ./python from a clone of the "
                     "repository (the wheel builds libtidepool from the repository's sources)")
