"""tidepool under RMM (tidepool.rmm.resource()), on a real GPU: rmm.DeviceBuffer allocations from
tidepool, on a stream, read back; statistics; empty_cache. Exit 77 where there is no GPU or no RMM."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

try:
    import rmm
except Exception as e:  # noqa: BLE001 - any failure here means there is nothing to test on
    print("skipped: RMM is not installed (%s)" % e)
    sys.exit(77)

import tidepool.rmm as tr  # noqa: E402


def main():
    failures = []
    rmm.mr.set_current_device_resource(tr.resource())
    payload = bytes(range(256)) * 4096
    buf = rmm.DeviceBuffer.to_device(payload)
    stats = tr.memory_stats()
    ok = buf.tobytes() == payload and stats["allocation.all.current"] >= 1
    print(("ok    " if ok else "FAIL  ") + "an rmm.DeviceBuffer is a tidepool block, read back right")
    failures += [] if ok else ["buffer"]
    del buf
    tr.empty_cache()
    ok = tr.memory_stats()["reserved_bytes.all.current"] == 0
    print(("ok    " if ok else "FAIL  ") + "after the buffer dies and empty_cache, tidepool holds nothing")
    failures += [] if ok else ["empty_cache"]
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
