/*
 * tidepool: the CUDA backend, and one allocator per CUDA device (tide_devices) with the hooks
 * CuPy calls. The allocator's manual is tidepool.h.
 */
#ifndef TIDEPOOL_CUDA_H
#define TIDEPOOL_CUDA_H

#include "tidepool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------ */
/* CUDA                                                                                              */
/* ------------------------------------------------------------------------------------------------ */
/*
 * The CUDA backend uses the driver API, loaded at run time: libtidepool needs no CUDA to build or
 * link, and these calls return TIDE_EUNSUPPORTED (with the reason) where there is no driver. Memory
 * comes from cuMemAlloc in the device's primary context, the one the CUDA runtime uses, so tidepool
 * works beside PyTorch, CuPy and any runtime-API code on the same device. Fences are CUDA events
 * (timing disabled), created once and reused. Driver errors come back as status codes with the
 * driver's own error name in the message.
 */

/* The number of CUDA devices. */
TIDE_API tide_status tide_cuda_device_count(int *out);

/* A backend for CUDA device `device`. Pass it to tide_create, which takes it over; or give it back
 * with tide_backend_close. */
TIDE_API tide_status tide_backend_cuda(int device, tide_backend *out);

/* The same, with peer access: memory mapped for expandable segments (expandable_segments:True) is
 * readable and writable by each of the npeers devices in peers too (at most TIDE_CUDA_MAX_PEERS, each
 * able to access this device's memory: cuDeviceCanAccessPeer). Without expandable segments, peer
 * access is the CUDA runtime's business (cudaDeviceEnablePeerAccess), as for any cuMemAlloc memory. */
#define TIDE_CUDA_MAX_PEERS 16
TIDE_API tide_status tide_backend_cuda_peers(int device, const int *peers, int npeers, tide_backend *out);

/* One allocator per CUDA device, each created on first use with the same config: what a framework
 * that allocates on several devices needs. Any thread may call these. */
typedef struct tide_devices tide_devices;

TIDE_API tide_status tide_devices_create(const char *config, tide_devices **out);
/* Destroys every allocator (see tide_destroy), then the set. */
TIDE_API tide_status tide_devices_destroy(tide_devices *set);
/* The allocator of device (created now if needed). */
TIDE_API tide_status tide_devices_get(tide_devices *set, int device, tide_allocator **out);
TIDE_API tide_status tide_devices_malloc(tide_devices *set, int device, size_t size, tide_stream stream,
                                         void **out);
/* Frees ptr, allocated on device. If device is -1, or ptr is not device's, the owner is looked up. */
TIDE_API tide_status tide_devices_free(tide_devices *set, int device, void *ptr);
/* tide_record_stream on whichever device's allocator owns ptr. */
TIDE_API tide_status tide_devices_record_stream(tide_devices *set, void *ptr, tide_stream stream);
/* tide_empty_cache on every device's allocator; the first failure is returned. */
TIDE_API tide_status tide_devices_empty_cache(tide_devices *set);

/* CuPy's CFunctionAllocator calls these (param is a tide_devices *). CuPy passes no stream: every
 * block counts as allocated on the legacy default stream. malloc returns NULL on failure, with the
 * message in tide_last_error(). */
TIDE_API void *tide_cupy_malloc(void *param, size_t size, int device);
TIDE_API void tide_cupy_free(void *param, void *ptr, int device);

#ifdef __cplusplus
}
#endif

#endif /* TIDEPOOL_CUDA_H */
