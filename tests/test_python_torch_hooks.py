"""tidepool.torch's C++ hooks built at install time, checked without torch and without a GPU
(tidepool/_torch_hooks.py, python/tidepool_build.py): the name a build for one torch takes, which
prebuilt build fits the torch that runs and why not in words, the compiler's command line, where CUDA's
headers are found (CUDA_HOME, NVIDIA's wheels), the build backend over a stand-in torch and a stand-in
compiler (the module and its manifest in the wheel's files, or one line saying why not), and
tidepool.torch loading a prebuilt module or falling back to PyTorch's extension builder under a name
that carries the torch release. The compile itself against a real torch runs on a GPU machine.

    TIDEPOOL_LIBRARY=build/libtidepool.so python3 tests/test_python_torch_hooks.py
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from tidepool import _torch_hooks as hooks  # noqa: E402

failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def touch(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


FACTS = {"torch": "2.11.0+cu130", "cuda": "13.0", "python": "cp312", "cxx11_abi": True}


def names():
    check(hooks.torch_release("2.11.0+cu130") == (2, 11) and hooks.torch_release("2.12.0a0+git12ab") == (2, 12)
          and hooks.torch_release("nightly") is None, "torch releases read from version strings")
    check(hooks.cuda_tag("13.0") == "cu130" and hooks.cuda_tag("12.8") == "cu128" and hooks.cuda_tag(None) is None,
          "CUDA versions as torch's tags")
    check(hooks.python_tag("cpython", (3, 12)) == "cp312", "the Python as a wheel tag")
    check(hooks.module_name(FACTS) == "_torch_allocator_torch2_11_cu130_cp312",
          "a prebuilt module is named for its torch release, CUDA and Python: %s" % hooks.module_name(FACTS))
    check(hooks.jit_name(FACTS) == "tidepool_torch_allocator_torch2_11_cu130"
          and hooks.jit_name(dict(FACTS, torch="2.10.1")) != hooks.jit_name(FACTS),
          "the compiled-on-first-use hooks carry the torch release in their cached name")


def choosing(tmp):
    package = os.path.join(tmp, "package")
    module = hooks.module_name(FACTS)
    touch(os.path.join(package, module + ".so"))
    manifest = dict(FACTS, prebuilt=True, module=module)
    path, why = hooks.choose_prebuilt(manifest, FACTS, package)
    check(path == os.path.join(package, module + ".so") and "loads them without compiling" in why,
          "a build for this torch is chosen: %s" % why)
    path, why = hooks.choose_prebuilt(manifest, dict(FACTS, torch="2.11.1"), package)
    check(path is not None, "a patch release of the same torch takes the same build")
    for change, word in ((dict(torch="2.10.0+cu128"), "torch 2.10.0+cu128, not 2.11.0+cu130"),
                         (dict(cuda="12.8"), "CUDA 12.8, not 13.0"), (dict(cuda=None), "CUDA none"),
                         (dict(python="cp311"), "Python cp311, not cp312"), (dict(cxx11_abi=False), "ABI flag 0")):
        path, why = hooks.choose_prebuilt(manifest, dict(FACTS, **change), package)
        check(path is None and word in why and "compiles them" in why, "another %s: not chosen, and said: %s"
              % (list(change)[0], why))
    path, why = hooks.choose_prebuilt(None, FACTS, package)
    check(path is None and "compiles them on first use" in why, "no manifest (source tree): %s" % why)
    path, why = hooks.choose_prebuilt({"prebuilt": False, "why": "torch does not import in the build environment"},
                                      FACTS, package)
    check(path is None and "torch does not import in the build environment" in why,
          "a wheel built without them says the build's reason: %s" % why)
    path, why = hooks.choose_prebuilt(dict(manifest, module="_gone"), FACTS, package)
    check(path is None and "missing" in why, "a listed module that is not there: %s" % why)
    path, why = hooks.choose_prebuilt(manifest, None, package)
    check(path is None and "built for torch 2.11 with CUDA 13.0 for CPython 3.12" in why
          and "does not import" in why, "without torch, what they were built for: %s" % why)
    touch(os.path.join(package, hooks.MANIFEST), json.dumps(manifest))
    check(hooks.read_manifest(package) == manifest and hooks.read_manifest(tmp) is None, "the manifest read back")


def command():
    argv = hooks.compile_command("ccache g++", "/s/_torch_allocator.cpp", "/o/m.so", "m",
                                 ["/t/include", "/cuda/include"],
                                 ["/repo/include"], ["/t/lib"], ["c10", "torch_cuda"], ["/b/libtidepool.so.0.2.0"],
                                 False, ['-DPYBIND11_BUILD_ABI="_cxxabi1018"'])
    check(argv[:2] == ["ccache", "g++"], "CXX split as a shell would (ccache g++)")
    for flag in ("-shared", "-fPIC", "-O2", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=0", "-DTORCH_EXTENSION_NAME=m",
                 "-DTORCH_API_INCLUDE_EXTENSION_H", '-DPYBIND11_BUILD_ABI="_cxxabi1018"', "-I/repo/include",
                 "-L/t/lib", "-lc10", "-ltorch_cuda", "-Wl,-rpath,$ORIGIN"):
        check(flag in argv, "the command has %s" % flag)
    check(argv[argv.index("-o") + 1] == "/o/m.so" and argv.index("/s/_torch_allocator.cpp") < argv.index("-o"),
          "source, then -o output")
    check(argv.count("-isystem") == 2 and argv[argv.index("-isystem") + 1] == "/t/include",
          "torch's and CUDA's headers as system headers, torch's first")
    check(argv.index("/b/libtidepool.so.0.2.0") < argv.index("-lc10"), "libtidepool linked by its path")
    check("-D_GLIBCXX_USE_CXX11_ABI=1" in hooks.compile_command("c++", "s", "o", "m", [], [], [], [], [], True),
          "torch's ABI flag passed as it is")


def cuda_headers(tmp):
    home = os.path.join(tmp, "cuda")
    touch(os.path.join(home, "include", "cuda_runtime_api.h"))
    touch(os.path.join(home, "include", "crt", "host_config.h"))
    touch(os.path.join(home, "lib64", "libcudart.so"))
    site = os.path.join(tmp, "site")
    touch(os.path.join(site, "nvidia", "cu13", "include", "cuda_runtime_api.h"))
    touch(os.path.join(site, "nvidia", "cu13", "lib", "libcudart.so.13"))
    check(hooks.cuda_include_dirs(home, [site]) == [os.path.join(home, "include")],
          "CUDA_HOME's headers before the wheels'")
    check(hooks.cudart_library(home, [site]) == os.path.join(home, "lib64", "libcudart.so"), "CUDA_HOME's runtime")
    check(hooks.cudart_library(None, [site]) == os.path.join(site, "nvidia", "cu13", "lib", "libcudart.so.13"),
          "the runtime of CUDA 13's wheel, by its versioned name")
    try:
        hooks.cuda_include_dirs(None, [site])
        check(False, "a runtime wheel without crt/host_config.h is refused")
    except hooks.HooksUnavailable as e:
        check("crt/host_config.h" in str(e) and "nvidia-cuda-nvcc" in str(e),
              "a runtime wheel without crt/host_config.h is refused, saying what to install: %s" % e)
    touch(os.path.join(site, "nvidia", "cuda_nvcc", "include", "crt", "host_config.h"))
    check(hooks.cuda_include_dirs(None, [site]) == [os.path.join(site, "nvidia", "cu13", "include"),
                                                     os.path.join(site, "nvidia", "cuda_nvcc", "include")],
          "the runtime's headers and the compiler's crt/ from NVIDIA's wheels")
    try:
        hooks.cuda_include_dirs(None, [os.path.join(tmp, "empty")])
        check(False, "no CUDA headers anywhere is refused")
    except hooks.HooksUnavailable as e:
        check("cuda_runtime_api.h" in str(e) and "CUDA_HOME" in str(e), "no CUDA headers anywhere: %s" % e)


STAND_IN_TORCH = '''
__version__ = {version!r}
class version:
    cuda = {cuda!r}
class _C:
    _GLIBCXX_USE_CXX11_ABI = True
{extra}
'''
STAND_IN_CPP_EXTENSION = '''
import json, os
CUDA_HOME = {cuda_home!r}
def include_paths(device_type="cpu"):
    return [{include!r}]
def library_paths(device_type="cpu"):
    return [{lib!r}]
def _get_pybind11_abi_build_flags():
    return ['-DPYBIND11_BUILD_ABI="_cxxabi1018"']
def load(**kwargs):
    with open({record!r}, "w") as f:
        json.dump(kwargs, f)
    return "compiled by the extension builder"
'''
STAND_IN_COMPILER = '''#!/bin/sh
# records its command line; creates what -o names, or fails as a compile error does
printf '%s\\n' "$@" > "{record}"
[ -n "$FAIL_COMPILE" ] && {{ echo "_torch_allocator.cpp:12:3: error: boom"; exit 1; }}
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && : > "$2"; shift; done
exit 0
'''


def stand_in_torch(tmp, version="2.11.0+cu130", cuda="13.0", extra=""):
    """A torch package that says what the build reads (version, CUDA, ABI, include and library folders,
    CUDA_HOME); its extension builder records what it is asked."""
    base = tempfile.mkdtemp(prefix="torch-%s-" % version, dir=tmp)
    home = os.path.join(base, "cuda")
    touch(os.path.join(home, "include", "cuda_runtime_api.h"))
    touch(os.path.join(home, "include", "crt", "host_config.h"))
    touch(os.path.join(home, "lib64", "libcudart.so"))
    touch(os.path.join(base, "torch", "__init__.py"), STAND_IN_TORCH.format(version=version, cuda=cuda, extra=extra))
    touch(os.path.join(base, "torch", "utils", "__init__.py"))
    touch(os.path.join(base, "torch", "utils", "cpp_extension.py"), STAND_IN_CPP_EXTENSION.format(
        cuda_home=home, include=os.path.join(base, "include"), lib=os.path.join(base, "lib"),
        record=os.path.join(base, "load.json")))
    return base


def backend(tmp, torch_dir, **env):
    """tidepool_build.torch_hooks_files over a stand-in torch and compiler: (files, stderr lines, argv)."""
    record = os.path.join(tmp, "argv.txt")
    if os.path.exists(record):
        os.remove(record)
    cxx = touch(os.path.join(tmp, "fake-c++"), STAND_IN_COMPILER.format(record=record))
    os.chmod(cxx, 0o755)
    library = touch(os.path.join(tmp, "libtidepool.so.0.2.0"))
    out = os.path.join(tmp, "hooks-out")
    code = ("import json, sys; sys.path[:0] = [%r, %r]; import tidepool_build; "
            "print(json.dumps(tidepool_build.torch_hooks_files(%r, %r)))"
            % (torch_dir, os.path.join(ROOT, "python"), library, out))
    environment = dict(os.environ, CXX=cxx, **env)
    if hooks.SKIP_VARIABLE not in env:
        environment.pop(hooks.SKIP_VARIABLE, None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment)
    if done.returncode != 0:
        check(False, "the build backend ran (%s)" % done.stderr.strip()[-400:])
        return [], [], []
    files = json.loads(done.stdout)
    argv = open(record).read().splitlines() if os.path.exists(record) else []
    return files, [line for line in done.stderr.splitlines() if line.strip()], argv


def manifest_of(files):
    paths = [p for name, p in files if name.endswith(hooks.MANIFEST)]
    return json.load(open(paths[0])) if paths else {}


def build_backend(tmp):
    torch_dir = stand_in_torch(tmp)
    files, err, argv = backend(tmp, torch_dir)
    names_ = [name for name, _ in files]
    module = "_torch_allocator_torch2_11_cu130_%s" % hooks.python_tag()
    check(names_ == ["tidepool/%s.so" % module, "tidepool/_torch_hooks.json"],
          "the wheel gets the prebuilt module and its manifest: %s" % names_)
    m = manifest_of(files)
    check(m.get("prebuilt") is True and m.get("torch") == "2.11.0+cu130" and m.get("cuda") == "13.0"
          and m.get("python") == hooks.python_tag() and m.get("cxx11_abi") is True and m.get("module") == module,
          "the manifest says what they were built against: %s" % {k: m.get(k) for k in ("torch", "cuda", "python")})
    check(len(err) == 1 and "prebuilt for torch 2.11.0+cu130" in err[0], "one line says so: %s" % err)
    home = os.path.join(torch_dir, "cuda")
    for want in ("-D_GLIBCXX_USE_CXX11_ABI=1", '-DPYBIND11_BUILD_ABI="_cxxabi1018"', "-DTORCH_EXTENSION_NAME=" + module,
                 os.path.join(torch_dir, "include"), os.path.join(home, "include"),
                 "-I" + os.path.join(ROOT, "include"),
                 sysconfig.get_paths()["include"], os.path.join(tmp, "libtidepool.so.0.2.0"),
                 os.path.join(home, "lib64", "libcudart.so"), "-L" + os.path.join(torch_dir, "lib"), "-ltorch_cuda",
                 "-Wl,-rpath,$ORIGIN", os.path.join(ROOT, "python", "tidepool", "_torch_allocator.cpp")):
        check(want in argv, "the compiler was given %s" % want)

    # Each way of not building them: the wheel gets the manifest alone, and the build one line.
    cases = [
        (stand_in_torch(tmp, extra="raise ImportError('a stand-in torch that does not import')"), {},
         "torch does not import in the build environment"),
        (stand_in_torch(tmp, cuda=None), {}, "CPU-only"),
        (stand_in_torch(tmp, version="2.7.1"), {}, "older than 2.8"),
        (torch_dir, {"FAIL_COMPILE": "1"}, "the compile failed: _torch_allocator.cpp:12:3: error: boom"),
        (stand_in_torch(tmp, version="2.13.0"), {"FAIL_COMPILE": "1"}, "newer than 2.11"),
        (torch_dir, {hooks.SKIP_VARIABLE: "0"}, hooks.SKIP_VARIABLE + "=0"),
    ]
    for torch_dir_, env, words in cases:
        files, err, _ = backend(tmp, torch_dir_, **env)
        m = manifest_of(files)
        check([name for name, _ in files] == ["tidepool/_torch_hooks.json"] and m.get("prebuilt") is False
              and words in m.get("why", ""), "not prebuilt, the manifest says why: %s" % m.get("why"))
        check(len(err) == 1 and "were not prebuilt" in err[0] and words in err[0],
              "and the build prints one line: %s" % (err[0] if err else err))


TINY_MODULE = r'''
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%(name)s(void) {
    PyObject *m = PyModule_Create(&def);
    if (m) PyModule_AddStringConstant(m, "made_by", "the prebuilt stand-in");
    return m;
}
'''


def loading(tmp):
    """tidepool.torch's _build_shim over a stand-in torch: a prebuilt module that fits is loaded (a
    tiny real extension module stands in for the hooks); one that does not fit sends it to the
    extension builder, under a name with the torch release."""
    library = os.environ.get("TIDEPOOL_LIBRARY")
    cc = shutil.which("cc") or shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    if not library or not cc or not os.path.exists(os.path.join(include, "Python.h")):
        print("skipped: loading (needs TIDEPOOL_LIBRARY, a C compiler and Python.h)")
        return
    torch_dir = stand_in_torch(tmp)
    package = os.path.join(tmp, "installed")
    facts = dict(FACTS, python=hooks.python_tag())
    name = hooks.module_name(facts)
    touch(os.path.join(tmp, "tiny.c"), TINY_MODULE % {"name": name})
    os.makedirs(package, exist_ok=True)
    subprocess.run([cc, "-shared", "-fPIC", "-I" + include, os.path.join(tmp, "tiny.c"), "-o",
                    os.path.join(package, name + ".so")], check=True)
    code = ("import sys; sys.path[:0] = [%r, %r]; import tidepool.torch as tt; m = tt._build_shim(%r); "
            "print(getattr(m, 'made_by', m))" % (torch_dir, os.path.join(ROOT, "python"), package))
    for manifest, want in ((dict(facts, prebuilt=True, module=name), "the prebuilt stand-in"),
                           (dict(facts, prebuilt=True, module=name, torch="2.10.0"),
                            "compiled by the extension builder")):
        touch(os.path.join(package, hooks.MANIFEST), json.dumps(manifest))
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        check(done.returncode == 0 and done.stdout.strip() == want,
              "enable()'s hooks for a build of torch %s: %s"
              % (manifest["torch"], (done.stdout + done.stderr).strip()[-300:]))
    load = json.load(open(os.path.join(torch_dir, "load.json")))
    check(load.get("name") == "tidepool_torch_allocator_torch2_11_cu130",
          "the extension builder was asked for %s" % load.get("name"))


def main_report(tmp):
    """python -m tidepool with a stand-in torch: the release against the range, and the prebuilt hooks."""
    if not os.environ.get("TIDEPOOL_LIBRARY"):
        print("skipped: python -m tidepool (needs TIDEPOOL_LIBRARY)")
        return
    for version, words in (("2.11.0+cu130", "supported: the C++ hooks are written for 2.8 to 2.11"),
                           ("2.13.0", "newer than 2.11"), ("2.7.0", "too old")):
        torch_dir = stand_in_torch(tmp, version=version)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([torch_dir, os.path.join(ROOT, "python")]))
        out = subprocess.run([sys.executable, "-m", "tidepool"], capture_output=True, text=True, env=env,
                             cwd=tmp).stdout
        check(("PyTorch: %s (" % version) in out and words in out, "python -m tidepool on torch %s: %s"
              % (version, [line for line in out.splitlines() if line.startswith("PyTorch:")]))
        check("C++ hooks for PyTorch, prebuilt: none in this install" in out,
              "and says no prebuilt hooks are installed from the source tree")


def main():
    tmp = tempfile.mkdtemp()
    try:
        names()
        choosing(tmp)
        command()
        cuda_headers(tmp)
        build_backend(tmp)
        loading(tmp)
        main_report(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("\n%d FAILED" % len(failures))
        return 1
    print("\nall passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
