"""Installs the tidepool Python package with libtidepool built from this repository and bundled in it.

    pip install ./python                       (from the repository root; needs CMake and a C compiler)
"""
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def header_version():
    """The version tidepool.h defines (TIDE_VERSION_MAJOR.MINOR.PATCH): it is written there only."""
    with open(os.path.join(ROOT, "include", "tidepool.h")) as f:
        text = f.read()
    return ".".join(re.search(r"#define TIDE_VERSION_%s (\d+)" % part, text).group(1)
                    for part in ("MAJOR", "MINOR", "PATCH"))


class BuildWithLibrary(build_py):
    """Builds libtidepool with CMake and puts it, and the headers for the PyTorch hooks, in the package."""

    def run(self):
        super().run()
        build = os.path.join(ROOT, "build-python")
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "tidepool_shared", "-j"], check=True)
        package = os.path.join(self.build_lib, "tidepool")
        shutil.copyfile(os.path.realpath(os.path.join(build, "libtidepool.so")),
                        os.path.join(package, "libtidepool.so"))
        os.makedirs(os.path.join(package, "include"), exist_ok=True)
        for header in ("tidepool.h", "tidepool_cuda.h", "tidepool_sim.h"):
            shutil.copyfile(os.path.join(ROOT, "include", header), os.path.join(package, "include", header))


setup(
    name="tidepool",
    version=header_version(),
    description="A caching allocator for GPU device memory (PyTorch and CuPy integrations)",
    packages=["tidepool"],
    package_data={"tidepool": ["_torch_allocator.cpp"]},
    cmdclass={"build_py": BuildWithLibrary},
    python_requires=">=3.8",
)
