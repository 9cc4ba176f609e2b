"""tidepool.torch's C++ hooks (_torch_allocator.cpp) built ahead of time: the name a build for one torch
takes, which prebuilt build fits the torch that runs, the compiler's command line, and where CUDA's
headers are. The standard library only, and torch is never imported at module level: the build backend
(python/tidepool_build.py) and `python -m tidepool` use this with or without torch, and the tests run
it on stand-ins.

pip install --no-build-isolation ./python compiles the hooks when torch imports in the build
environment (prebuild) and puts them in the wheel with a manifest, _torch_hooks.json, that says what
they were built against, or why none were built. tidepool.torch.enable() loads them when they fit the
torch that runs (choose_prebuilt), and otherwise compiles them with PyTorch's extension builder under a
name that carries the torch version (jit_name), so that two torch installs never share one build.
"""

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

# The releases whose headers _torch_allocator.cpp was written from (its first comment says which
# headers): older ones are refused, newer ones are tried and may not compile.
OLDEST_TORCH = (2, 8)
NEWEST_TORCH = (2, 11)

SOURCE = "_torch_allocator.cpp"
MANIFEST = "_torch_hooks.json"
# What torch's extension builder links a CUDA extension with (torch.utils.cpp_extension, CUDAExtension).
TORCH_LIBRARIES = ("c10", "torch", "torch_cpu", "torch_python", "c10_cuda", "torch_cuda")
# Set to 0 in the build environment to build the wheel without the hooks.
SKIP_VARIABLE = "TIDEPOOL_PREBUILD_TORCH_HOOKS"


class HooksUnavailable(Exception):
    """The hooks cannot be prebuilt here; the message says why, in words a user can act on."""


# ---- names ---------------------------------------------------------------------------------------------

def torch_release(version):
    """(major, minor) of a torch version string ("2.11.0+cu130", "2.12.0a0+git1234"), or None."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def cuda_tag(cuda):
    """torch's tag for a CUDA version: "13.0" -> "cu130", "12.8" -> "cu128"; None (a CPU build) -> None."""
    m = re.match(r"(\d+)\.(\d+)", cuda or "")
    return "cu%s%s" % (m.group(1), m.group(2)) if m else None


def python_tag(implementation=None, version_info=None):
    """The running Python as a wheel tag names it: "cp312" for CPython 3.12. A build of the hooks loads
    only in the Python it was built for (they are no stable-ABI module)."""
    name = (implementation or sys.implementation.name)
    short = {"cpython": "cp", "pypy": "pp"}.get(name, name)
    v = version_info or sys.version_info
    return "%s%d%d" % (short, v[0], v[1])


def module_name(facts):
    """The prebuilt module's name (also its file name, less ".so", and its PyInit_ symbol's):
    _torch_allocator_torch2_11_cu130_cp312 for torch 2.11 with CUDA 13.0, built for CPython 3.12."""
    release = torch_release(facts["torch"])
    return "_torch_allocator_torch%d_%d_%s_%s" % (release[0], release[1], cuda_tag(facts["cuda"]) or "cpu",
                                                   facts["python"])


def jit_name(facts):
    """The name of the hooks that enable() compiles with PyTorch's extension builder, which caches a
    build by name: the torch release and CUDA version in it keep two torch installs apart
    (tidepool_torch_allocator_torch2_11_cu130)."""
    release = torch_release(facts["torch"]) or (0, 0)
    return "tidepool_torch_allocator_torch%d_%d_%s" % (release[0], release[1], cuda_tag(facts["cuda"]) or "cpu")


def running_facts(torch):
    """What a prebuilt build must match, read from a torch module: its version, CUDA version, the
    Python that runs, and the C++ ABI torch was built with."""
    abi = getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
    return {"torch": str(torch.__version__),
            "cuda": getattr(getattr(torch, "version", None), "cuda", None),
            "python": python_tag(),
            "cxx11_abi": None if abi is None else bool(abi)}


def _describe(facts):
    release = torch_release(facts.get("torch"))
    where = "torch %d.%d" % release if release else "torch %s" % facts.get("torch")
    where += " with CUDA %s" % facts["cuda"] if facts.get("cuda") else " without CUDA"
    python = facts.get("python") or ""
    m = re.match(r"cp(\d)(\d+)$", python)
    return where + (" for CPython %s.%s" % m.groups() if m else " for %s" % python)


# ---- which prebuilt build fits ---------------------------------------------------------------------------

def read_manifest(package_dir):
    """The manifest the wheel carries (a dict), or None where there is none (the source tree)."""
    try:
        with open(os.path.join(package_dir, MANIFEST)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def mismatches(built, running):
    """The ways a build for `built` does not fit `running` (both facts dicts), in words; [] if it fits.
    The torch release (major.minor), CUDA version, Python and C++ ABI must be the same; a patch release
    (2.11.0 and 2.11.1) keeps CUDAAllocator's methods."""
    out = []
    if torch_release(built.get("torch")) != torch_release(running.get("torch")):
        out.append("torch %s, not %s" % (running.get("torch"), built.get("torch")))
    if built.get("cuda") != running.get("cuda"):
        out.append("CUDA %s, not %s" % (running.get("cuda") or "none", built.get("cuda")))
    if built.get("python") != running.get("python"):
        out.append("Python %s, not %s" % (running.get("python"), built.get("python")))
    if running.get("cxx11_abi") is not None and built.get("cxx11_abi") is not None and \
            bool(built["cxx11_abi"]) != bool(running["cxx11_abi"]):
        out.append("the C++ ABI flag %d, not %d" % (running["cxx11_abi"], built["cxx11_abi"]))
    return out


def choose_prebuilt(manifest, running, package_dir):
    """(path of the prebuilt module to load, or None; a sentence that says why, in words).
    running: running_facts() of the torch that runs, or None where torch does not import."""
    if manifest is None:
        return None, ("none in this install (the package runs from its source tree, or from a wheel "
                      "older than prebuilt hooks): enable() compiles them on first use")
    if not manifest.get("prebuilt"):
        return None, ("none: the wheel was built without them (%s); enable() compiles them on first use"
                      % (manifest.get("why") or "no reason recorded"))
    path = os.path.join(package_dir, manifest.get("module", "") + ".so")
    built = _describe(manifest)
    if not os.path.exists(path):
        return None, "built for %s, but %s is missing: enable() compiles them" % (built, path)
    if running is None:
        return None, "built for %s; torch does not import here, so nothing to match yet" % built
    wrong = mismatches(manifest, running)
    if wrong:
        return None, ("built for %s, which does not fit this one (%s): enable() compiles them for it"
                      % (built, "; ".join(wrong)))
    return path, "built for %s, as this one is: enable() loads them without compiling" % built


def load_module(path):
    """Imports the prebuilt extension module at path (its name is its file name less ".so")."""
    import importlib.machinery
    import importlib.util
    name = os.path.basename(path)[:-len(".so")] if path.endswith(".so") else os.path.basename(path)
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# ---- where CUDA's headers and runtime are ----------------------------------------------------------------

def _site_dirs():
    """The folders Python packages are installed in (NVIDIA's wheels keep CUDA under nvidia/ there)."""
    dirs = []
    for key in ("purelib", "platlib"):
        d = sysconfig.get_paths().get(key)
        if d and d not in dirs:
            dirs.append(d)
    for d in sys.path:
        if d and d.endswith(("site-packages", "dist-packages")) and d not in dirs:
            dirs.append(d)
    return dirs


def _candidates(cuda_home, site_dirs, sub):
    """CUDA_HOME/sub first, then each NVIDIA wheel's folder's sub (nvidia/cu13/include for CUDA 13's
    wheels, nvidia/cuda_runtime/include and nvidia/cuda_nvcc/include for CUDA 12's)."""
    out = []
    if cuda_home:
        out.append(os.path.join(cuda_home, sub))
        if sub == "lib":
            out.append(os.path.join(cuda_home, "lib64"))
    for site in site_dirs:
        nvidia = os.path.join(site, "nvidia")
        try:
            names = sorted(os.listdir(nvidia))
        except OSError:
            continue
        out += [os.path.join(nvidia, n, sub) for n in names]
    return out


def cuda_include_dirs(cuda_home, site_dirs=None):
    """The include folders that hold CUDA's runtime headers, CUDA_HOME's before NVIDIA's wheels':
    the first with cuda_runtime_api.h, and, where that one lacks crt/host_config.h (which
    cuda_runtime.h includes; CUDA 13's runtime wheel leaves it to the compiler's), the first that has
    it. Raises HooksUnavailable naming what is missing."""
    candidates = _candidates(cuda_home, _site_dirs() if site_dirs is None else site_dirs, "include")
    runtime = [d for d in candidates if os.path.isfile(os.path.join(d, "cuda_runtime_api.h"))]
    if not runtime:
        raise HooksUnavailable(
            "CUDA's headers (cuda_runtime_api.h) were not found: set CUDA_HOME, or install NVIDIA's "
            "runtime headers (pip install nvidia-cuda-runtime); looked in %s"
            % (", ".join(candidates) or "no CUDA_HOME and no nvidia/ folder of packages"))
    dirs = [runtime[0]]
    if not os.path.isfile(os.path.join(runtime[0], "crt", "host_config.h")):
        crt = [d for d in candidates if os.path.isfile(os.path.join(d, "crt", "host_config.h"))]
        if not crt:
            raise HooksUnavailable(
                "CUDA's crt/host_config.h, which cuda_runtime.h includes, is not beside %s nor in another "
                "CUDA include folder: install CUDA's compiler headers (pip install nvidia-cuda-nvcc) or "
                "set CUDA_HOME to a CUDA toolkit" % runtime[0])
        dirs.append(crt[0])
    return dirs


def cudart_library(cuda_home, site_dirs=None):
    """CUDA's runtime library (libcudart.so, else its versioned name), CUDA_HOME's first; None if none."""
    for d in _candidates(cuda_home, _site_dirs() if site_dirs is None else site_dirs, "lib"):
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        found = [n for n in names if n == "libcudart.so"] or \
            [n for n in names if re.match(r"libcudart\.so\.\d+$", n)]
        if found:
            return os.path.join(d, found[0])
    return None


# ---- the compile ----------------------------------------------------------------------------------------

def compile_command(cxx, source, output, module, system_include_dirs, include_dirs, library_dirs,
                    libraries, link_files, cxx11_abi, defines=(), rpath="$ORIGIN"):
    """The compiler's argv for the hooks as one shared object: C++17, -O2, position-independent; torch's
    C++ ABI flag; the module name pybind11 gives PyInit_; torch's and CUDA's headers as system headers;
    linked with link_files (libtidepool, CUDA's runtime) and torch's libraries, and an rpath of $ORIGIN
    so that the installed module finds libtidepool.so.MAJOR beside it."""
    argv = shlex.split(cxx) + ["-shared", "-fPIC", "-O2", "-std=c++17",
                               "-D_GLIBCXX_USE_CXX11_ABI=%d" % (1 if cxx11_abi else 0),
                               "-DTORCH_EXTENSION_NAME=%s" % module, "-DTORCH_API_INCLUDE_EXTENSION_H"]
    argv += list(defines)
    for d in include_dirs:
        argv.append("-I" + d)
    for d in system_include_dirs:
        argv += ["-isystem", d]
    argv += [source, "-o", output]
    argv += list(link_files)
    for d in library_dirs:
        argv.append("-L" + d)
    argv += ["-l" + lib for lib in libraries]
    if rpath:
        argv.append("-Wl,-rpath," + rpath)
    return argv


def _compiler():
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise HooksUnavailable("no C++ compiler (set CXX, or install g++)")
    return cxx


def build_plan(torch, source, tidepool_include, library, out_dir):
    """Everything the compile needs, read from a torch module (the real one, or a stand-in in tests)
    and from this machine: a dict with "argv", "output", "manifest". Raises HooksUnavailable."""
    release = torch_release(str(torch.__version__))
    if release is None:
        raise HooksUnavailable("torch's version %r is unreadable" % str(torch.__version__))
    if release < OLDEST_TORCH:
        raise HooksUnavailable("torch %s is older than %d.%d, the oldest release the hooks are written for"
                               % ((torch.__version__,) + OLDEST_TORCH))
    facts = running_facts(torch)
    if not facts["cuda"]:
        raise HooksUnavailable("torch %s is a CPU-only build (torch.version.cuda is None)" % torch.__version__)
    if facts["cxx11_abi"] is None:
        raise HooksUnavailable("torch %s does not say which C++ ABI it was built with "
                               "(torch._C._GLIBCXX_USE_CXX11_ABI)" % torch.__version__)
    from torch.utils import cpp_extension
    system_includes = list(cpp_extension.include_paths())
    system_includes += cuda_include_dirs(getattr(cpp_extension, "CUDA_HOME", None))
    python_include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(python_include, "Python.h")):
        raise HooksUnavailable("Python's headers (Python.h) are not in %s (Debian: apt-get install python3-dev)"
                               % python_include)
    system_includes.append(python_include)
    defines = []
    abi_flags = getattr(cpp_extension, "_get_pybind11_abi_build_flags", None)
    if abi_flags is not None:  # the pybind11 ABI torch was built with, where this torch still says
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                defines = list(abi_flags())
            except Exception:
                defines = []
    name = module_name(facts)
    output = os.path.join(out_dir, name + ".so")
    link = [library]
    cudart = cudart_library(getattr(cpp_extension, "CUDA_HOME", None))
    if cudart:
        link.append(cudart)
    argv = compile_command(_compiler(), source, output, name, system_includes, [tidepool_include],
                           list(cpp_extension.library_paths()), TORCH_LIBRARIES, link, facts["cxx11_abi"],
                           defines)
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    manifest = dict(facts, prebuilt=True, module=name, torch_release=list(release), source_sha256=digest,
                    compiler=argv[0])
    return {"argv": argv, "output": output, "manifest": manifest}


def prebuild(source, tidepool_include, library, out_dir, run=subprocess.run):
    """Compiles the hooks against the torch of this environment into out_dir: returns (path of the
    module, manifest). Raises HooksUnavailable with the reason (torch absent, CPU-only, a header
    missing, the compile failed) where it cannot."""
    if os.environ.get(SKIP_VARIABLE, "1") == "0":
        raise HooksUnavailable("%s=0 in the build environment" % SKIP_VARIABLE)
    try:
        import torch
    except Exception as e:  # not installed, or broken: either way no hooks, and the wheel still builds
        raise HooksUnavailable("torch does not import in the build environment (%s: %s); pip install "
                               "--no-build-isolation ./python where torch is installed builds them"
                               % (type(e).__name__, e)) from None
    plan = build_plan(torch, source, tidepool_include, library, out_dir)
    os.makedirs(out_dir, exist_ok=True)
    log = os.path.join(out_dir, "compile.log")
    try:
        done = run(plan["argv"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        raise HooksUnavailable("the compiler did not start: %s" % e) from None
    with open(log, "wb") as f:
        f.write(b" ".join(shlex.quote(a).encode() for a in plan["argv"]) + b"\n" + (done.stdout or b""))
    if done.returncode != 0 or not os.path.exists(plan["output"]):
        errors = [line for line in (done.stdout or b"").decode(errors="replace").splitlines() if "error" in line]
        newer = torch_release(plan["manifest"]["torch"]) > NEWEST_TORCH
        raise HooksUnavailable("the compile failed%s: %s (the whole log: %s)"
                               % (" (torch %s is newer than %d.%d, the newest release the hooks are written "
                                  "for)" % ((plan["manifest"]["torch"],) + NEWEST_TORCH) if newer else "",
                                  errors[0].strip() if errors else "exit status %d" % done.returncode, log))
    return plan["output"], plan["manifest"]
