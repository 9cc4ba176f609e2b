// tidepool as PyTorch's CUDA allocator.
//
// PyTorch's CUDAPluggableAllocator takes alloc and free functions from Python, but the hooks that make
// an allocator complete (empty_cache, record_stream, set_per_process_memory_fraction) can only be set
// from C++, and only C++ can raise torch.cuda.OutOfMemoryError from inside an allocation. This file
// sets them all. tidepool.torch compiles it on first use with PyTorch's own extension builder and
// links it against libtidepool; users never build it by hand.
#include <torch/extension.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <memory>
#include <string>

#include "tidepool.h"
#include "tidepool_cuda.h"

namespace {

namespace pluggable = torch::cuda::CUDAPluggableAllocator;

tide_devices *devices = nullptr;

void *tidepool_alloc(size_t size, int device, cudaStream_t stream)
{
    if (size == 0)
        return nullptr; // as PyTorch's own allocator does; freeing nullptr is a no-op
    void *p = nullptr;
    tide_status s = tide_devices_malloc(devices, device, size, reinterpret_cast<tide_stream>(stream), &p);
    if (s == TIDE_ENOMEM)
        TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (tidepool). ", tide_last_error());
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    return p;
}

void tidepool_free(void *ptr, size_t /*size*/, int device, cudaStream_t /*stream*/)
{
    // A deleter must not throw: a failure here is a bug worth a loud warning, not a crash.
    if (tide_devices_free(devices, device, ptr) != TIDE_OK)
        TORCH_WARN("tidepool: ", tide_last_error());
}

tide_allocator *allocator_of(int device)
{
    tide_allocator *t = nullptr;
    TORCH_CHECK(devices, "tidepool is not enabled: call tidepool.torch.enable() first");
    tide_status s = tide_devices_get(devices, device, &t);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    return t;
}

void enable(const std::string &config)
{
    TORCH_CHECK(!devices, "tidepool is already PyTorch's allocator in this process");
    tide_devices *set = nullptr;
    tide_status s = tide_devices_create(config.empty() ? nullptr : config.c_str(), &set);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    devices = set;

    auto base = pluggable::createCustomAllocator(tidepool_alloc, tidepool_free);
    auto allocator = std::dynamic_pointer_cast<pluggable::CUDAPluggableAllocator>(base);
    TORCH_CHECK(allocator, "tidepool: PyTorch's custom allocator is not a CUDAPluggableAllocator");
    allocator->set_reset_fn([] {
        if (tide_devices_empty_cache(devices) != TIDE_OK)
            TORCH_WARN("tidepool: empty_cache: ", tide_last_error());
    });
    allocator->set_record_stream_fn([](void *ptr, cudaStream_t stream) {
        tide_status st = tide_devices_record_stream(devices, ptr, reinterpret_cast<tide_stream>(stream));
        TORCH_CHECK(st == TIDE_OK, "tidepool: ", tide_last_error());
    });
    allocator->set_memory_fraction_fn([](double fraction, int device) {
        tide_status st = tide_set_limit_fraction(allocator_of(device), fraction);
        TORCH_CHECK(st == TIDE_OK, "tidepool: ", tide_last_error());
    });
    pluggable::changeCurrentAllocator(base);
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

void reset_peak_stats(int device) { tide_reset_peak_stats(allocator_of(device)); }

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

void empty_cache()
{
    TORCH_CHECK(devices, "tidepool is not enabled: call tidepool.torch.enable() first");
    tide_status s = tide_devices_empty_cache(devices);
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
}

// A text tidepool allocated (JSON or a report), as a std::string.
std::string take_text(tide_status s, char *text)
{
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
    std::string out(text);
    tide_string_free(text);
    return out;
}

void history_start(int device, int64_t capacity, bool stacks, bool ordered)
{
    TORCH_CHECK(capacity > 0, "tidepool: the history needs room for at least one event");
    tide_status s = tide_history_start(allocator_of(device), static_cast<size_t>(capacity),
                                       (stacks ? TIDE_HISTORY_STACKS : 0) | (ordered ? TIDE_HISTORY_ORDERED : 0));
    TORCH_CHECK(s == TIDE_OK, "tidepool: ", tide_last_error());
}

void history_stop(int device) { tide_history_stop(allocator_of(device)); }

std::string history_json(int device)
{
    char *text = nullptr;
    tide_status s = tide_history_json(allocator_of(device), &text);
    return take_text(s, text);
}

std::string snapshot_json(int device)
{
    char *text = nullptr;
    tide_status s = tide_snapshot_json(allocator_of(device), &text);
    return take_text(s, text);
}

std::string leak_report(int device)
{
    char *text = nullptr;
    tide_status s = tide_leak_report(allocator_of(device), &text, nullptr);
    return take_text(s, text);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("enable", &enable, "make tidepool the CUDA allocator (config string, may be empty)");
    m.def("stats_json", &stats_json, "statistics of one device's allocator, as JSON");
    m.def("reset_peak_stats", &reset_peak_stats);
    m.def("check", &check, "tide_check on one device's allocator");
    m.def("set_limit", &set_limit);
    m.def("empty_cache", &empty_cache);
    m.def("history_start", &history_start, "tide_history_start on one device's allocator");
    m.def("history_stop", &history_stop);
    m.def("history_json", &history_json);
    m.def("snapshot_json", &snapshot_json);
    m.def("leak_report", &leak_report);
}
