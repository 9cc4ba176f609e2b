"""Sleep and wake under PyTorch, on a real GPU (tidepool.torch.pool / sleep / wake_up).

Checks the targets of sleep and wake:
  - after sleep, the device's used memory falls by at least 99% of the sleeping pools' reserved bytes;
  - wake_up of offloaded contents runs at 80% or more of the pinned host-to-device copy bandwidth
    measured in the same run; a discard-only wake takes under 10 ms per GiB;
  - a CUDA graph captured before the sleep gives identical results after the wake;
  - 100 sleep/wake cycles leave reserved memory, host memory (the process's resident set) and the
    driver's handles (the device's used memory) where they started.

Runs as a plain script (exit 0 passed, 1 failed, 77 skipped where there is no GPU or no PyTorch).
Set TIDEPOOL_SLEEP_GIB (default 4) for the size of the weights pool.
"""
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import needs  # noqa: E402

needs.modules(("torch", "PyTorch"))
import torch  # noqa: E402
needs.gpu(torch.cuda.device_count, "PyTorch")

import tidepool.torch as tt  # noqa: E402
from checklist import check, finish  # noqa: E402

GIB = 1 << 30
WEIGHTS_GIB = int(os.environ.get("TIDEPOOL_SLEEP_GIB", "4"))


def device_used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def pinned_h2d_bandwidth(nbytes):
    """Bytes per second of a host-to-device copy from pinned memory: (into memory the driver has just
    given, as a wake's is; the best of three into memory already written)."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)
    fresh = 0.0
    for _ in range(3):  # each into a new allocation of the driver (the cache emptied first)
        torch.cuda.empty_cache()
        dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        fresh = max(fresh, nbytes / (time.perf_counter() - t0))
        del dev
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    best = 0.0
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        best = max(best, nbytes / (time.perf_counter() - t0))
    del host, dev
    torch.cuda.empty_cache()
    return fresh, best


def stats():
    return tt.memory_stats()


def main():
    tt.enable()
    n = 4096
    with tt.pool("weights"):
        w = [torch.randn(n, n, device="cuda") for _ in range(max(1, WEIGHTS_GIB * GIB // (n * n * 4)))]
    with tt.pool("kv_cache"):
        kv = torch.zeros(GIB // 4, dtype=torch.float32, device="cuda")  # 1 GiB
    x = torch.randn(n, n, device="cuda")
    # A CUDA graph that reads the weights, captured before the sleep (its own pool holds its output).
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = w[0] @ x  # warm-up (cuBLAS workspace)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        y = w[0] @ x + w[-1].sum(dim=0)
    g.replay()
    torch.cuda.synchronize()
    expected = y.clone()

    before = stats()
    used = device_used()
    t0 = time.perf_counter()
    tt.sleep(offload=("weights",), discard=("kv_cache",))
    sleep_s = time.perf_counter() - t0
    after = stats()
    released = before["reserved_bytes.all.current"] - after["reserved_bytes.all.current"]
    asleep = after["asleep_bytes.all.current"]
    fell = used - device_used()
    check(asleep > 0 and released == asleep, "sleep released %.2f GiB, counted asleep %.2f GiB, in %.1f ms"
          % (released / GIB, asleep / GIB, sleep_s * 1e3))
    check(fell >= 0.99 * asleep, "device memory fell by %.3f GiB, >= 99%% of the sleeping pools' %.3f GiB"
          % (fell / GIB, asleep / GIB))
    check(tt.is_sleeping("weights") and tt.is_sleeping("kv_cache"), "both pools sleep")
    try:
        with tt.pool("weights"):
            torch.empty(1024, device="cuda")
        check(False, "allocating in a sleeping pool raises")
    except Exception as e:  # noqa: BLE001 - the error's class is PyTorch's
        check("asleep" in str(e), "allocating in a sleeping pool raises: %s" % str(e).splitlines()[0][:120])

    offloaded = after["offloaded_bytes.all.current"]
    bandwidth, warm_bandwidth = pinned_h2d_bandwidth(min(offloaded, 2 * GIB))
    t0 = time.perf_counter()
    tt.wake_up(["weights"])
    torch.cuda.synchronize()
    wake_s = time.perf_counter() - t0
    rate = offloaded / wake_s
    check(rate >= 0.8 * bandwidth, "offload wake: %.2f GiB in %.1f ms, %.1f GB/s, %.0f%% of a pinned H2D copy "
          "into new memory %.1f GB/s (into memory already written: %.1f GB/s)"
          % (offloaded / GIB, wake_s * 1e3, rate / 1e9, 100 * rate / bandwidth, bandwidth / 1e9,
             warm_bandwidth / 1e9))
    kv_bytes = tt.memory_stats()["asleep_bytes.all.current"]
    t0 = time.perf_counter()
    tt.wake_up(["kv_cache"])
    torch.cuda.synchronize()
    discard_s = time.perf_counter() - t0
    check(discard_s * 1e3 / (kv_bytes / GIB) < 10, "discard-only wake: %.2f GiB in %.2f ms (%.2f ms/GiB)"
          % (kv_bytes / GIB, discard_s * 1e3, discard_s * 1e3 / (kv_bytes / GIB)))

    g.replay()
    torch.cuda.synchronize()
    check(torch.equal(y, expected), "the graph captured before the sleep gives identical results after the wake")
    tt.check()

    # 100 cycles: reserved, the process's host memory and the device's used memory where they started.
    kv.zero_()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the cycles end with empty_cache: so does their starting point
    start = (stats()["reserved_bytes.all.current"], resident_bytes(), device_used())
    sleeps, wakes = [], []
    for _ in range(100):
        t0 = time.perf_counter()
        tt.sleep(offload=("weights",), discard=("kv_cache",))
        sleeps.append(time.perf_counter() - t0)
        t = torch.empty(GIB, dtype=torch.uint8, device="cuda")  # the trainer's phase
        del t
        torch.cuda.empty_cache()
        t0 = time.perf_counter()
        tt.wake_up()
        torch.cuda.synchronize()
        wakes.append(time.perf_counter() - t0)
        g.replay()
    torch.cuda.synchronize()
    end = (stats()["reserved_bytes.all.current"], resident_bytes(), device_used())
    sleeps.sort()
    wakes.sort()
    print("100 cycles of %.2f GiB offloaded and %.2f GiB discarded: sleep median %.1f ms (%.1f GB/s), wake median "
          "%.1f ms (%.1f GB/s), host buffers kept between cycles %.2f GiB"
          % (offloaded / GIB, kv_bytes / GIB, sleeps[50] * 1e3, offloaded / sleeps[50] / 1e9, wakes[50] * 1e3,
             offloaded / wakes[50] / 1e9, stats()["sleep_host_cached_bytes"] / GIB))
    check(torch.equal(y, expected), "after 100 cycles the graph still gives identical results")
    check(end[0] == start[0], "100 cycles: reserved %d -> %d" % (start[0], end[0]))
    check(end[1] <= start[1] + 64 * (1 << 20), "100 cycles: host memory (resident) %.1f -> %.1f MiB"
          % (start[1] / 2**20, end[1] / 2**20))
    check(abs(end[2] - start[2]) <= 2 * (1 << 20), "100 cycles: device used %.1f -> %.1f MiB"
          % (start[2] / 2**20, end[2] / 2**20))
    tt.check()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
