#!/bin/bash
# Run 14, call 5: can the GPU host count branch mispredictions (perf)? If so, count them on the random
# micro patterns on the simulated device.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/perf_log.txt) 2>&1
which perf; ls /usr/bin/perf* 2>/dev/null; cat /proc/sys/kernel/perf_event_paranoid
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_static 2>&1 | grep -E " error |Error"; ls build-gpu/*.a
cc -O2 -g -Iinclude -Ibench .run14/rnd.c build-gpu/libtidepool.a -lpthread -lm -o /tmp/rnd || exit 1
for p in 1 2; do /tmp/rnd $p 1000000; done
python3 - <<'PY'
# perf_event_open directly, in case the perf tool is missing: branch misses and instructions of a child
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
PERF_TYPE_HARDWARE = 0
def attr(config):
    # struct perf_event_attr, size 128: type, size, config, ..., flags (disabled | exclude_kernel | enable_on_exec | inherit)
    a = bytearray(128)
    struct.pack_into("IIQ", a, 0, PERF_TYPE_HARDWARE, 128, config)
    flags = (1 << 0) | (1 << 1) | (1 << 5) | (1 << 12)  # disabled, inherit, exclude_kernel, enable_on_exec
    struct.pack_into("Q", a, 40, flags)
    return bytes(a)
for p, n in ((1, 1000000), (2, 300000)):
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), 19)  # SIGSTOP until counters are attached
        os.execv("/tmp/rnd", ["/tmp/rnd", str(p), str(n)])
    os.waitpid(pid, os.WUNTRACED)
    fds = {}
    for name, cfg in (("instructions", 1), ("cycles", 0), ("branches", 4), ("branch-misses", 5)):
        buf = ctypes.create_string_buffer(attr(cfg))
        fd = libc.syscall(298, buf, pid, -1, -1, 0)
        fds[name] = fd
    os.kill(pid, 18)
    os.waitpid(pid, 0)
    out = {k: (struct.unpack("Q", os.read(v, 8))[0] if v >= 0 else -1) for k, v in fds.items()}
    print("pattern", p, out, "errno" if min(fds.values()) < 0 else "", ctypes.get_errno())
PY
