// tidepool against PyTorch's CUDA caching allocator and cudaMallocAsync, in one process on the GPU.
//
//   gpu_bench micro [reps] [--only NAME]   the micro patterns (bench/micro_patterns.h), ns per
//                                    alloc+free pair (--only: one allocator; the others show 0)
//   gpu_bench turns [rounds]         the one-thread micro patterns in short turns (about a millisecond
//                                    of tidepool's), the three allocators back to back in each round,
//                                    in rotating order: the median of the rounds' time ratios with its
//                                    quartiles (default 61 rounds); then tidepool's eight threads over
//                                    one thread, likewise in turns
//   gpu_bench replay TRACE...        each trace replayed through each allocator: ns per operation,
//                                    peak reserved, peak reserved / peak live, driver calls in all the
//                                    warm passes and in those after the first (the steady state: there
//                                    should be none). The cold pass carries out the trace's empty_cache
//                                    lines; the warm passes skip them, so the first warm pass starts
//                                    from a cache those lines shaped
//   gpu_bench replay --only NAME TRACE...    only one allocator: tidepool, pytorch or cudaMallocAsync
//                                    (run it with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or
//                                    TIDEPOOL_CONF=expandable_segments:True, for those variants)
//   gpu_bench history N TRACE...     what tidepool's history costs: warm replays through tidepool with
//                                    the history off and on (a ring of N events) taking turns, one of
//                                    each per round, each after an untimed replay in its state, in one
//                                    process; medians and their ratio
//   TIDEPOOL_HISTORY=N               tidepool records a history of the last N events all along
//   GPU_BENCH_ROUNDS=N               replay: N warm passes per allocator instead of 15 (at least 2)
//
// Built by bench/build_gpu_bench.sh against the installed PyTorch (c10, c10_cuda) and CUDA runtime.
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_check.h" // CUDA_OK, shared with the GPU tests

extern "C" {
#include "micro_patterns.h"
#include "replay_pass.h"
#include "tidepool.h"
#include "tidepool_cuda.h"
#include "tidepool_bench.h"
#include "trace.h"
}

namespace {

// ---- the three allocators behind bench_allocator ----------------------------------------------------

void *torch_alloc_fn(void *, size_t size, uintptr_t stream)
{
    return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(size, reinterpret_cast<cudaStream_t>(stream));
}

void torch_free_fn(void *, void *p, size_t, uintptr_t) { c10::cuda::CUDACachingAllocator::raw_delete(p); }

void *async_alloc_fn(void *, size_t size, uintptr_t stream)
{
    void *p = nullptr;
    CUDA_OK(cudaMallocAsync(&p, size, reinterpret_cast<cudaStream_t>(stream)));
    return p;
}

void async_free_fn(void *, void *p, size_t, uintptr_t stream)
{
    CUDA_OK(cudaFreeAsync(p, reinterpret_cast<cudaStream_t>(stream)));
}

struct Allocators {
    tide_allocator *tide = nullptr;
    cudaMemPool_t pool{};
    bench_allocator tidepool{"tidepool", nullptr, bench_tide_alloc, bench_tide_free};
    bench_allocator torch{"pytorch", nullptr, torch_alloc_fn, torch_free_fn};
    bench_allocator async{"cudaMallocAsync", nullptr, async_alloc_fn, async_free_fn};
};

void setup(Allocators &a)
{
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaFree(nullptr)); // the primary context, as PyTorch would make it
    c10::cuda::CUDACachingAllocator::init(1);
    tide_backend be;
    if (tide_backend_cuda(0, &be) != TIDE_OK || tide_create(&be, nullptr, &a.tide) != TIDE_OK) {
        fprintf(stderr, "tidepool: %s\n", tide_last_error());
        exit(1);
    }
    a.tidepool.ctx = a.tide;
    if (const char *events = getenv("TIDEPOOL_HISTORY")) {
        if (tide_history_start(a.tide, strtoull(events, nullptr, 10), 0) != TIDE_OK) {
            fprintf(stderr, "tidepool: %s\n", tide_last_error());
            exit(1);
        }
        fprintf(stderr, "tidepool's history is on (%s events)\n", events);
    }
    CUDA_OK(cudaDeviceGetDefaultMemPool(&a.pool, 0));
    uint64_t keep_all = UINT64_MAX; // the driver's own caching allocator: never give memory back
    CUDA_OK(cudaMemPoolSetAttribute(a.pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
}

// ---- micro -------------------------------------------------------------------------------------------

// Eight streams for the threaded patterns, and eight tidepool allocators for the control that shares
// nothing of tidepool between threads (one allocator per thread).
struct ThreadedSetup {
    std::vector<cudaStream_t> streams = std::vector<cudaStream_t>(8);
    std::vector<uintptr_t> handles = std::vector<uintptr_t>(8);
    tide_allocator *own[8] = {};
    bench_allocator own_b[8];
    const bench_allocator *each[8];

    ThreadedSetup()
    {
        for (int i = 0; i < 8; i++) {
            CUDA_OK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
            handles[i] = reinterpret_cast<uintptr_t>(streams[i]);
            tide_backend be;
            if (tide_backend_cuda(0, &be) != TIDE_OK || tide_create(&be, nullptr, &own[i]) != TIDE_OK) {
                fprintf(stderr, "tidepool: %s\n", tide_last_error());
                exit(1);
            }
            own_b[i] = bench_tidepool("tidepool", own[i]);
            each[i] = &own_b[i];
        }
    }
    ~ThreadedSetup()
    {
        CUDA_OK(cudaDeviceSynchronize());
        for (auto t : own) {
            tide_empty_cache(t, nullptr);
            tide_destroy(t);
        }
        for (auto s : streams)
            CUDA_OK(cudaStreamDestroy(s));
    }
    ThreadedSetup(const ThreadedSetup &) = delete;
    ThreadedSetup &operator=(const ThreadedSetup &) = delete;
};

void micro(Allocators &a, int reps, const char *only)
{
    ThreadedSetup setup;
    const std::vector<uintptr_t> &handles = setup.handles;
    const bench_allocator *const *each = setup.each;
    const bench_allocator *all[3] = {&a.tidepool, &a.torch, &a.async};
    const char *patterns[] = {"same 1 MiB", "random 256B-4MiB, 64 live", "random 1MiB-256MiB, 16 live",
                              "1 thread", "2 threads", "4 threads", "8 threads",
                              "1 thread, 7 cores busy (a control)", "8 threads, an allocator each (a control)"};
    // One pattern at a time, the three allocators taking turns within each repetition, so that the
    // machine's drift over the run falls on all alike. Who goes first rotates from one repetition to
    // the next, so that none is always the one to meet a change of the machine's phase first.
    auto run = [&](int row, const bench_allocator *al) {
        switch (row) {
        case BENCH_SAME_SIZE: return bench_one_thread(row, al, 300000, handles[0]);
        case BENCH_SMALL_RANDOM: return bench_one_thread(row, al, 200000, handles[0]);
        case BENCH_LARGE_RANDOM: return bench_one_thread(row, al, 50000, handles[0]);
        case 7: return bench_threads_busy(al, 7, handles.data(), 100000);
        case 8: return al == &a.tidepool ? bench_threads_each(each, 8, handles.data(), 100000) : 0.0;
        default: return bench_threads(al, 1 << (row - 3), handles.data(), 100000);
        }
    };
    const int rows = 9;
    double result[rows][3], paired[rows][3], arithmetic[2][2][32]; // [chains: 1, 8][threads: 1, 8]
    double each_rep[rows][3][32];
    for (int row = 0; row < rows; row++) {
        double (&v)[3][32] = each_rep[row];
        for (int r = 0; r < reps; r++)
            for (int turn = 0; turn < 3; turn++) {
                int k = (r + turn) % 3;
                v[k][r] = !only || !strcmp(only, all[k]->name) ? run(row, all[k]) : 0.0;
            }
        if (row == 6) // the machine's own scaling, measured beside the threaded rows
            for (int r = 0; r < reps; r++)
                for (int wide = 0; wide < 2; wide++) {
                    arithmetic[wide][0][r] = bench_arithmetic(1, wide ? 250000 : 2000000, wide);
                    arithmetic[wide][1][r] = bench_arithmetic(8, wide ? 250000 : 2000000, wide);
                }
        CUDA_OK(cudaDeviceSynchronize());
        // Each repetition runs the three allocators back to back, so their ratio within a repetition
        // sees the same phase of the machine (which can slow everything for seconds at a time); the
        // median of those ratios is printed beside the ratio of the medians.
        for (int k = 1; k < 3; k++) {
            double ratio[32];
            for (int r = 0; r < reps; r++)
                ratio[r] = v[0][r] > 0 ? v[k][r] / v[0][r] : 0.0;
            paired[row][k] = bench_median(ratio, reps);
        }
        for (int k = 0; k < 3; k++) {
            double sorted[32];
            memcpy(sorted, v[k], sizeof sorted); // bench_median sorts; each_rep keeps the run's order
            result[row][k] = bench_median(sorted, reps);
        }
    }
    printf("| pattern (ns per alloc+free pair, median of %d) | tidepool | PyTorch | cudaMallocAsync | "
           "PyTorch / tidepool | cudaMallocAsync / tidepool | PyTorch / tidepool, median of the repetitions' "
           "ratios | cudaMallocAsync / tidepool, likewise |\n|---|---|---|---|---|---|---|---|\n", reps);
    for (int row = 0; row < rows; row++) {
        if (row == 8) {
            printf("| %s | %.1f | - | - | - | - | - | - |\n", patterns[row], result[row][0]);
            continue;
        }
        printf("| %s | %.1f | %.1f | %.1f | %.1fx | %.1fx | %.2fx | %.2fx |\n", patterns[row], result[row][0],
               result[row][1], result[row][2], result[row][1] / result[row][0], result[row][2] / result[row][0],
               paired[row][1], paired[row][2]);
    }
    int cpus[64];
    int pinned = bench_pin_cpus(cpus, 64);
    if (pinned)
        printf("\nthreads pinned, one per physical core (BENCH_PIN=1; %d cores found)", pinned);
    else
        printf("\nthreads placed by the scheduler (BENCH_PIN=1 pins them, one per physical core)");
    printf("\nthroughput with 8 threads on 8 streams, as a multiple of one thread's: tidepool %.2fx, "
           "PyTorch %.2fx, cudaMallocAsync %.2fx\n",
           result[3][0] / result[6][0], result[3][1] / result[6][1], result[3][2] / result[6][2]);
    double scale[2];
    for (int wide = 0; wide < 2; wide++)
        scale[wide] = bench_median(arithmetic[wide][0], reps) / bench_median(arithmetic[wide][1], reps);
    printf("controls: arithmetic alone (no memory, nothing shared) scales %.2fx from 1 to 8 threads on this "
           "machine now as one dependent chain a thread, %.2fx as eight chains (every ALU busy); over one "
           "thread with 7 cores busy, 8 threads give: tidepool %.2fx, PyTorch %.2fx, cudaMallocAsync %.2fx\n",
           scale[0], scale[1], result[7][0] / result[6][0], result[7][1] / result[6][1], result[7][2] / result[6][2]);
    printf("controls: tidepool with an allocator per thread gives %.2fx one thread's throughput (one shared "
           "allocator: %.2fx)\n", result[3][0] / result[8][0], result[3][0] / result[6][0]);
    // Every repetition's figures, in the order they ran, so that a change of the machine's phase
    // within the run can be seen (and the ratios above checked).
    printf("\neach repetition, ns per pair, tidepool / PyTorch / cudaMallocAsync (repetition r ran tidepool "
           "first when r %% 3 == 0, PyTorch first when 1, cudaMallocAsync first when 2):\n\n");
    for (int row = 0; row < rows; row++) {
        printf("- %s:", patterns[row]);
        for (int r = 0; r < reps; r++)
            printf(" %.1f/%.1f/%.1f", each_rep[row][0][r], each_rep[row][1][r], each_rep[row][2][r]);
        printf("\n");
    }
}

// ---- turns -------------------------------------------------------------------------------------------

// The element at quantile q of v (sorted here).
double quantile(std::vector<double> v, double q)
{
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, (size_t)(q * (double)v.size()))];
}

// The one-thread micro patterns, timed in short turns. This host switches between a fast and a slow
// phase within a second or two (docs/performance.md, How we measure), and one of micro's repetitions
// lasts long enough for a switch to fall between tidepool's turn and PyTorch's. Here each turn is a
// few thousand pairs (about a millisecond of tidepool's time, ten of PyTorch's), so that the three
// turns of a round mostly share a phase, and the median of many rounds' ratios measures the
// allocators rather than the phase. The same pairs for every allocator; who goes first rotates.
void turns(Allocators &a, int rounds)
{
    ThreadedSetup setup;
    uintptr_t handle = setup.handles[0];
    const bench_allocator *all[3] = {&a.tidepool, &a.torch, &a.async};
    const size_t pairs[BENCH_ONE_THREAD_PATTERNS] = {10000, 5000, 5000};
    printf("| pattern (%d rounds) | pairs a turn | tidepool, ns per pair (median) | PyTorch | cudaMallocAsync | "
           "PyTorch / tidepool, median of the rounds [quartiles] | cudaMallocAsync / tidepool [quartiles] |\n"
           "|---|---|---|---|---|---|---|\n", rounds);
    for (int p = 0; p < BENCH_ONE_THREAD_PATTERNS; p++) {
        for (const bench_allocator *al : all) // warm: each allocator's cache holds the pattern's blocks
            bench_one_thread(p, al, pairs[p], handle);
        std::vector<double> ns[3], ratio[3]; // ratio[k]: allocator k's time over tidepool's (k = 1, 2)
        for (int r = 0; r < rounds; r++) {
            double v[3];
            for (int turn = 0; turn < 3; turn++) {
                int k = (r + turn) % 3;
                v[k] = bench_one_thread(p, all[k], pairs[p], handle);
            }
            for (int k = 0; k < 3; k++) {
                ns[k].push_back(v[k]);
                if (k > 0)
                    ratio[k].push_back(v[k] / v[0]);
            }
        }
        printf("| %s | %zu | %.1f | %.1f | %.1f | %.2fx [%.2f, %.2f] | %.2fx [%.2f, %.2f] |\n",
               bench_one_thread_names[p], pairs[p], quantile(ns[0], 0.5), quantile(ns[1], 0.5),
               quantile(ns[2], 0.5), quantile(ratio[1], 0.5), quantile(ratio[1], 0.25), quantile(ratio[1], 0.75),
               quantile(ratio[2], 0.5), quantile(ratio[2], 0.25), quantile(ratio[2], 0.75));
        fflush(stdout);
    }

    // Eight threads on eight streams against one thread, tidepool's alone (the target is its own
    // scaling): in each round one thread, eight threads through the one allocator, and eight threads
    // each through an allocator of its own (the control, which shares nothing of tidepool), in
    // rotating order, the small random pattern throughout.
    const size_t per_thread = 20000;
    bench_threads(&a.tidepool, 8, setup.handles.data(), per_thread); // warm every stream's heap
    bench_threads_each(setup.each, 8, setup.handles.data(), per_thread);
    std::vector<double> shared, own;
    for (int r = 0; r < rounds; r++) {
        double one = 0, eight = 0, eight_own = 0;
        for (int turn = 0; turn < 3; turn++) {
            switch ((r + turn) % 3) {
            case 0: one = bench_threads(&a.tidepool, 1, setup.handles.data(), per_thread); break;
            case 1: eight = bench_threads(&a.tidepool, 8, setup.handles.data(), per_thread); break;
            default: eight_own = bench_threads_each(setup.each, 8, setup.handles.data(), per_thread); break;
            }
        }
        shared.push_back(one / eight);
        own.push_back(one / eight_own);
    }
    printf("\n| tidepool, small random pattern (%d rounds, %zu pairs a thread) | throughput of 8 threads on 8 "
           "streams over 1 thread's, median of the rounds [quartiles] |\n|---|---|\n", rounds, per_thread);
    printf("| one allocator | %.2fx [%.2f, %.2f] |\n", quantile(shared, 0.5), quantile(shared, 0.25),
           quantile(shared, 0.75));
    printf("| an allocator per thread (the control: nothing of tidepool shared) | %.2fx [%.2f, %.2f] |\n",
           quantile(own, 0.5), quantile(own, 0.25), quantile(own, 0.75));
}

// ---- replay ------------------------------------------------------------------------------------------

struct ReplayResult {
    double cold_ns_per_op;  // from an empty cache: includes the driver's cudaMalloc calls
    double warm_ns_per_op;  // again, cache kept: the allocator alone (median of the warm runs)
    double warm_best_ns_per_op; // the fastest warm run: the cost with the least interference
    uint64_t peak_reserved; // in the cold run
    int64_t warm_driver_calls; // device allocations and frees (maps and unmaps) in all warm runs; -1: not known
    int64_t steady_driver_calls; // the same in the warm runs after the first: the steady state. The first
                                 // starts from the cache the cold run left, shaped by the trace's
                                 // empty_cache lines, which the warm runs skip
};

uint64_t peak_live_of(const trace &t)
{
    std::vector<uint64_t> size(t.nallocs);
    uint64_t live = 0, peak = 0;
    for (size_t i = 0; i < t.nops; i++) {
        const trace_op &op = t.ops[i];
        if (op.kind == TRACE_ALLOC) {
            size[op.id] = op.size;
            live += op.size;
            peak = std::max(peak, live);
        } else if (op.kind == TRACE_FREE) {
            live -= size[op.id];
        }
    }
    return peak;
}

// What empty_cache means for each: every cached byte back to the device, after the device is done.
void empty_cache(Allocators &a, const bench_allocator *al)
{
    CUDA_OK(cudaDeviceSynchronize());
    if (al == &a.tidepool)
        tide_empty_cache(a.tide, nullptr);
    else if (al == &a.torch)
        c10::cuda::CUDACachingAllocator::emptyCache();
    else
        CUDA_OK(cudaMemPoolTrimTo(a.pool, 0));
}

// One pass over the trace. Its empty_cache lines are carried out only when asked: in the cold pass,
// which they shape (the peak); in the warm passes they would time the driver freeing and reserving the
// whole cache again, the same for every allocator, rather than the allocator with its cache kept.
double replay_once(Allocators &a, const bench_allocator *al, const trace &t, uintptr_t stream,
                   bool with_empty_cache)
{
    std::vector<void *> ptr(t.nallocs, nullptr);
    std::vector<size_t> size(t.nallocs, 0);
    struct EmptyCache {
        Allocators *a;
        const bench_allocator *al;
    } ec{&a, al};
    auto call = [](void *arg) {
        auto *e = static_cast<EmptyCache *>(arg);
        empty_cache(*e->a, e->al);
    };
    return bench_replay_pass(al, &t, ptr.data(), size.data(), stream, with_empty_cache ? +call : nullptr, &ec);
}

// The driver allocations and frees an allocator has made so far (with virtual memory: maps and unmaps),
// or -1 where it does not count them (cudaMallocAsync's pool). The warm passes should make none.
int64_t driver_calls(Allocators &a, const bench_allocator *al)
{
    if (al == &a.tidepool) {
        tide_stats s;
        s.struct_size = sizeof s;
        tide_get_stats(a.tide, &s);
        return (int64_t)(s.num_device_alloc + s.num_device_free);
    }
    if (al == &a.torch) {
        auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
        return stats.num_device_alloc + stats.num_device_free;
    }
    return -1;
}

// Starts an allocator empty with its peak reset and replays (cold), reading its own peak reserved.
ReplayResult replay_cold(Allocators &a, const bench_allocator *al, const trace &t)
{
    empty_cache(a, al);
    if (al == &a.tidepool) {
        tide_reset_peak_stats(a.tide);
    } else if (al == &a.torch) {
        c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    } else {
        uint64_t zero = 0;
        CUDA_OK(cudaMemPoolSetAttribute(a.pool, cudaMemPoolAttrReservedMemHigh, &zero));
    }
    ReplayResult r{};
    r.cold_ns_per_op = replay_once(a, al, t, 0, true);
    CUDA_OK(cudaDeviceSynchronize());
    if (al == &a.tidepool) {
        tide_stats s;
        s.struct_size = sizeof s;
        tide_get_stats(a.tide, &s);
        r.peak_reserved = (uint64_t)s.reserved_bytes[TIDE_POOL_ALL].peak;
    } else if (al == &a.torch) {
        r.peak_reserved = (uint64_t)c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].peak;
    } else {
        CUDA_OK(cudaMemPoolGetAttribute(a.pool, cudaMemPoolAttrReservedMemHigh, &r.peak_reserved));
    }
    return r;
}

// Each allocator cold, then warm replays (caches kept) taking turns, one of each per round, so that the
// machine's drift over the run falls on all alike: the median and the best of the rounds.
void replay_all(Allocators &a, const std::vector<const bench_allocator *> &which, const trace &t, int rounds,
                std::vector<ReplayResult> &out)
{
    out.clear();
    for (const bench_allocator *al : which)
        out.push_back(replay_cold(a, al, t));
    std::vector<std::vector<double>> times(which.size());
    std::vector<int64_t> calls_before, calls_after_first;
    for (const bench_allocator *al : which)
        calls_before.push_back(driver_calls(a, al));
    for (int r = 0; r < rounds; r++) {
        for (size_t k = 0; k < which.size(); k++)
            times[k].push_back(replay_once(a, which[k], t, 0, false));
        if (r == 0)
            for (const bench_allocator *al : which)
                calls_after_first.push_back(driver_calls(a, al));
    }
    CUDA_OK(cudaDeviceSynchronize());
    for (size_t k = 0; k < which.size(); k++) {
        out[k].warm_best_ns_per_op = *std::min_element(times[k].begin(), times[k].end());
        out[k].warm_ns_per_op = bench_median(times[k].data(), rounds);
        int64_t after = driver_calls(a, which[k]);
        out[k].warm_driver_calls = after < 0 ? -1 : after - calls_before[k];
        out[k].steady_driver_calls = after < 0 ? -1 : after - calls_after_first[k];
    }
}

// The history's cost: warm tidepool replays with the history off and on, taking turns, in one process,
// so that drift falls on both alike. Each turn first sets its state (tide_history_start makes and
// touches the ring; tide_history_stop frees it) and replays once untimed, then times a replay: what is
// compared is the steady cost of recording, not the one-time making of a ring (a ring of 65,536 events
// is 1 MiB, and writing it out evicts much of the caches right before the replay), which timing
// the first replay after a start would charge to every "on" replay. The order alternates (off
// first in even rounds, on first in odd ones), so neither setting always follows the other.
void history_cost(Allocators &a, size_t events, const trace &t, const char *name, int rounds)
{
    replay_cold(a, &a.tidepool, t);
    std::vector<double> off, on, ratio;
    auto turn = [&](bool history_on) {
        if (history_on && tide_history_start(a.tide, events, 0) != TIDE_OK) {
            fprintf(stderr, "tidepool: %s\n", tide_last_error());
            exit(1);
        }
        replay_once(a, &a.tidepool, t, 0, false);
        double ns = replay_once(a, &a.tidepool, t, 0, false);
        if (history_on)
            tide_history_stop(a.tide);
        return ns;
    };
    for (int r = 0; r < rounds; r++) {
        if (r % 2 == 0) {
            off.push_back(turn(false));
            on.push_back(turn(true));
        } else {
            on.push_back(turn(true));
            off.push_back(turn(false));
        }
        ratio.push_back(on.back() / off.back());
    }
    double best_off = *std::min_element(off.begin(), off.end());
    double best_on = *std::min_element(on.begin(), on.end());
    double m_off = bench_median(off.data(), rounds), m_on = bench_median(on.data(), rounds);
    printf("| %s | %.1f | %.1f | %+.1f%% | %+.1f%% | %.1f | %.1f | %+.1f%% |\n", name, m_off, m_on,
           100.0 * (m_on / m_off - 1), 100.0 * (bench_median(ratio.data(), rounds) - 1), best_off, best_on,
           100.0 * (best_on / best_off - 1));
    fflush(stdout);
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_bench micro [reps] [--only NAME] | turns [rounds] | replay [--only tidepool|pytorch|cudaMallocAsync] TRACE... | "
                        "history EVENTS TRACE...\n");
        return 2;
    }
    // The counts are checked before the GPU and PyTorch are set up, which takes seconds.
    bool is_micro = !strcmp(argv[1], "micro"), is_turns = !strcmp(argv[1], "turns");
    int count = argc > 2 ? atoi(argv[2]) : is_micro ? 5 : 61;
    if (is_micro && (count < 1 || count > 31)) {
        fprintf(stderr, "gpu_bench micro: repetitions must be 1 to 31, not %s\n", argv[2]);
        return 2;
    }
    if (is_turns && (count < 3 || count > 1001)) {
        fprintf(stderr, "gpu_bench turns: rounds must be 3 to 1001, not %s\n", argv[2]);
        return 2;
    }
    Allocators a;
    setup(a);
    if (is_micro) {
        micro(a, count, argc > 4 && !strcmp(argv[3], "--only") ? argv[4] : nullptr);
        return 0;
    }
    if (is_turns) {
        turns(a, count);
        return 0;
    }
    if (!strcmp(argv[1], "history") && argc > 3) {
        size_t events = strtoull(argv[2], nullptr, 10);
        const int rounds = 15;
        printf("| trace (history of %zu events) | off, ns per op (median of %d) | on | on / off, medians | "
               "median of the rounds' on / off | off, best | on, best | on / off, best |\n"
               "|---|---|---|---|---|---|---|---|\n", events, rounds);
        for (int i = 3; i < argc; i++) {
            trace t;
            char err[512];
            if (trace_load(argv[i], &t, err, sizeof err) != 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            history_cost(a, events, t, strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i], rounds);
            trace_free(&t);
        }
        return 0;
    }
    const char *only = argc > 3 && !strcmp(argv[2], "--only") ? argv[3] : nullptr;
    if (only && !strcmp(only, "torch"))
        only = "pytorch";
    const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF"), *tide_conf = getenv("TIDEPOOL_CONF");
    // GPU_BENCH_ROUNDS: fewer warm passes for long traces (the workload suite's run to millions of
    // operations); at least 2, so that there are warm passes after the first.
    const char *rounds_text = getenv("GPU_BENCH_ROUNDS");
    const int rounds = rounds_text ? std::max(2, std::min(1000, atoi(rounds_text))) : 15;
    printf("| trace | allocator | ns per op, warm (median of %d) | warm, best | ns per op, cold | "
           "peak reserved MiB | peak reserved / peak live | driver calls, all warm passes | "
           "driver calls, warm passes 2-%d |\n"
           "|---|---|---|---|---|---|---|---|---|\n", rounds, rounds);
    for (int i = only ? 4 : 2; i < argc; i++) {
        trace t;
        char err[512];
        if (trace_load(argv[i], &t, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        uint64_t live = peak_live_of(t);
        const char *name = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
        std::vector<const bench_allocator *> which;
        for (const bench_allocator *al : {&a.tidepool, &a.torch, &a.async})
            if (!only || !strcmp(only, al->name))
                which.push_back(al);
        if (which.empty()) {
            fprintf(stderr, "gpu_bench: --only %s: no such allocator\n", only);
            return 2;
        }
        std::vector<ReplayResult> results;
        replay_all(a, which, t, rounds, results);
        for (size_t k = 0; k < which.size(); k++) {
            const bench_allocator *al = which[k];
            const ReplayResult &r = results[k];
            std::string label = al->name;
            if (al == &a.torch && conf && *conf)
                label += std::string(" (") + conf + ")";
            if (al == &a.tidepool && tide_conf && *tide_conf)
                label += std::string(" (") + tide_conf + ")";
            char calls[32] = "-", steady[32] = "-";
            if (r.warm_driver_calls >= 0) {
                snprintf(calls, sizeof calls, "%lld", (long long)r.warm_driver_calls);
                snprintf(steady, sizeof steady, "%lld", (long long)r.steady_driver_calls);
            }
            printf("| %s | %s | %.1f | %.1f | %.1f | %.1f | %.3f | %s | %s |\n", name, label.c_str(),
                   r.warm_ns_per_op, r.warm_best_ns_per_op, r.cold_ns_per_op, r.peak_reserved / 1048576.0,
                   (double)r.peak_reserved / (double)live, calls, steady);
        }
        fflush(stdout);
        trace_free(&t);
    }
    return 0;
}
