// tidepool as PyTorch's CUDA allocator: a c10::cuda::CUDACachingAllocator::CUDAAllocator of its own,
// so that torch.cuda's whole memory API (stats, snapshots, history, cacheInfo, CUDA graphs and their
// private pools, MemPool, IPC) works as under PyTorch's allocator. tidepool.torch compiles it on first
// use with PyTorch's extension builder, against the torch that runs, and links it with libtidepool.
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

#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tidepool.h"
#include "tidepool_cuda.h"

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
namespace cda = c10::CachingDeviceAllocator;
using c10::DeviceIndex;
using c10::MempoolId_t;

tide_devices *devices = nullptr;

tide_allocator *allocator_of(DeviceIndex device)
{
    tide_allocator *t = nullptr;
    TORCH_CHECK(devices, "tidepool is not enabled: call tidepool.torch.enable() first");
    tide_status s = tide_devices_get(devices, device, &t);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
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

// ---- a small reader of tidepool's snapshot JSON (its own, regular format) ----------------------------

struct Json {
    enum Kind { NUL, BOOL, NUM, STR, ARR, OBJ } kind = NUL;
    double num = 0;
    bool b = false;
    std::string str;
    std::vector<Json> arr;
    std::vector<std::pair<std::string, Json>> obj;
    const Json &operator[](const char *key) const
    {
        static const Json none;
        for (auto &kv : obj)
            if (kv.first == key)
                return kv.second;
        return none;
    }
    uint64_t u64() const { return static_cast<uint64_t>(num); }
};

struct JsonReader {
    const char *p;
    void ws() { while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++; }
    std::string string()
    {
        std::string out;
        p++; // "
        while (*p && *p != '"') {
            if (*p == '\\' && p[1]) {
                p++;
                out += *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
                if (*p == 'u') { // \uXXXX: tidepool writes it for control characters only
                    out.back() = '?';
                    p += 4;
                }
                p++;
            } else {
                out += *p++;
            }
        }
        if (*p == '"')
            p++;
        return out;
    }
    Json value()
    {
        ws();
        Json v;
        if (*p == '{') {
            v.kind = Json::OBJ;
            p++;
            for (ws(); *p && *p != '}'; ws()) {
                std::string key = string();
                ws();
                p++; // :
                v.obj.emplace_back(key, value());
                ws();
                if (*p == ',')
                    p++;
            }
            if (*p)
                p++;
        } else if (*p == '[') {
            v.kind = Json::ARR;
            p++;
            for (ws(); *p && *p != ']'; ws()) {
                v.arr.push_back(value());
                ws();
                if (*p == ',')
                    p++;
            }
            if (*p)
                p++;
        } else if (*p == '"') {
            v.kind = Json::STR;
            v.str = string();
        } else if (!std::strncmp(p, "true", 4) || !std::strncmp(p, "false", 5)) {
            v.kind = Json::BOOL;
            v.b = *p == 't';
            p += v.b ? 4 : 5;
        } else if (!std::strncmp(p, "null", 4)) {
            p += 4;
        } else {
            v.kind = Json::NUM;
            char *end = nullptr;
            v.num = std::strtod(p, &end);
            p = end && end != p ? end : p + 1;
        }
        return v;
    }
};

Json snapshot_of(DeviceIndex device)
{
    char *text = nullptr;
    tide_status s = tide_snapshot_json(allocator_of(device), &text);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    JsonReader r{text};
    Json j = r.value();
    tide_string_free(text);
    return j;
}

// ---- the allocator -------------------------------------------------------------------------------

void free_block(void *ptr);

class TidepoolAllocator final : public cca::CUDAAllocator {
  public:
    // -- allocating ---------------------------------------------------------------------------------
    c10::DataPtr allocate(size_t size) override
    {
        DeviceIndex device = c10::cuda::current_device();
        void *p = malloc_on(size, device, c10::cuda::getCurrentCUDAStream(device).stream());
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
        return malloc_on(nbytes, device, c10::cuda::getCurrentCUDAStream(device).stream());
    }
    void *raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override
    {
        return malloc_on(nbytes, c10::cuda::current_device(), stream);
    }
    void raw_delete(void *ptr) override { free_block(ptr); }

    void *malloc_on(size_t size, DeviceIndex device, cudaStream_t stream)
    {
        if (size == 0)
            return nullptr; // as PyTorch's own allocator: freeing nullptr does nothing
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
    // Out of memory: a MemPool(use_on_oom=True) may still serve it (*s becomes TIDE_OK); if none does,
    // the observers hear of it and PyTorch's OutOfMemoryError is raised with tidepool's report.
    void out_of_memory(DeviceIndex device, tide_allocator *t, size_t size, cudaStream_t stream, void **p,
                       tide_pool_id *pool, tide_status *s)
    {
        std::string why = tide_last_error();
        if (*pool == 0 && (*s = malloc_from_oom_pools(device, t, size, stream, p, pool)) == TIDE_OK)
            return;
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        tide_stats st = stats_of(device);
        for (auto &observer : oom_observers_)
            observer(device, static_cast<size_t>(st.allocated_bytes[TIDE_POOL_ALL].current), total_b, free_b);
        record(cda::TraceEntry::OOM, device, free_b, size, stream, *pool);
        TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (tidepool). ", why);
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
        if (!ptr)
            return;
        free_count_[device_slot(c10::cuda::current_device())][TIDE_POOL_ALL]++;
        if (recording_.load(std::memory_order_relaxed))
            record_free(ptr);
        // A deleter must not throw: a failure here is a bug worth a loud warning, not a crash.
        if (tide_devices_free(devices, -1, ptr) != TIDE_OK)
            TORCH_WARN("tidepool: ", tide_last_error());
    }

    // -- set-up ----------------------------------------------------------------------------------
    void init(int device_count) override { fraction_.assign(std::max(device_count, 1), 1.0); }
    bool initialized() override { return devices != nullptr; }
    void enable(bool value) override { enabled_ = value; }
    bool isEnabled() const override { return enabled_; }
    std::string name() override { return "tidepool"; }

    double getMemoryFraction(DeviceIndex device) override
    {
        return device < static_cast<DeviceIndex>(fraction_.size()) ? fraction_[device] : 1.0;
    }
    void setMemoryFraction(double fraction, DeviceIndex device) override
    {
        TORCH_CHECK(fraction > 0 && fraction <= 1, "tidepool: the memory fraction must be in (0, 1]");
        tide_status s = tide_set_limit_fraction(allocator_of(device), fraction);
        TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
        if (device >= static_cast<DeviceIndex>(fraction_.size()))
            fraction_.resize(device + 1, 1.0);
        fraction_[device] = fraction;
    }

    // -- the cache ---------------------------------------------------------------------------------
    void emptyCache(MempoolId_t /*mempool_id*/) override
    {
        TORCH_CHECK(devices, "tidepool is not enabled");
        tide_status s = tide_devices_empty_cache(devices);
        TORCH_CHECK(s == TIDE_OK, "tidepool: empty_cache: ", tide_last_error());
    }
    void cacheInfo(DeviceIndex device, size_t *largest) override
    {
        // The largest cached block, or if there is none what the device has free (cuDNN sizes its
        // workspace from it, as with PyTorch's allocator).
        size_t best = 0;
        Json snap = snapshot_of(device);
        for (auto &seg : snap["segments"].arr)
            for (auto &b : seg["blocks"].arr)
                if (b["state"].str == "cached" && b["size"].u64() > best)
                    best = b["size"].u64();
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
    std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(DeviceIndex) override { return {}; }
    void recordStream(const c10::DataPtr &ptr, c10::cuda::CUDAStream stream) override
    {
        if (!ptr.get())
            return;
        tide_status s = tide_devices_record_stream(devices, ptr.get(), reinterpret_cast<tide_stream>(stream.stream()));
        TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    }

    // -- statistics ----------------------------------------------------------------------------------
    static void set(c10::CachingAllocator::Stat &out, const tide_stat &in)
    {
        out.current = in.current;
        out.peak = in.peak;
    }
    cda::DeviceStats getDeviceStats(DeviceIndex device) override
    {
        tide_stats s = stats_of(device);
        cda::DeviceStats d;
        for (int k = 0; k < TIDE_POOL_COUNT; k++) { // tidepool's pools are PyTorch's stat types, in order
            set(d.allocation[k], s.allocation[k]);
            set(d.segment[k], s.segment[k]);
            set(d.allocated_bytes[k], s.allocated_bytes[k]);
            set(d.reserved_bytes[k], s.reserved_bytes[k]);
            set(d.active_bytes[k], s.active_bytes[k]);
            set(d.inactive_split_bytes[k], s.inactive_split_bytes[k]);
            set(d.requested_bytes[k], s.requested_bytes[k]);
            d.active[k].current = s.allocation[k].current + s.pending_free_blocks[k].current;
            d.active[k].peak = std::max(d.active[k].current, s.allocation[k].peak + s.pending_free_blocks[k].peak);
            // Accumulated counts: what tidepool counts since creation, less what was there at the last
            // resetAccumulatedStats.
            d.allocation[k].allocated = static_cast<int64_t>(alloc_count_[device_slot(device)][k]);
            d.allocation[k].freed = static_cast<int64_t>(free_count_[device_slot(device)][k]);
        }
        d.num_alloc_retries = static_cast<int64_t>(s.num_alloc_retries - base(device).num_alloc_retries);
        d.num_ooms = static_cast<int64_t>(s.num_ooms - base(device).num_ooms);
        d.num_sync_all_streams = static_cast<int64_t>(s.num_sync_all_streams - base(device).num_sync_all_streams);
        d.num_device_alloc = static_cast<int64_t>(s.num_device_alloc - base(device).num_device_alloc);
        d.num_device_free = static_cast<int64_t>(s.num_device_free - base(device).num_device_free);
        d.max_split_size = 0; // tidepool splits every block it caches (max_split_size_mb only if set)
        return d;
    }
    void resetAccumulatedStats(DeviceIndex device) override
    {
        base(device) = stats_of(device);
        size_t slot = device_slot(device);
        for (int k = 0; k < TIDE_POOL_COUNT; k++)
            alloc_count_[slot][k] = free_count_[slot][k] = 0;
    }
    void resetPeakStats(DeviceIndex device) override { tide_reset_peak_stats(allocator_of(device)); }

    // -- private pools: CUDA graphs, MemPool, cudagraph trees ----------------------------------------
    tide_pool_id pool_id_of(DeviceIndex device, MempoolId_t id, bool create)
    {
        auto key = std::make_pair(device, id);
        auto it = pools_.find(key);
        if (it != pools_.end())
            return it->second;
        TORCH_CHECK(create, "tidepool: pool (", id.first, ", ", id.second, ") was never created on device ",
                    static_cast<int>(device));
        tide_pool_id pool = 0;
        tide_status s = tide_pool_create(allocator_of(device), &pool);
        TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
        pools_[key] = pool;
        return pool;
    }
    void createOrIncrefPool(DeviceIndex device, MempoolId_t id, std::shared_ptr<cca::CUDAAllocator>) override
    {
        std::lock_guard<std::mutex> g(pool_lock_);
        auto key = std::make_pair(device, id);
        if (pools_.count(key)) {
            tide_status s = tide_pool_retain(allocator_of(device), pools_[key]);
            TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
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
        // A graph capture (the filter is a capture's) asks the device nothing a capture forbids.
        TORCH_CHECK(tide_capture_begin(allocator_of(device)) == TIDE_OK, "tidepool: ", tide_last_error());
        routes_.push_back({device, id, pool, std::move(filter)});
        routing_.store(true);
    }
    void endAllocateToPool(DeviceIndex device, MempoolId_t id) override
    {
        std::lock_guard<std::mutex> g(pool_lock_);
        for (auto it = routes_.begin(); it != routes_.end(); ++it)
            if (it->device == device && it->id == id) {
                routes_.erase(it);
                TORCH_CHECK(tide_capture_end(allocator_of(device)) == TIDE_OK, "tidepool: ", tide_last_error());
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
    void setUseOnOOM(DeviceIndex device, MempoolId_t id, bool use_on_oom) override
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
    void setNoSplit(DeviceIndex, MempoolId_t) override {}
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
        Json snap = snapshot_of(device);
        for (auto &seg : snap["segments"].arr) {
            if (seg["private_pool"].u64() != pool)
                continue;
            for (auto &b : seg["blocks"].arr) {
                if (b["state"].str != "active")
                    continue;
                if (!expected.count(reinterpret_cast<void *>(b["address"].u64())))
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
            if (r.device == device && r.filter(stream))
                return r.pool;
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
                    static_cast<int>(state->device), " set on device ", static_cast<int>(device));
        tide_allocator *t = allocator_of(device);
        cca::CheckpointDelta delta;
        size_t slot = device_slot(device);
        for (auto &b : pool_blocks(t, state->pool)) {
            void *ptr = reinterpret_cast<void *>(b.ptr);
            delta.ptrs_freed.push_back(ptr);
            free_count_[slot][TIDE_POOL_ALL]++;
            if (recording_.load(std::memory_order_relaxed))
                record_free(ptr);
        }
        tide_status s = tide_pool_restore(t, state->pool, state->blocks.data(), state->blocks.size());
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
    cca::SnapshotInfo snapshot(MempoolId_t mempool_id, bool include_traces) override
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
            Json snap = snapshot_of(d);
            std::lock_guard<std::mutex> g(history_lock_);
            for (auto &seg : snap["segments"].arr) {
                tide_pool_id pool = seg["private_pool"].u64();
                if (filter && pool != only)
                    continue;
                cda::SegmentInfo s;
                s.device = d;
                s.address = seg["address"].u64();
                s.total_size = seg["size"].u64();
                s.stream = reinterpret_cast<void *>(seg["stream"].u64());
                s.is_large = seg["pool"].str == "large";
                s.is_expandable = seg["expandable"].b;
                s.owner_private_pool_id = torch_id_of(d, pool);
                for (auto &b : seg["blocks"].arr) {
                    cda::BlockInfo bi;
                    bi.size = b["size"].u64();
                    bi.requested_size = b["requested"].u64();
                    bi.allocated = b["state"].str == "active";
                    bi.active = bi.allocated || b["state"].str == "pending_free";
                    if (bi.allocated) {
                        s.allocated_size += bi.size;
                        s.requested_size += bi.requested_size;
                        auto c = contexts_.find(reinterpret_cast<void *>(b["address"].u64()));
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
        info.config_metadata.last_allocator_settings = "tidepool";
        return info;
    }
    MempoolId_t torch_id_of(DeviceIndex device, tide_pool_id pool)
    {
        if (pool == 0)
            return {0, 0};
        std::lock_guard<std::mutex> g(pool_lock_);
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
    void recordHistory(bool enabled, cda::CreateContextFn context_recorder, size_t max_entries,
                       cda::RecordContext when, bool clear_history, const std::vector<std::string> &) override
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
        size_t slot = device_slot(device);
        if (action == cda::TraceEntry::ALLOC)
            count_alloc(slot, size);
        if (!recording_.load(std::memory_order_relaxed) && trackers_.empty())
            return;
        std::shared_ptr<c10::GatheredContext> ctx;
        if (context_recorder_ && when_ != cda::RecordContext::NEVER)
            ctx = context_recorder_();
        cda::TraceEntry e(action, device, addr, size, stream, torch_id_of(device, pool),
                          c10::getApproximateTime(), ctx);
        for (auto &tracker : trackers_)
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
    void record_free(void *ptr)
    {
        DeviceIndex device = 0;
        size_t size = 0;
        {
            std::lock_guard<std::mutex> g(history_lock_);
            auto it = sizes_.find(ptr);
            if (it != sizes_.end()) {
                device = it->second.first;
                size = it->second.second;
                sizes_.erase(it);
            }
            contexts_.erase(ptr);
        }
        std::shared_ptr<c10::GatheredContext> ctx;
        if (context_recorder_ && when_ == cda::RecordContext::ALL)
            ctx = context_recorder_();
        std::lock_guard<std::mutex> g(history_lock_);
        trace_.emplace_back(cda::TraceEntry::FREE_REQUESTED, device, reinterpret_cast<size_t>(ptr), size, nullptr,
                            MempoolId_t{0, 0}, c10::getApproximateTime(), ctx);
        while (trace_.size() > max_entries_)
            trace_.pop_front();
    }
    void count_alloc(size_t slot, size_t size)
    {
        int k = size <= (1u << 20) ? TIDE_POOL_SMALL : TIDE_POOL_LARGE;
        alloc_count_[slot][TIDE_POOL_ALL]++;
        alloc_count_[slot][k]++;
    }
    void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override
    {
        oom_observers_.push_back(std::move(observer));
    }
    void attachAllocatorTraceTracker(cda::AllocatorTraceTracker tracker) override
    {
        trackers_.push_back(std::move(tracker));
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
    std::shared_ptr<void> getIpcDevPtr(std::string text) override
    {
        cudaIpcMemHandle_t handle;
        const char *raw = text.data();
        if (text.size() == 2 + sizeof handle && text[1] == 'c')
            raw += 2;
        else
            TORCH_CHECK(text.size() == sizeof handle, "tidepool: getIpcDevPtr: not a CUDA IPC handle");
        std::memcpy(&handle, raw, sizeof handle);
        void *p = nullptr;
        C10_CUDA_CHECK(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess));
        return std::shared_ptr<void>(p, [](void *q) { (void)cudaIpcCloseMemHandle(q); });
    }

  private:
    struct Route {
        DeviceIndex device;
        MempoolId_t id;
        tide_pool_id pool;
        std::function<bool(cudaStream_t)> filter;
    };
    static constexpr size_t kDevices = 64;
    size_t device_slot(DeviceIndex d) const { return static_cast<size_t>(d) % kDevices; }
    tide_stats &base(DeviceIndex d) { return base_[device_slot(d)]; }

    bool enabled_ = true;
    std::vector<double> fraction_;
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
    tide_stats base_[kDevices] = {};
    std::atomic<uint64_t> alloc_count_[kDevices][TIDE_POOL_COUNT] = {};
    std::atomic<uint64_t> free_count_[kDevices][TIDE_POOL_COUNT] = {};
};

std::shared_ptr<TidepoolAllocator> instance;

void free_block(void *ptr)
{
    if (instance)
        instance->free_ptr(ptr);
}

void enable(const std::string &config)
{
    TORCH_CHECK(!devices, "tidepool is already PyTorch's allocator in this process");
    tide_devices *set = nullptr;
    tide_status s = tide_devices_create(config.empty() ? nullptr : config.c_str(), &set);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    devices = set;
    instance = std::make_shared<TidepoolAllocator>();
    instance->init(c10::cuda::device_count());
    // Installs it as CUDA's allocator and as c10::GetAllocator(kCUDA); refuses once CUDA is in use.
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(instance);
}

// ---- tidepool's own calls, beside torch's -----------------------------------------------------------

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

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("enable", &enable, "make tidepool PyTorch's CUDA allocator (config string, may be empty)");
    m.def("stats_json", &stats_json, "tidepool's statistics of one device, as JSON");
    m.def("check", &check, "tide_check on one device's allocator");
    m.def("set_limit", &set_limit);
    m.def("history_start", &history_start, "tide_history_start on one device's allocator");
    m.def("history_stop", &history_stop);
    m.def("annotate", &annotate, "tide_annotate on one device's allocator: a mark in its history");
    m.def("history_json", &history_json);
    m.def("snapshot_json", &snapshot_json);
    m.def("leak_report", &leak_report);
}
