// tidepool as PyTorch's CUDA allocator: a c10::cuda::CUDACachingAllocator::CUDAAllocator of its own,
// so that torch.cuda's whole memory API (stats, snapshots, history, cacheInfo, CUDA graphs and their
// private pools, MemPool, IPC) works as under PyTorch's allocator. pip install compiles it against the
// torch of the build environment when there is one (python/tidepool_build.py); otherwise, or for another
// torch, tidepool.torch compiles it on first use with PyTorch's extension builder, against the torch
// that runs. Either way it links with libtidepool.
//
// PyTorch releases. CUDAAllocator's virtual methods change from release to release; the #if blocks
// below follow torch/version.h. Each was written from these headers (c10/cuda/CUDACachingAllocator.h,
// c10/core/CachingDeviceAllocator.h):
//   2.11.0  the headers of the installed 2.11.0+cu130 wheel, read in full; the only release this file
//           was compiled and tested against on a GPU.
//   2.8.0   the release's CUDACachingAllocator.h and CachingDeviceAllocator.h as merged into the ROCm
//           fork (its version.txt: 2.8.0), read in full. This file passed a syntax check against those
//           declarations put over the 2.11 headers, which is not a compile against 2.8.
//   2.9, 2.10  no release header could be read whole. main's headers between the releases were read,
//           and each change below is placed before or after a branch cut (2.9: 2025-09-08, 2.10:
//           about 2025-12-10) by the date of the pull request that made it. Two changes landed within days
//           of the 2.10 cut (setUseOnOOM's use_on_oom, setNoSplit): for 2.10 both forms are declared
//           without `override`, so that whichever torch declares is the one it calls.
// The differences:
//   - the trace types (TraceEntry, SegmentInfo, BlockInfo, RecordContext, CreateContextFn,
//     AllocatorTraceTracker) live in c10::cuda::CUDACachingAllocator up to 2.10 and in
//     c10::CachingDeviceAllocator from 2.11, where the old names remain as aliases;
//     SegmentInfo::stream is a cudaStream_t up to 2.10 and a void* from 2.11;
//   - snapshot(mempool_id) gains include_traces in 2.11;
//   - recordHistory gains skip_actions in 2.11;
//   - createOrIncrefPool takes a CUDAAllocator* up to 2.10, a std::shared_ptr from 2.11;
//   - setUseOnOOM(device, id) gains use_on_oom (2.11; 2.10 either), setNoSplit is new (2.11; 2.10
//     either; absent from 2.8 and 2.9);
//   - getExpandableSegmentSizes is new in 2.10 (absent from 2.8 and 2.9);
//   - MempoolId_t is c10::cuda's in 2.8; later releases define it in c10 and keep c10::cuda's name.
// Releases after 2.11 add pure virtual methods (main's header after the 2.11 cut declares
// attachOomRejectionObserver) that this file does not define yet: it does not compile against them.
#include <torch/extension.h>

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tidepool.h"
#include "tidepool_cuda.h"

namespace {

#define TIDEPOOL_TORCH_AT_LEAST(major, minor)                                                               \
    (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace cca = c10::cuda::CUDACachingAllocator;
#if TIDEPOOL_TORCH_AT_LEAST(2, 11)
namespace cda = c10::CachingDeviceAllocator;
#else
namespace cda = c10::cuda::CUDACachingAllocator; // the trace types, and DeviceStats by an alias
#endif
using c10::DeviceIndex;
using c10::cuda::MempoolId_t; // 2.8 has no c10::MempoolId_t; later releases keep this alias

tide_devices *devices = nullptr;

void on_core_event(void *ctx, const tide_event *e);
constexpr size_t kDevices = 64;
std::atomic<bool> observed[kDevices];

tide_allocator *allocator_of(DeviceIndex device)
{
    tide_allocator *t = nullptr;
    TORCH_CHECK(devices, "tidepool is not enabled: call tidepool.torch.enable() first");
    tide_status s = tide_devices_get(devices, device, &t);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    // The first use of a device's allocator attaches the observer that turns tidepool's segment and
    // pending-free events into PyTorch's trace entries (for trackers and the history).
    size_t slot = static_cast<size_t>(device) % kDevices;
    if (!observed[slot].load(std::memory_order_acquire) && !observed[slot].exchange(true))
        tide_observe(t, &on_core_event, reinterpret_cast<void *>(static_cast<intptr_t>(device)));
    return t;
}

tide_stats stats_of(DeviceIndex device)
{
    tide_stats s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    TORCH_CHECK(tide_get_stats(allocator_of(device), &s) == TIDE_OK, "tidepool: ", tide_last_error());
    return s;
}

// The PyTorch releases this file is written against: 2.8 to 2.11 (see the top of the file). An older
// torch is refused by tidepool.torch before this file is compiled, naming its version.

// tidepool's snapshot as structures (tide_snapshot_take), freed with the owner.
using Snapshot = std::unique_ptr<tide_snapshot, void (*)(tide_snapshot *)>;

Snapshot snapshot_of(DeviceIndex device)
{
    tide_snapshot *snap = nullptr;
    tide_status s = tide_snapshot_take(allocator_of(device), &snap);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    return Snapshot(snap, &tide_snapshot_free);
}

// Numbers in messages are written here, never streamed: an integer streamed by c10::str from this
// extension crashed inside the stream's number formatting on the torch it was first built against
// (PyTorch 2.11), while strings pass.
std::string num(long long value) { return std::to_string(value); }

// PyTorch's way of writing a size in its out-of-memory message ("20.00 MiB").
std::string format_size(uint64_t size)
{
    char buf[64];
    if (size <= 1024)
        std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(size));
    else if (size <= 1048576)
        std::snprintf(buf, sizeof buf, "%.2f KiB", size / 1024.0);
    else if (size <= 1073741824ull)
        std::snprintf(buf, sizeof buf, "%.2f MiB", size / 1048576.0);
    else
        std::snprintf(buf, sizeof buf, "%.2f GiB", size / 1073741824.0);
    return buf;
}

// ---- the time spent in tidepool's calls (opt-in) -------------------------------------------------------
// TIDEPOOL_TIME_CALLS=1 in the environment when enable() runs: every allocation and free that PyTorch
// asks of tidepool adds the steady_clock time it took (tidepool's core and this file's bookkeeping
// around it) to one counter, which tidepool.torch._call_ns() reads. Off, the cost is the one branch
// on call_timing, which never changes after enable().
bool call_timing = false;
std::atomic<uint64_t> call_ns{0};
std::atomic<uint64_t> call_count{0};

struct CallClock {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~CallClock()
    {
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
        call_ns.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
        call_count.fetch_add(1, std::memory_order_relaxed);
    }
};

// f() timed if the timer is on (also when it throws: the clock stops as it unwinds).
template <class F> inline auto timed(F &&f) -> decltype(f())
{
    if (!call_timing)
        return f();
    CallClock clock;
    return f();
}

// ---- the allocator -------------------------------------------------------------------------------

void free_block(void *ptr);

// The free this thread is making, so that the observer (called on this thread, inside the free) can say
// whether it left the block PENDING.
thread_local void *freeing_ = nullptr;
thread_local bool freeing_went_pending_ = false;
thread_local bool restoring_ = false; // setCheckpointPoolState: its frees are traced after the restore

class TidepoolAllocator final : public cca::CUDAAllocator {
  public:
    // -- allocating ---------------------------------------------------------------------------------
    c10::DataPtr allocate(size_t size) override
    {
        DeviceIndex device = c10::cuda::current_device();
        void *p = timed([&] { return malloc_on(size, device, c10::cuda::getCurrentCUDAStream(device).stream()); });
        return {p, p, &free_block, c10::Device(c10::DeviceType::CUDA, device)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
    void copy_data(void *dest, const void *src, std::size_t count) const override
    {
        C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
    }
    void *raw_alloc(size_t nbytes) override
    {
        DeviceIndex device = c10::cuda::current_device();
        return timed([&] { return malloc_on(nbytes, device, c10::cuda::getCurrentCUDAStream(device).stream()); });
    }
    void *raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override
    {
        return timed([&] { return malloc_on(nbytes, c10::cuda::current_device(), stream); });
    }
    void raw_delete(void *ptr) override { free_block(ptr); }

    void *malloc_on(size_t size, DeviceIndex device, cudaStream_t stream)
    {
        if (size == 0)
            return nullptr; // as PyTorch's own allocator: freeing nullptr does nothing
        if (!enabled_.load(std::memory_order_relaxed))
            return malloc_uncached(size, device);
        tide_pool_id pool = pool_for(device, stream);
        void *p = nullptr;
        tide_allocator *t = allocator_of(device);
        tide_status s = tide_malloc_pool(t, size, reinterpret_cast<tide_stream>(stream), pool, &p);
        if (s == TIDE_ENOMEM)
            out_of_memory(device, t, size, stream, &p, &pool, &s);
        TORCH_CHECK(s == TIDE_OK, "tidepool: ", why_or(tide_last_error()));
        record(cda::TraceEntry::ALLOC, device, reinterpret_cast<size_t>(p), size, stream, pool);
        return p;
    }
    // torch.cuda.caching_allocator_enable(False): straight to the driver and back, as PyTorch does.
    void *malloc_uncached(size_t size, DeviceIndex device)
    {
        c10::cuda::CUDAGuard g(device);
        void *p = nullptr;
        cudaError_t e = cudaMalloc(&p, size);
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ", format_size(size),
                             ". GPU ", num(device),
                             ": cudaMalloc failed with the caching allocator disabled.");
        }
        C10_CUDA_CHECK(e);
        std::lock_guard<std::mutex> lock(uncached_lock_);
        uncached_.insert(p);
        return p;
    }
    bool is_uncached(void *ptr)
    {
        std::lock_guard<std::mutex> lock(uncached_lock_);
        return uncached_.count(ptr) != 0;
    }
    bool free_uncached(void *ptr)
    {
        {
            std::lock_guard<std::mutex> lock(uncached_lock_);
            if (uncached_.empty() || !uncached_.erase(ptr))
                return false;
        }
        C10_CUDA_CHECK_WARN(cudaFree(ptr));
        return true;
    }
    // Out of memory: a MemPool(use_on_oom=True) may still serve it (*s becomes TIDE_OK); if none does,
    // the observers hear of it and PyTorch's OutOfMemoryError is raised. Its first sentence and figures
    // are PyTorch's, so that code which recognizes running out of memory by its text (accelerate's
    // find_executable_batch_size, the Trainer's auto_find_batch_size: " out of memory.") goes on to
    // shrink the batch; tidepool's report follows.
    void out_of_memory(DeviceIndex device, tide_allocator *t, size_t size, cudaStream_t stream, void **p,
                       tide_pool_id *pool, tide_status *s)
    {
        std::string why = tide_last_error();
        if (*pool == 0 && (*s = malloc_from_oom_pools(device, t, size, stream, p, pool)) == TIDE_OK)
            return;
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        tide_stats st = stats_of(device);
        for (auto &observer : observers_copy())
            observer(device, static_cast<size_t>(st.allocated_bytes[TIDE_POOL_ALL].current), total_b, free_b);
        record(cda::TraceEntry::OOM, device, free_b, size, stream, *pool);
        uint64_t allocated = static_cast<uint64_t>(st.allocated_bytes[TIDE_POOL_ALL].current);
        uint64_t reserved = static_cast<uint64_t>(st.reserved_bytes[TIDE_POOL_ALL].current);
        TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ", format_size(size),
                         ". GPU ", num(device), " has a total capacity of ", format_size(total_b),
                         " of which ", format_size(free_b), " is free. Of the allocated memory ",
                         format_size(allocated), " is allocated by PyTorch, and ",
                         format_size(reserved > allocated ? reserved - allocated : 0),
                         " is reserved by PyTorch but unallocated. tidepool: ", why);
    }
    // MemPool(use_on_oom=True): where the device is out of memory, an allocation outside every pool
    // may come from such a pool's own segments (it then belongs to that pool, as in PyTorch).
    tide_status malloc_from_oom_pools(DeviceIndex device, tide_allocator *t, size_t size, cudaStream_t stream,
                                      void **p, tide_pool_id *pool)
    {
        std::vector<tide_pool_id> candidates;
        {
            std::lock_guard<std::mutex> g(pool_lock_);
            for (auto &key : use_on_oom_)
                if (key.first == device && pools_.count(key))
                    candidates.push_back(pools_[key]);
        }
        for (tide_pool_id candidate : candidates)
            if (tide_malloc_pool(t, size, reinterpret_cast<tide_stream>(stream), candidate, p) == TIDE_OK) {
                *pool = candidate;
                return TIDE_OK;
            }
        return TIDE_ENOMEM;
    }
    static std::string why_or(const char *message) { return message ? message : "?"; }

    void free_ptr(void *ptr)
    {
        if (!ptr || free_uncached(ptr))
            return;
        bool tracing = recording_.load(std::memory_order_relaxed) || has_trackers_.load(std::memory_order_relaxed);
        DeviceIndex device = 0;
        size_t size = 0;
        if (tracing)
            record_free(ptr, &device, &size);
        // The observer hears this free on this thread if it leaves the block PENDING (on_core_event);
        // if it does not, the free completed in the call, and the trace says so now, as PyTorch's does.
        freeing_ = ptr;
        freeing_went_pending_ = false;
        // A deleter must not throw: a failure here is a bug worth a loud warning, not a crash.
        if (tide_devices_free(devices, -1, ptr) != TIDE_OK)
            TORCH_WARN("tidepool: ", tide_last_error());
        freeing_ = nullptr;
        if (tracing && !freeing_went_pending_)
            emit(cda::TraceEntry::FREE_COMPLETED, device, reinterpret_cast<size_t>(ptr), size, nullptr);
        else if (tracing) {
            std::lock_guard<std::mutex> g(history_lock_);
            pending_sizes_[ptr] = {device, size};
        }
    }
    // tidepool's events, from the core's observer: under a lock of the allocator, so nothing here calls
    // tidepool or Python (no context is gathered for them).
    void core_event(DeviceIndex device, const tide_event *e)
    {
        void *addr = reinterpret_cast<void *>(static_cast<uintptr_t>(e->addr));
        if (restoring_ && (e->kind == TIDE_EVENT_FREE_REQUESTED || e->kind == TIDE_EVENT_FREE_COMPLETED))
            return;
        switch (e->kind) {
        case TIDE_EVENT_FREE_REQUESTED:
            if (addr == freeing_)
                freeing_went_pending_ = true;
            return;
        case TIDE_EVENT_FREE_COMPLETED: {
            size_t size = e->size;
            {
                std::lock_guard<std::mutex> g(history_lock_);
                auto it = pending_sizes_.find(addr);
                if (it != pending_sizes_.end()) {
                    size = it->second.second;
                    pending_sizes_.erase(it);
                }
            }
            emit(cda::TraceEntry::FREE_COMPLETED, device, e->addr, size, reinterpret_cast<cudaStream_t>(e->stream));
            return;
        }
        case TIDE_EVENT_SEGMENT_RESERVED:
            emit(expandable_ ? cda::TraceEntry::SEGMENT_MAP : cda::TraceEntry::SEGMENT_ALLOC, device, e->addr, e->size,
                 reinterpret_cast<cudaStream_t>(e->stream));
            return;
        case TIDE_EVENT_SEGMENT_RELEASED:
            emit(expandable_ ? cda::TraceEntry::SEGMENT_UNMAP : cda::TraceEntry::SEGMENT_FREE, device, e->addr,
                 e->size, reinterpret_cast<cudaStream_t>(e->stream));
            return;
        default:
            return; // out of memory is recorded where PyTorch's is, with the device's free bytes
        }
    }
    // An event without a context, to every tracker and (while recording) the history.
    void emit(cda::TraceEntry::Action action, DeviceIndex device, size_t addr, size_t size, cudaStream_t stream)
    {
        if (!recording_.load(std::memory_order_relaxed) && !has_trackers_.load(std::memory_order_relaxed))
            return;
        cda::TraceEntry e(action, device, addr, size, stream, MempoolId_t{0, 0}, c10::getApproximateTime(), nullptr);
        for (auto &tracker : trackers_copy())
            tracker(e);
        if (!recording_.load(std::memory_order_relaxed))
            return;
        std::lock_guard<std::mutex> g(history_lock_);
        trace_.push_back(std::move(e));
        while (trace_.size() > max_entries_)
            trace_.pop_front();
    }
    // -- set-up ----------------------------------------------------------------------------------
    void init(int device_count) override
    {
        std::lock_guard<std::mutex> g(settings_lock_);
        fraction_.assign(std::max(device_count, 1), 1.0);
    }
    bool initialized() override { return devices != nullptr; }
    // torch.cuda.caching_allocator_enable(False): later allocations go to the driver, uncached (each
    // one's free goes back to it), as under PyTorch's allocator; what tidepool holds stays its own.
    void enable(bool value) override { enabled_.store(value); }
    bool isEnabled() const override { return enabled_.load(); }
    std::string name() override { return "tidepool"; }

    double getMemoryFraction(DeviceIndex device) override
    {
        std::lock_guard<std::mutex> g(settings_lock_);
        return device < static_cast<DeviceIndex>(fraction_.size()) ? fraction_[device] : 1.0;
    }
    void setMemoryFraction(double fraction, DeviceIndex device) override
    {
        TORCH_CHECK(fraction > 0 && fraction <= 1, "tidepool: the memory fraction must be in (0, 1]");
        tide_status s = tide_set_limit_fraction(allocator_of(device), fraction);
        TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
        std::lock_guard<std::mutex> g(settings_lock_);
        if (device >= static_cast<DeviceIndex>(fraction_.size()))
            fraction_.resize(device + 1, 1.0);
        fraction_[device] = fraction;
    }

    // -- the cache ---------------------------------------------------------------------------------
    // The default id empties everything (pools in use keep their memory); a pool's id empties that
    // pool's cache only, in use or not, as PyTorch's allocator does.
    void emptyCache(MempoolId_t mempool_id) override
    {
        TORCH_CHECK(devices, "tidepool is not enabled");
        if (mempool_id.first == 0 && mempool_id.second == 0) {
            tide_status s = tide_devices_empty_cache(devices);
            TORCH_CHECK(s == TIDE_OK, "tidepool: empty_cache: ", tide_last_error());
            return;
        }
        std::vector<std::pair<DeviceIndex, tide_pool_id>> targets;
        {
            std::lock_guard<std::mutex> g(pool_lock_);
            for (auto &kv : pools_)
                if (kv.first.second == mempool_id)
                    targets.emplace_back(kv.first.first, kv.second);
        }
        for (auto &target : targets) {
            tide_status s = tide_pool_empty_cache(allocator_of(target.first), target.second, nullptr);
            TORCH_CHECK(s == TIDE_OK, "tidepool: empty_cache: ", tide_last_error());
        }
    }
    void cacheInfo(DeviceIndex device, size_t *largest) override
    {
        // The largest cached block, or if there is none what the device has free (cuDNN sizes its
        // workspace from it, as with PyTorch's allocator).
        size_t best = snapshot_of(device)->largest_cached;
        if (best == 0) {
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            best = free_b;
        }
        *largest = best;
    }
    void *getBaseAllocation(void *ptr, size_t *size) override
    {
        uintptr_t base = 0;
        size_t seg = 0;
        tide_status s = tide_segment_of(allocator_of(c10::cuda::current_device()), ptr, &base, &seg);
        TORCH_CHECK(s == TIDE_OK, "tidepool: getBaseAllocation: ", tide_last_error());
        if (size)
            *size = seg;
        return reinterpret_cast<void *>(base);
    }
#if TIDEPOOL_TORCH_AT_LEAST(2, 10)
    std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(DeviceIndex) override { return {}; }
#endif
    void recordStream(const c10::DataPtr &ptr, c10::cuda::CUDAStream stream) override
    {
        // Memory tidepool does not own (received over IPC, from_blob, DLPack) has no block whose reuse
        // could race the stream: skipped, as PyTorch's allocator skips what it did not allocate.
        if (!ptr.get() || ptr.get_deleter() != &free_block || is_uncached(ptr.get()))
            return;
        tide_status s = tide_devices_record_stream(devices, ptr.get(), reinterpret_cast<tide_stream>(stream.stream()));
        TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    }

    // -- statistics ----------------------------------------------------------------------------------
    // tidepool keeps every statistic of memory_stats() that it has, accumulated ones included (.allocated
    // and .freed, reset by tide_reset_accumulated_stats); its pools are PyTorch's stat types, in order.
    static void set(c10::CachingAllocator::Stat &out, const tide_stat &in, const tide_stat_accumulated &acc)
    {
        out.current = in.current;
        out.peak = in.peak;
        out.allocated = acc.allocated;
        out.freed = acc.freed;
    }
    cda::DeviceStats getDeviceStats(DeviceIndex device) override
    {
        tide_stats s = stats_of(device);
        const auto &a = s.accumulated;
        cda::DeviceStats d;
        for (int k = 0; k < TIDE_POOL_COUNT; k++) {
            set(d.allocation[k], s.allocation[k], a.allocation[k]);
            set(d.segment[k], s.segment[k], a.segment[k]);
            set(d.active[k], s.active[k], a.active[k]);
            set(d.allocated_bytes[k], s.allocated_bytes[k], a.allocated_bytes[k]);
            set(d.reserved_bytes[k], s.reserved_bytes[k], a.reserved_bytes[k]);
            set(d.active_bytes[k], s.active_bytes[k], a.active_bytes[k]);
            set(d.inactive_split_bytes[k], s.inactive_split_bytes[k], a.inactive_split_bytes[k]);
            set(d.requested_bytes[k], s.requested_bytes[k], a.requested_bytes[k]);
            set(d.inactive_split[k], s.inactive_split[k], s.accumulated_inactive_split[k]);
        }
        set(d.oversize_allocations, s.oversize_allocations, a.oversize_allocations);
        set(d.oversize_segments, s.oversize_segments, a.oversize_segments);
        d.num_alloc_retries = static_cast<int64_t>(s.num_alloc_retries);
        d.num_ooms = static_cast<int64_t>(s.num_ooms);
        d.num_sync_all_streams = static_cast<int64_t>(s.num_sync_all_streams);
        d.num_device_alloc = static_cast<int64_t>(s.num_device_alloc);
        d.num_device_free = static_cast<int64_t>(s.num_device_free);
        {
            // As PyTorch states it: max_split_size_mb in bytes, or SIZE_MAX (-1 here) when unset.
            std::lock_guard<std::mutex> g(settings_lock_);
            d.max_split_size = static_cast<int64_t>(settings_.max_split_size);
        }
        return d;
    }
    void resetAccumulatedStats(DeviceIndex device) override
    {
        tide_status s = tide_reset_accumulated_stats(allocator_of(device));
        TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    }
    void resetPeakStats(DeviceIndex device) override { tide_reset_peak_stats(allocator_of(device)); }

    // -- private pools: CUDA graphs, MemPool, cudagraph trees ----------------------------------------
    tide_pool_id pool_id_of(DeviceIndex device, MempoolId_t id, bool create)
    {
        auto key = std::make_pair(device, id);
        auto it = pools_.find(key);
        if (it != pools_.end())
            return it->second;
        TORCH_CHECK(create, "tidepool: pool (", num(static_cast<long long>(id.first)), ", ",
                    num(static_cast<long long>(id.second)), ") was never created on device ", num(device));
        tide_pool_id pool = 0;
        tide_status s = tide_pool_create(allocator_of(device), &pool);
        TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
        pools_[key] = pool;
        return pool;
    }
    // tidepool.torch.pool(): the tidepool pool of a MemPool (made when the MemPool was), for sleep and wake.
    tide_pool_id pool_of_mempool(DeviceIndex device, MempoolId_t id)
    {
        std::lock_guard<std::mutex> g(pool_lock_);
        return pool_id_of(device, id, false);
    }
    // MemPool(allocator=...): the pool's segments are reserved with that allocator (ncclMemAlloc,
    // symmetric memory, another program's pool) and released with it, tidepool caching on top
    // (tide_pool_create_with_backend). The allocator is kept alive as long as tidepool is.
#if TIDEPOOL_TORCH_AT_LEAST(2, 11)
    void createOrIncrefPool(DeviceIndex device, MempoolId_t id, std::shared_ptr<cca::CUDAAllocator> allocator) override
    {
#else
    // Up to 2.10 torch passes the MemPool's allocator by pointer and the MemPool keeps it alive.
    void createOrIncrefPool(DeviceIndex device, MempoolId_t id, cca::CUDAAllocator *given) override
    {
        std::shared_ptr<cca::CUDAAllocator> allocator(given, [](cca::CUDAAllocator *) {});
#endif
        std::lock_guard<std::mutex> g(pool_lock_);
        auto key = std::make_pair(device, id);
        if (pools_.count(key)) {
            tide_status s = tide_pool_retain(allocator_of(device), pools_[key]);
            TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
        } else if (allocator && allocator.get() != this) {
            pool_allocators_.push_back(allocator);
            tide_backend table;
            std::memset(&table, 0, sizeof table);
            table.struct_size = sizeof table;
            table.name = "MemPool's allocator";
            table.ctx = allocator.get();
            table.reserve = [](void *ctx, size_t size, uintptr_t *out) -> tide_status {
                try {
                    void *p = static_cast<cca::CUDAAllocator *>(ctx)->raw_alloc(size);
                    *out = reinterpret_cast<uintptr_t>(p);
                    return p ? TIDE_OK : TIDE_ENOMEM;
                } catch (const c10::OutOfMemoryError &) {
                    return TIDE_ENOMEM;
                } catch (const std::exception &e) {
                    tide_backend_error("the MemPool's allocator: %s", e.what());
                    return TIDE_EDEVICE;
                }
            };
            table.release = [](void *ctx, uintptr_t addr, size_t) -> tide_status {
                try {
                    static_cast<cca::CUDAAllocator *>(ctx)->raw_delete(reinterpret_cast<void *>(addr));
                    return TIDE_OK;
                } catch (const std::exception &e) {
                    tide_backend_error("the MemPool's allocator: %s", e.what());
                    return TIDE_EDEVICE;
                }
            };
            tide_pool_id pool = 0;
            tide_status s = tide_pool_create_with_backend(allocator_of(device), &table, &pool);
            TORCH_CHECK(s == TIDE_OK, "tidepool: MemPool(allocator=...): ", tide_last_error());
            pools_[key] = pool;
        } else {
            pool_id_of(device, id, true);
        }
    }
    int getPoolUseCount(DeviceIndex device, MempoolId_t id) override
    {
        std::lock_guard<std::mutex> g(pool_lock_);
        auto it = pools_.find(std::make_pair(device, id));
        if (it == pools_.end())
            return 0;
        uint32_t n = 0;
        tide_pool_use_count(allocator_of(device), it->second, &n);
        return static_cast<int>(n);
    }
    void beginAllocateToPool(DeviceIndex device, MempoolId_t id, std::function<bool(cudaStream_t)> filter) override
    {
        std::lock_guard<std::mutex> g(pool_lock_);
        // As PyTorch's allocator: allocating to a pool is one more use of it (releasePool, after
        // endAllocateToPool, is the matching release); the first use creates it.
        auto key = std::make_pair(device, id);
        tide_pool_id pool;
        if (pools_.count(key)) {
            pool = pools_[key];
            TORCH_CHECK(tide_pool_retain(allocator_of(device), pool) == TIDE_OK, "tidepool: ", tide_last_error());
        } else {
            pool = pool_id_of(device, id, true);
        }
        // Allocating to a pool is not a capture: a MemPool scope (use_mem_pool) routes allocations and
        // nothing else. A graph capture is seen per allocation, when its stream is capturing (pool_for).
        routes_.push_back({device, id, pool, std::move(filter), {}});
        routing_.store(true);
    }
    void endAllocateToPool(DeviceIndex device, MempoolId_t id) override
    {
        std::lock_guard<std::mutex> g(pool_lock_);
        for (auto it = routes_.begin(); it != routes_.end(); ++it)
            if (it->device == device && it->id == id) {
                std::set<cudaStream_t> captured = std::move(it->captured);
                routes_.erase(it);
                for (cudaStream_t stream : captured)
                    TORCH_CHECK(tide_capture_end_stream(allocator_of(device), reinterpret_cast<tide_stream>(stream)) ==
                                    TIDE_OK,
                                "tidepool: ", tide_last_error());
                break;
            }
        routing_.store(!routes_.empty());
    }
    void releasePool(DeviceIndex device, MempoolId_t id) override
    {
        std::lock_guard<std::mutex> g(pool_lock_);
        auto it = pools_.find(std::make_pair(device, id));
        if (it == pools_.end())
            return;
        tide_status s = tide_pool_release(allocator_of(device), it->second);
        TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    }
#if TIDEPOOL_TORCH_AT_LEAST(2, 11)
    void setUseOnOOM(DeviceIndex device, MempoolId_t id, bool use_on_oom) override
#else
    // torch 2.8 and 2.9 call setUseOnOOM(device, id) for MemPool(use_on_oom=True); 2.10 one of the two.
    void setUseOnOOM(DeviceIndex device, MempoolId_t id) { setUseOnOOM(device, id, true); }
    void setUseOnOOM(DeviceIndex device, MempoolId_t id, bool use_on_oom)
#endif
    {
        std::lock_guard<std::mutex> g(pool_lock_);
        auto key = std::make_pair(device, id);
        if (use_on_oom)
            use_on_oom_.insert(key);
        else
            use_on_oom_.erase(key);
    }
    // PyTorch's no_split keeps a pool's blocks whole; tidepool splits within a pool's own segments
    // only, which no allocation outside it can reach, so there is nothing to change.
#if TIDEPOOL_TORCH_AT_LEAST(2, 11)
    void setNoSplit(DeviceIndex, MempoolId_t) override {}
#else
    void setNoSplit(DeviceIndex, MempoolId_t) {} // torch 2.8 and 2.9 have none; 2.10 may
#endif
    bool checkPoolLiveAllocations(DeviceIndex device, MempoolId_t id,
                                  const std::unordered_set<void *> &expected) override
    {
        tide_pool_id pool;
        {
            std::lock_guard<std::mutex> g(pool_lock_);
            auto it = pools_.find(std::make_pair(device, id));
            if (it == pools_.end())
                return expected.empty();
            pool = it->second;
        }
        size_t live = 0;
        Snapshot snap = snapshot_of(device);
        for (size_t i = 0; i < snap->nsegments; i++) {
            const tide_snapshot_segment &seg = snap->segments[i];
            if (seg.private_pool != pool)
                continue;
            for (size_t k = seg.first_block; k < seg.first_block + seg.nblocks; k++) {
                const tide_snapshot_block &b = snap->blocks[k];
                if (b.state != TIDE_BLOCK_ACTIVE)
                    continue;
                if (!expected.count(reinterpret_cast<void *>(b.address)))
                    return false;
                live++;
            }
        }
        return live == expected.size();
    }
    tide_pool_id pool_for(DeviceIndex device, cudaStream_t stream)
    {
        if (!routing_.load(std::memory_order_relaxed))
            return 0;
        std::lock_guard<std::mutex> g(pool_lock_);
        for (auto &r : routes_)
            if (r.device == device && r.filter(stream)) {
                // A stream capturing a graph: tidepool holds its pending frees back (no fence query on
                // it) and the device-wide steps until the capture ends; the rest of the device goes on.
                cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
                if (!r.captured.count(stream) && cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
                    status == cudaStreamCaptureStatusActive) {
                    TORCH_CHECK(tide_capture_begin_stream(allocator_of(device), reinterpret_cast<tide_stream>(stream)) ==
                                    TIDE_OK,
                                "tidepool: ", tide_last_error());
                    r.captured.insert(stream);
                }
                return r.pool;
            }
        return 0;
    }
    // cudagraph trees: a checkpoint is the pool's allocated blocks; setting it frees every block
    // allocated in the pool now and allocates exactly the checkpoint's again, at their addresses
    // (tide_pool_restore), as PyTorch's allocator does: all that was allocated is in ptrs_freed, and
    // each checkpointed block comes back as a DataPtr with tidepool's deleter, for the live storages.
    struct PoolCheckpoint final : cca::AllocatorState {
        DeviceIndex device;
        tide_pool_id pool;
        std::vector<tide_pool_block> blocks;
    };
    static std::vector<tide_pool_block> pool_blocks(tide_allocator *t, tide_pool_id pool)
    {
        std::vector<tide_pool_block> blocks;
        size_t n = 0;
        do {
            blocks.resize(n);
            TORCH_CHECK(tide_pool_blocks(t, pool, blocks.data(), blocks.size(), &n) == TIDE_OK, "tidepool: ",
                        tide_last_error());
        } while (n > blocks.size());
        blocks.resize(n);
        return blocks;
    }
    tide_pool_id known_pool(DeviceIndex device, MempoolId_t id)
    {
        std::lock_guard<std::mutex> g(pool_lock_);
        return pool_id_of(device, id, false);
    }
    std::shared_ptr<cca::AllocatorState> getCheckpointState(DeviceIndex device, MempoolId_t id) override
    {
        auto state = std::make_shared<PoolCheckpoint>();
        state->device = device;
        state->pool = known_pool(device, id);
        state->blocks = pool_blocks(allocator_of(device), state->pool);
        return state;
    }
    cca::CheckpointDelta setCheckpointPoolState(DeviceIndex device, std::shared_ptr<cca::AllocatorState> pps) override
    {
        auto state = std::dynamic_pointer_cast<PoolCheckpoint>(pps);
        TORCH_CHECK(state, "tidepool: setCheckpointPoolState: the state was not taken by tidepool's getCheckpointState");
        TORCH_CHECK(state->device == device, "tidepool: setCheckpointPoolState: a checkpoint of device ",
                    num(state->device), " set on device ", num(device));
        tide_allocator *t = allocator_of(device);
        cca::CheckpointDelta delta;
        bool tracing = recording_.load(std::memory_order_relaxed) || has_trackers_.load(std::memory_order_relaxed);
        std::vector<std::pair<void *, size_t>> freed;
        for (auto &b : pool_blocks(t, state->pool)) {
            void *ptr = reinterpret_cast<void *>(b.ptr);
            delta.ptrs_freed.push_back(ptr);
            DeviceIndex d = device;
            size_t size = b.requested;
            if (tracing)
                record_free(ptr, &d, &size);
            freed.emplace_back(ptr, size);
        }
        // The restore waits for the device, so every free is complete when it returns: said here once
        // for each, not by the observer on the way.
        restoring_ = true;
        tide_status s = tide_pool_restore(t, state->pool, state->blocks.data(), state->blocks.size());
        restoring_ = false;
        if (tracing)
            for (auto &f : freed)
                emit(cda::TraceEntry::FREE_COMPLETED, device, reinterpret_cast<size_t>(f.first), f.second, nullptr);
        TORCH_CHECK(s == TIDE_OK, "tidepool: setCheckpointPoolState: ", tide_last_error());
        for (auto &b : state->blocks) {
            void *ptr = reinterpret_cast<void *>(b.ptr);
            record(cda::TraceEntry::ALLOC, device, b.ptr, b.requested, reinterpret_cast<cudaStream_t>(b.stream),
                   state->pool);
            delta.dataptrs_allocd.emplace_back(ptr, ptr, &free_block, c10::Device(c10::DeviceType::CUDA, device));
        }
        return delta;
    }

    // -- snapshots and history -----------------------------------------------------------------------
#if TIDEPOOL_TORCH_AT_LEAST(2, 11)
    cca::SnapshotInfo snapshot(MempoolId_t mempool_id, bool include_traces) override
#else
    cca::SnapshotInfo snapshot(MempoolId_t mempool_id) override { return snapshot(mempool_id, true); }
    cca::SnapshotInfo snapshot(MempoolId_t mempool_id, bool include_traces)
#endif
    {
        cca::SnapshotInfo info;
        int ndev = c10::cuda::device_count();
        for (DeviceIndex d = 0; d < ndev; d++) {
            if (!tide_allocator_exists(d))
                continue;
            tide_pool_id only = 0;
            bool filter = mempool_id.first != 0 || mempool_id.second != 0;
            if (filter) {
                std::lock_guard<std::mutex> g(pool_lock_);
                auto it = pools_.find(std::make_pair(d, mempool_id));
                if (it == pools_.end())
                    continue;
                only = it->second;
            }
            // Before the history's lock: the observer takes it, and tidepool's calls under the pool lock
            // may call the observer (pool lock, then history lock: never the other way).
            std::map<tide_pool_id, MempoolId_t> torch_ids;
            {
                std::lock_guard<std::mutex> g(pool_lock_);
                for (auto &kv : pools_)
                    if (kv.first.first == d)
                        torch_ids[kv.second] = kv.first.second;
            }
            Snapshot snap = snapshot_of(d);
            std::lock_guard<std::mutex> g(history_lock_);
            for (size_t i = 0; i < snap->nsegments; i++) {
                const tide_snapshot_segment &seg = snap->segments[i];
                if (filter && seg.private_pool != only)
                    continue;
                cda::SegmentInfo s;
                s.device = d;
                s.address = seg.address;
                s.total_size = seg.size;
                s.stream = reinterpret_cast<decltype(s.stream)>(seg.stream); // cudaStream_t up to 2.10
                s.is_large = seg.pool == TIDE_POOL_LARGE;
                s.is_expandable = seg.expandable != 0;
                s.owner_private_pool_id = torch_ids.count(seg.private_pool) ? torch_ids[seg.private_pool]
                                                                             : MempoolId_t{0, 0};
                for (size_t k = seg.first_block; k < seg.first_block + seg.nblocks; k++) {
                    const tide_snapshot_block &b = snap->blocks[k];
                    cda::BlockInfo bi;
                    bi.size = b.size;
                    bi.requested_size = b.requested;
                    bi.allocated = b.state == TIDE_BLOCK_ACTIVE;
                    bi.active = b.state != TIDE_BLOCK_CACHED;
                    if (bi.allocated) {
                        s.allocated_size += bi.size;
                        s.requested_size += bi.requested_size;
                        auto c = contexts_.find(reinterpret_cast<void *>(b.address));
                        if (c != contexts_.end())
                            bi.context_when_allocated = c->second;
                    }
                    if (bi.active)
                        s.active_size += bi.size;
                    s.blocks.push_back(std::move(bi));
                }
                info.segments.push_back(std::move(s));
            }
        }
        if (include_traces) {
            std::lock_guard<std::mutex> g(history_lock_);
            info.device_traces.assign(std::max(ndev, 1), {});
            for (auto &e : trace_)
                if (e.device_ < ndev)
                    info.device_traces[e.device_].push_back(e);
        }
        // The settings, as PyTorch's snapshot states them: tidepool's where it has one, PyTorch's
        // defaults where it has none (tidepool rounds to 512 bytes, registers no pinned memory).
        {
            std::lock_guard<std::mutex> g(settings_lock_);
            info.config_metadata.garbage_collection_threshold = settings_.gc_threshold;
            info.config_metadata.max_split_size = settings_.max_split_size;
            info.config_metadata.expandable_segments = expandable_;
            info.config_metadata.last_allocator_settings = "tidepool:" + settings_.text;
        }
        info.config_metadata.pinned_num_register_threads = 1;
        info.config_metadata.release_lock_on_malloc = false;
        info.config_metadata.pinned_use_host_register = false;
        info.config_metadata.roundup_power2_divisions.assign(16, 0); // PyTorch's 16 intervals, none set
        return info;
    }
    MempoolId_t torch_id_of(DeviceIndex device, tide_pool_id pool)
    {
        if (pool == 0)
            return {0, 0};
        std::lock_guard<std::mutex> g(pool_lock_);
        return torch_id_of_locked_pools(device, pool);
    }
    MempoolId_t torch_id_of_locked_pools(DeviceIndex device, tide_pool_id pool)
    {
        if (pool == 0)
            return {0, 0};
        for (auto &kv : pools_)
            if (kv.first.first == device && kv.second == pool)
                return kv.first.second;
        return {0, 0};
    }
    static bool tide_allocator_exists(DeviceIndex d)
    {
        tide_allocator *t = nullptr;
        return devices && tide_devices_get(devices, d, &t) == TIDE_OK;
    }
    bool isHistoryEnabled() override { return recording_.load(); }
#if TIDEPOOL_TORCH_AT_LEAST(2, 11)
    void recordHistory(bool enabled, cda::CreateContextFn context_recorder, size_t max_entries,
                       cda::RecordContext when, bool clear_history, const std::vector<std::string> &) override
#else
    void recordHistory(bool enabled, cda::CreateContextFn context_recorder, size_t max_entries,
                       cda::RecordContext when, bool clear_history) override
#endif
    {
        std::lock_guard<std::mutex> g(history_lock_);
        context_recorder_ = context_recorder;
        when_ = when;
        max_entries_ = std::max<size_t>(max_entries, 1);
        if (clear_history || !enabled) {
            trace_.clear();
            if (!enabled)
                contexts_.clear();
        }
        recording_.store(enabled);
    }
    void record(cda::TraceEntry::Action action, DeviceIndex device, size_t addr, size_t size,
                cudaStream_t stream, tide_pool_id pool)
    {
        if (!recording_.load(std::memory_order_relaxed) && !has_trackers_.load(std::memory_order_relaxed))
            return;
        std::shared_ptr<c10::GatheredContext> ctx;
        cda::CreateContextFn recorder = nullptr;
        cda::RecordContext when = cda::RecordContext::NEVER;
        {
            std::lock_guard<std::mutex> g(history_lock_);
            recorder = context_recorder_;
            when = when_;
        }
        if (recorder && when != cda::RecordContext::NEVER)
            ctx = recorder();
        cda::TraceEntry e(action, device, addr, size, stream, torch_id_of(device, pool), c10::getApproximateTime(), ctx);
        for (auto &tracker : trackers_copy())
            tracker(e);
        // Only while recording: record_free, which forgets these, runs only then.
        if (!recording_.load(std::memory_order_relaxed))
            return;
        std::lock_guard<std::mutex> g(history_lock_);
        if (action == cda::TraceEntry::ALLOC) {
            contexts_[reinterpret_cast<void *>(addr)] = ctx;
            sizes_[reinterpret_cast<void *>(addr)] = {device, size};
        }
        trace_.push_back(std::move(e));
        while (trace_.size() > max_entries_)
            trace_.pop_front();
    }
    // FREE_REQUESTED, before the free (as PyTorch records it); *device and *size: the allocation's.
    void record_free(void *ptr, DeviceIndex *device, size_t *size)
    {
        cda::CreateContextFn recorder = nullptr;
        cda::RecordContext when = cda::RecordContext::NEVER;
        {
            std::lock_guard<std::mutex> g(history_lock_);
            auto it = sizes_.find(ptr);
            if (it != sizes_.end()) {
                *device = it->second.first;
                *size = it->second.second;
                sizes_.erase(it);
            } else {
                *device = c10::cuda::current_device();
            }
            contexts_.erase(ptr);
            recorder = context_recorder_;
            when = when_;
        }
        std::shared_ptr<c10::GatheredContext> ctx;
        if (recorder && when == cda::RecordContext::ALL)
            ctx = recorder();
        cda::TraceEntry e(cda::TraceEntry::FREE_REQUESTED, *device, reinterpret_cast<size_t>(ptr), *size, nullptr,
                          MempoolId_t{0, 0}, c10::getApproximateTime(), ctx);
        for (auto &tracker : trackers_copy())
            tracker(e);
        if (!recording_.load(std::memory_order_relaxed))
            return;
        std::lock_guard<std::mutex> g(history_lock_);
        trace_.push_back(std::move(e));
        while (trace_.size() > max_entries_)
            trace_.pop_front();
    }
    // Observers and trackers may be attached while other threads allocate: each list is copied under
    // its lock and called outside it (a tracker may take its own locks, or allocate).
    void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override
    {
        std::lock_guard<std::mutex> g(hooks_lock_);
        oom_observers_.push_back(std::move(observer));
    }
    void attachAllocatorTraceTracker(cda::AllocatorTraceTracker tracker) override
    {
        std::lock_guard<std::mutex> g(hooks_lock_);
        trackers_.push_back(std::move(tracker));
        has_trackers_.store(true);
    }
    std::vector<cca::OutOfMemoryObserver> observers_copy()
    {
        std::lock_guard<std::mutex> g(hooks_lock_);
        return oom_observers_;
    }
    std::vector<cda::AllocatorTraceTracker> trackers_copy()
    {
        if (!has_trackers_.load(std::memory_order_relaxed))
            return {};
        std::lock_guard<std::mutex> g(hooks_lock_);
        return trackers_;
    }

    // What PyTorch's snapshot states as its settings, from the configuration tidepool runs with.
    void set_settings(const std::string &text, bool expandable, double gc_threshold, size_t max_split)
    {
        std::lock_guard<std::mutex> g(settings_lock_);
        settings_.text = text;
        settings_.gc_threshold = gc_threshold;
        settings_.max_split_size = max_split;
        expandable_ = expandable;
    }

    // -- devices and IPC --------------------------------------------------------------------------------
    void enablePeerAccess(DeviceIndex dev, DeviceIndex dev_to_access) override
    {
        c10::cuda::CUDAGuard g(dev);
        cudaError_t e = cudaDeviceEnablePeerAccess(dev_to_access, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) {
            (void)cudaGetLastError();
            return;
        }
        C10_CUDA_CHECK(e);
    }
    cudaError_t memcpyAsync(void *dst, int dst_device, const void *src, int src_device, size_t count,
                            cudaStream_t stream, bool p2p_enabled) override
    {
        // tidepool's default segments are cuMemAlloc memory: cudaMemcpyAsync works across devices.
        if (p2p_enabled || dst_device == src_device)
            return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
        return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
    }
    cca::ShareableHandle shareIpcHandle(void *ptr) override
    {
        TORCH_CHECK(!expandable_, "tidepool: tensors in expandable segments cannot be shared between processes "
                                  "under tidepool yet (PyTorch's expandable-segment handles are not supported); run the "
                                  "sending process with expandable_segments:False (TIDEPOOL_CONF or PYTORCH_ALLOC_CONF)");
        uintptr_t base = 0;
        size_t size = 0;
        tide_status s = tide_segment_of(allocator_of(c10::cuda::current_device()), ptr, &base, &size);
        TORCH_CHECK(s == TIDE_OK, "tidepool: shareIpcHandle: ", tide_last_error());
        cudaIpcMemHandle_t handle;
        C10_CUDA_CHECK(cudaIpcGetMemHandle(&handle, reinterpret_cast<void *>(base)));
        // PyTorch's layout: a version byte, a type byte ('c': a cudaMalloc-style allocation), the handle.
        std::string text(2 + sizeof handle, '\0');
        text[0] = 2;
        text[1] = 'c';
        std::memcpy(&text[2], &handle, sizeof handle);
        return {static_cast<ptrdiff_t>(reinterpret_cast<uintptr_t>(ptr) - base), text};
    }
    // CUDA opens a sender's segment once per process and device: a second cudaIpcOpenMemHandle of the
    // same handle fails. tidepool's core keeps one opening per handle, counted (tide_ipc_open): each
    // tensor received from the segment holds one use, and the last to go closes it.
    std::shared_ptr<void> getIpcDevPtr(std::string text) override
    {
        constexpr size_t handle_bytes = sizeof(cudaIpcMemHandle_t);
        const char *raw = text.data();
        TORCH_CHECK(!(text.size() >= 2 && text[1] == 'e'),
                    "tidepool: getIpcDevPtr: the sender shared a tensor of an expandable segment, which tidepool "
                    "cannot open yet; run the sending process with expandable_segments:False");
        if (text.size() == 2 + handle_bytes && text[1] == 'c')
            raw += 2;
        else
            TORCH_CHECK(text.size() == handle_bytes, "tidepool: getIpcDevPtr: not a CUDA IPC handle");
        tide_allocator *t = allocator_of(c10::cuda::current_device());
        void *p = nullptr;
        tide_status s = tide_ipc_open(t, raw, handle_bytes, &p);
        TORCH_CHECK(s == TIDE_OK, "tidepool: getIpcDevPtr: ", tide_last_error());
        // The set of allocators lives as long as the process (enable() never destroys it), so t outlives
        // every tensor that holds this.
        return std::shared_ptr<void>(p, [t](void *q) { (void)tide_ipc_close(t, q); });
    }

  private:
    struct Route {
        DeviceIndex device;
        MempoolId_t id;
        tide_pool_id pool;
        std::function<bool(cudaStream_t)> filter;
        std::set<cudaStream_t> captured; // streams seen capturing: a tidepool capture each, until the end
    };
    struct Settings {
        std::string text;
        double gc_threshold = 0;
        size_t max_split_size = SIZE_MAX;
    };

    std::atomic<bool> enabled_{true};
    std::mutex settings_lock_; // the fractions and the settings: torch may set them while others allocate
    std::vector<double> fraction_;
    Settings settings_;
    std::atomic<bool> expandable_{false};
    std::mutex uncached_lock_;
    std::set<void *> uncached_;
    std::mutex hooks_lock_;
    std::vector<std::shared_ptr<cca::CUDAAllocator>> pool_allocators_; // MemPool(allocator=...)
    std::atomic<bool> has_trackers_{false};
    std::unordered_map<void *, std::pair<DeviceIndex, size_t>> pending_sizes_;
    std::mutex pool_lock_;
    std::map<std::pair<DeviceIndex, MempoolId_t>, tide_pool_id> pools_;
    std::vector<Route> routes_;
    std::set<std::pair<DeviceIndex, MempoolId_t>> use_on_oom_;
    std::atomic<bool> routing_{false};
    std::mutex history_lock_;
    std::atomic<bool> recording_{false};
    cda::CreateContextFn context_recorder_ = nullptr;
    cda::RecordContext when_ = cda::RecordContext::NEVER;
    size_t max_entries_ = 1;
    std::deque<cda::TraceEntry> trace_;
    std::unordered_map<void *, std::shared_ptr<c10::GatheredContext>> contexts_;
    std::unordered_map<void *, std::pair<DeviceIndex, size_t>> sizes_;
    std::vector<cca::OutOfMemoryObserver> oom_observers_;
    std::vector<cda::AllocatorTraceTracker> trackers_;
};

std::shared_ptr<TidepoolAllocator> instance;

// Every free of tidepool's memory comes here: the DataPtrs' deleter and raw_delete.
void free_block(void *ptr)
{
    if (instance)
        timed([&] { instance->free_ptr(ptr); });
}

void on_core_event(void *ctx, const tide_event *e)
{
    if (instance)
        instance->core_event(static_cast<DeviceIndex>(reinterpret_cast<intptr_t>(ctx)), e);
}

// config: the whole configuration tidepool runs with (tidepool.torch.enable joins TIDEPOOL_CONF, its
// argument and PyTorch's keys), and what it says of the settings PyTorch's snapshot reports.
void enable(const std::string &config, bool expandable, double gc_threshold, int64_t max_split_size)
{
    TORCH_CHECK(!devices, "tidepool is already PyTorch's allocator in this process");
    const char *timing = std::getenv("TIDEPOOL_TIME_CALLS");
    call_timing = timing && *timing && std::strcmp(timing, "0") != 0;
    tide_devices *set = nullptr;
    tide_status s = tide_devices_create(config.empty() ? nullptr : config.c_str(), &set);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    auto made = std::make_shared<TidepoolAllocator>();
    made->set_settings(config, expandable, gc_threshold,
                       max_split_size > 0 ? static_cast<size_t>(max_split_size) : SIZE_MAX);
    instance = made;
    devices = set;
    instance->init(c10::cuda::device_count());
    // Installs it as CUDA's allocator and as c10::GetAllocator(kCUDA); refuses once CUDA is in use.
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(instance);
}

// ---- tidepool's own calls, beside torch's -----------------------------------------------------------

std::pair<std::string, std::string> config_from_pytorch(const std::string &pytorch, const std::string &tidepool)
{
    char *out = nullptr, *ignored = nullptr;
    tide_status s = tide_config_from_pytorch(pytorch.c_str(), tidepool.c_str(), &out, &ignored);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    std::pair<std::string, std::string> result(out, ignored);
    tide_string_free(out);
    tide_string_free(ignored);
    return result;
}

// torch.cuda.memory._set_allocator_settings("per_process_memory_fraction:F"), once enabled.
void set_memory_fraction(double fraction)
{
    TORCH_CHECK(instance, "tidepool is not enabled");
    for (int d = 0; d < c10::cuda::device_count(); d++)
        instance->setMemoryFraction(fraction, static_cast<DeviceIndex>(d));
}

std::string take_text(tide_status s, char *text)
{
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    std::string out(text);
    tide_string_free(text);
    return out;
}

std::string stats_json(int device)
{
    tide_allocator *t = allocator_of(device);
    size_t need = 0;
    tide_stats_json(t, nullptr, 0, &need);
    std::string text(need + 1, '\0');
    tide_status s = tide_stats_json(t, &text[0], text.size(), &need);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    text.resize(need);
    return text;
}

void check(int device)
{
    tide_status s = tide_check(allocator_of(device));
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
}

void set_limit(int device, int64_t bytes)
{
    TORCH_CHECK(bytes > 0, "tidepool: the limit must be positive");
    tide_status s = tide_set_limit(allocator_of(device), static_cast<size_t>(bytes));
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
}

void history_start(int device, int64_t capacity, bool stacks, bool ordered)
{
    TORCH_CHECK(capacity > 0, "tidepool: the history needs room for at least one event");
    tide_status s = tide_history_start(allocator_of(device), static_cast<size_t>(capacity),
                                       (stacks ? TIDE_HISTORY_STACKS : 0) | (ordered ? TIDE_HISTORY_ORDERED : 0));
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
}

void history_stop(int device) { tide_history_stop(allocator_of(device)); }

void annotate(int device, const std::string &text)
{
    tide_status s = tide_annotate(allocator_of(device), text.c_str());
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
}

std::string history_json(int device)
{
    char *text = nullptr;
    tide_status s = tide_history_json(allocator_of(device), &text); // before take_text reads text
    return take_text(s, text);
}

std::string snapshot_json(int device)
{
    char *text = nullptr;
    tide_status s = tide_snapshot_json(allocator_of(device), &text); // before take_text reads text
    return take_text(s, text);
}

std::string leak_report(int device)
{
    char *text = nullptr;
    tide_status s = tide_leak_report(allocator_of(device), &text, nullptr); // before take_text reads text
    return take_text(s, text);
}

// Sleep and wake (tidepool.torch.pool, sleep, wake_up): Python calls libtidepool's tide_pool_sleep and
// the rest itself, with the device's allocator and the MemPool's tidepool pool from here.
uint64_t mempool_pool_id(int device, uint64_t first, uint64_t second)
{
    TORCH_CHECK(instance, "tidepool is not enabled");
    MempoolId_t id{static_cast<decltype(MempoolId_t::first)>(first), static_cast<decltype(MempoolId_t::second)>(second)};
    return instance->pool_of_mempool(static_cast<DeviceIndex>(device), id);
}

uint64_t allocator_address(int device) { return reinterpret_cast<uintptr_t>(allocator_of(device)); }

// TIDEPOOL_TIME_CALLS: whether the timer is on, the nanoseconds in tidepool's allocations and frees
// so far, and how many calls they were.
std::tuple<bool, uint64_t, uint64_t> call_time()
{
    return std::make_tuple(call_timing, call_ns.load(std::memory_order_relaxed),
                           call_count.load(std::memory_order_relaxed));
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("enable", &enable, "make tidepool PyTorch's CUDA allocator (config string, may be empty; expandable, "
          "gc threshold, max split size: the settings PyTorch's snapshot reports)");
    m.def("config_from_pytorch", &config_from_pytorch,
          "PyTorch's allocator configuration in tidepool's terms: (config, ignored keys)");
    m.def("set_memory_fraction", &set_memory_fraction);
    m.def("stats_json", &stats_json, "tidepool's statistics of one device, as JSON");
    m.def("check", &check, "tide_check on one device's allocator");
    m.def("set_limit", &set_limit);
    m.def("history_start", &history_start, "tide_history_start on one device's allocator");
    m.def("history_stop", &history_stop);
    m.def("annotate", &annotate, "tide_annotate on one device's allocator: a mark in its history");
    m.def("history_json", &history_json);
    m.def("snapshot_json", &snapshot_json);
    m.def("leak_report", &leak_report);
    m.def("mempool_pool_id", &mempool_pool_id, "the tidepool pool of a MemPool (device, id.first, id.second)");
    m.def("allocator_address", &allocator_address, "one device's tide_allocator, for ctypes calls");
    m.def("call_time", &call_time, "(timer on, ns in tidepool's allocations and frees, their number): "
          "TIDEPOOL_TIME_CALLS=1 at enable() turns the timer on");
}
