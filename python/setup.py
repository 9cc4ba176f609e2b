"""The build step of the tidepool package (pyproject.toml has the rest): libtidepool built from this
repository with CMake and bundled in the package, with the headers the PyTorch allocator compiles
against. The version is the one tidepool.h defines.

    pip install ./python                       (from the repository root; needs CMake and a C compiler)
"""
import os
import re
import shutil
import subprocess

from setuptools import Distribution, setup
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


class WithNativeLibrary(Distribution):
    """The wheel carries a shared library: it is for this platform, not pure Python."""

    def has_ext_modules(self):
        return True


setup(
    version=header_version(),
    cmdclass={"build_py": BuildWithLibrary},
    distclass=WithNativeLibrary,
)
