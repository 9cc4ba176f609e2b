"""Sleep and wake from Python on the simulated device (tidepool.sim): the pool's pages go back to the
device while its blocks keep their addresses, offloaded contents come back, a sleeping pool refuses
allocations, and a hundred cycles end where they began.

    TIDEPOOL_LIBRARY=build/libtidepool.so python3 tests/test_python_sleep.py
"""
import ctypes
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from tidepool._lib import ArgumentError, NamedPools, TidepoolError, pool_malloc  # noqa: E402
from tidepool.sim import SimulatedDevice  # noqa: E402

MIB = 1 << 20
failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def main():
    with SimulatedDevice(total_bytes=2 << 30) as dev:
        weights, kv = dev.create_pool(sleepable=True), dev.create_pool(sleepable=True)
        w = [dev.malloc_pool(n, weights) for n in (3 * MIB, 8 * MIB, 4096)]
        for i, p in enumerate(w):
            ctypes.memset(p, 0x30 + i, 4096)
        cache = dev.malloc_pool(100 * MIB, kv)
        reserved = dev.pool_memory(weights)[0] + dev.pool_memory(kv)[0]
        held = dev.counters()["held_bytes"]
        dev.sleep(offload=[weights], discard=[kv])
        c = dev.counters()
        check(held - c["held_bytes"] == reserved, "the pools' pages went back to the device (%d of %d bytes)"
              % (held - c["held_bytes"], reserved))
        check(c["host_bytes"] >= 11 * MIB and c["host_bytes"] < 16 * MIB,
              "the weights' blocks (not the KV cache) are kept in host memory: %d bytes" % c["host_bytes"])
        stats = dev.stats()
        check(stats["asleep_bytes.all.current"] == reserved and stats["reserved_bytes.all.current"] == 0,
              "statistics: asleep %d, reserved %d" % (stats["asleep_bytes.all.current"],
                                                      stats["reserved_bytes.all.current"]))
        check(dev.sleeping(weights) and dev.sleeping(kv), "both pools sleep")
        try:
            dev.malloc_pool(4096, weights)
            check(False, "a sleeping pool refuses allocations")
        except TidepoolError as e:
            check("asleep" in str(e), "a sleeping pool refuses allocations: %s" % str(e)[:100])
        dev.check()
        dev.wake_up([weights, kv])
        check(all(ctypes.string_at(p, 4096) == bytes([0x30 + i]) * 4096 for i, p in enumerate(w)),
              "the weights' contents came back at the same addresses")
        kept = dev.counters()["host_bytes"]
        check(kept >= 11 * MIB and kept == dev.stats()["sleep_host_cached_bytes"],
              "the host buffers are kept for the next offload, and counted: %d bytes" % kept)
        start = dev.counters()
        for _ in range(100):
            dev.sleep(offload=[weights], discard=[kv])
            t = dev.malloc(500 * MIB)  # the other phase (untouched: its pages cost nothing here)
            dev.free(t)
            dev.empty_cache()
            dev.wake_up([weights, kv])
        end = dev.counters()
        check(end["held_bytes"] == start["held_bytes"] and end["host_bytes"] == start["host_bytes"]
              and end["mapped_pages"] == start["mapped_pages"] and end["va_ranges"] <= start["va_ranges"] + 1,
              "100 cycles end where they began: held %d -> %d, pages %d -> %d, ranges %d -> %d"
              % (start["held_bytes"], end["held_bytes"], start["mapped_pages"], end["mapped_pages"],
                 start["va_ranges"], end["va_ranges"]))
        dev.check()
        for p in w + [cache]:
            dev.free(p)
        dev.release_pool(weights)
        dev.release_pool(kv)
        check(dev.counters()["host_bytes"] == 0, "the weights' host buffers go with the pool's release")
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)


def test_named_pools():
    """The pools by name that tidepool.cupy and tidepool.cuda_core sleep and wake (_lib.NamedPools), here
    over a simulated device's allocator."""
    with SimulatedDevice(total_bytes=1 << 30) as dev:
        t = dev._t
        named = NamedPools("tidepool.test")
        weights = named.get(t, "weights")
        check(named.get(t, "weights") == weights and named.get(t, "kv") != weights,
              "a name gives the same pool each time, another name another pool")
        p = pool_malloc(t, 6 * MIB, 0, weights)
        ctypes.memset(p, 0x5A, 4096)
        q = pool_malloc(t, 20 * MIB, 0, named.get(t, "kv"))
        held = dev.counters()["held_bytes"]
        named.sleep(t, offload=["weights"], discard=["kv"])
        check(dev.counters()["held_bytes"] <= held - 26 * MIB and named.sleeping(t, "weights")
              and named.sleeping(t, "kv"), "sleep by name gives both pools' pages back")
        try:
            pool_malloc(t, 4096, 0, weights)
            check(False, "a sleeping named pool refuses an allocation")
        except TidepoolError as e:
            check("asleep" in str(e), "a sleeping named pool refuses an allocation: %s" % str(e)[:80])
        for bad, kind in ((lambda: named.sleep(t, offload=["nope"]), ArgumentError),
                          (lambda: named.sleep(t, offload="weights"), TypeError),
                          (lambda: named.get(t, ""), ArgumentError)):
            try:
                bad()
                check(False, "a bad name is refused with %s" % kind.__name__)
            except kind as e:
                check(True, "a bad name is refused with %s: %s" % (kind.__name__, str(e)[:70]))
        check(named.sleeping(t, "weights"), "a refused call changed nothing")
        named.wake(t)  # every sleeping pool of this allocator
        check(not named.sleeping(t, "weights") and not named.sleeping(t, "kv")
              and ctypes.string_at(p, 4096) == b"\x5a" * 4096,
              "wake with no names wakes every sleeping pool; offloaded contents are back")
        dev.free(p)
        dev.free(q)
        dev.check()


if __name__ == "__main__":
    test_named_pools()
    main()
