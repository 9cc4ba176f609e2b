/*
 * One allocator per CUDA device, created on first use: what PyTorch's and CuPy's allocator hooks need,
 * since they pass a device index with every call.
 */
#include "internal.h"
#include "hot_path.h"
#include "tidepool_cuda.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEVICES 64

struct tide_devices {
    pthread_mutex_t lock;                 /* serializes creation */
    char *config;
    bool peer_access;                     /* config key peer_access */
    _Atomic(tide_allocator *) per_device[MAX_DEVICES];
    uint32_t forks;                       /* process_forks when made (see forked) */
    int pid;
};

/* Whether set is a child's copy of its parent's (a fork). Then every call fails at once, before it
 * takes the lock, which a thread of the parent may have held at the fork (refuse_forked). */
static bool forked(const tide_devices *set) { return TIDE_UNLIKELY(set->forks != forks_now()); }

static tide_status refuse_forked(const tide_devices *set, const char *call)
{
    return tide__fail(TIDE_EINVAL, "%s: this set of allocators was made in process %d, and this process "
                      "(%d) is a child forked from it: a child cannot use its parent's device memory (a "
                      "CUDA context does not survive a fork). Create a new set in the child; "
                      "tide_devices_destroy of this one frees nothing and returns", call, set->pid,
                      (int)getpid());
}

tide_status tide_devices_create(const char *config, tide_devices **out)
{
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_devices_create: out is NULL");
    *out = NULL;
    /* Check the config now, so a bad one fails here and not at the first allocation. */
    struct tide_config c;
    tide_status s = config_load(&c, config, "config");
    if (s == TIDE_OK) /* what tide_create decides without a backend (each device's is CUDA's) */
        s = config_accept(&c, NULL, "config");
    if (s != TIDE_OK)
        return s;
    tide_devices *set = calloc(1, sizeof *set);
    if (!set || (config && !(set->config = strdup(config)))) {
        free(set);
        return tide__fail(TIDE_EHOSTMEM, "tide_devices_create: out of host memory");
    }
    pthread_mutex_init(&set->lock, NULL);
    set->peer_access = c.peer_access;
    set->forks = forks_now();
    set->pid = (int)getpid();
    *out = set;
    return TIDE_OK;
}

tide_status tide_devices_destroy(tide_devices *set)
{
    if (!set)
        return TIDE_OK;
    if (forked(set)) /* the parent's: left as it is (see tide_destroy) */
        return TIDE_OK;
    tide_status first = TIDE_OK;
    for (int i = 0; i < MAX_DEVICES; i++) {
        tide_status s = tide_destroy(atomic_load(&set->per_device[i]));
        if (s != TIDE_OK && first == TIDE_OK)
            first = s;
    }
    pthread_mutex_destroy(&set->lock);
    free(set->config);
    free(set);
    return first;
}

tide_status tide_devices_get(tide_devices *set, int device, tide_allocator **out)
{
    if (!set || !out)
        return tide__fail(TIDE_EINVAL, "tide_devices_get: set or out is NULL");
    if (forked(set))
        return refuse_forked(set, "tide_devices_get");
    if (device < 0 || device >= MAX_DEVICES)
        return tide__fail(TIDE_EINVAL, "tide_devices_get: device %d is not between 0 and %d", device,
                          MAX_DEVICES - 1);
    tide_allocator *t = atomic_load_explicit(&set->per_device[device], memory_order_acquire);
    if (t) {
        *out = t;
        return TIDE_OK;
    }
    tide_status s = TIDE_OK;
    pthread_mutex_lock(&set->lock);
    t = atomic_load(&set->per_device[device]);
    if (!t) {
        tide_backend be;
        int peers[TIDE_CUDA_MAX_PEERS], npeers = 0;
        if (set->peer_access && (npeers = cuda_peers_of(device, peers, TIDE_CUDA_MAX_PEERS)) < 0)
            npeers = 0;
        s = tide_backend_cuda_peers(device, peers, npeers, &be);
        if (s == TIDE_OK) {
            s = tide_create(&be, set->config, &t);
            if (s != TIDE_OK)
                tide_backend_close(&be);
            else
                atomic_store_explicit(&set->per_device[device], t, memory_order_release);
        }
    }
    pthread_mutex_unlock(&set->lock);
    *out = t;
    return s;
}

tide_status tide_devices_malloc(tide_devices *set, int device, size_t size, tide_stream stream, void **out)
{
    tide_allocator *t;
    tide_status s = set && forked(set) ? refuse_forked(set, "tide_devices_malloc")
                                       : tide_devices_get(set, device, &t);
    if (s != TIDE_OK) {
        if (out)
            *out = NULL;
        return s;
    }
    return allocator_malloc(t, size, stream, out, __builtin_return_address(0));
}

/* The allocator whose segments hold ptr, or NULL. */
static tide_allocator *owner_of(tide_devices *set, void *ptr)
{
    for (int i = 0; i < MAX_DEVICES; i++) {
        tide_allocator *t = atomic_load_explicit(&set->per_device[i], memory_order_acquire);
        if (t && segment_map_find(&t->segmap, (uintptr_t)ptr))
            return t;
    }
    return NULL;
}

tide_status tide_devices_free(tide_devices *set, int device, void *ptr)
{
    if (!set)
        return tide__fail(TIDE_EINVAL, "tide_devices_free: set is NULL");
    if (forked(set))
        return refuse_forked(set, "tide_devices_free");
    if (!ptr)
        return TIDE_OK;
    tide_allocator *t = NULL;
    if (device >= 0 && device < MAX_DEVICES)
        t = atomic_load_explicit(&set->per_device[device], memory_order_acquire);
    if (!t || !segment_map_find(&t->segmap, (uintptr_t)ptr))
        t = owner_of(set, ptr);
    if (!t)
        return tide__fail(TIDE_EINVAL, "tide_free of %p, which no device's allocator owns", ptr);
    return tide_free(t, ptr);
}

tide_status tide_devices_record_stream(tide_devices *set, void *ptr, tide_stream stream)
{
    if (!set)
        return tide__fail(TIDE_EINVAL, "tide_devices_record_stream: set is NULL");
    if (forked(set))
        return refuse_forked(set, "tide_devices_record_stream");
    tide_allocator *t = owner_of(set, ptr);
    if (!t)
        return tide__fail(TIDE_EINVAL, "tide_record_stream of %p, which no device's allocator owns",
                          ptr);
    return tide_record_stream(t, ptr, stream);
}

tide_status tide_devices_empty_cache(tide_devices *set)
{
    if (!set)
        return tide__fail(TIDE_EINVAL, "tide_devices_empty_cache: set is NULL");
    if (forked(set))
        return refuse_forked(set, "tide_devices_empty_cache");
    tide_status first = TIDE_OK;
    for (int i = 0; i < MAX_DEVICES; i++) {
        tide_allocator *t = atomic_load_explicit(&set->per_device[i], memory_order_acquire);
        if (!t)
            continue;
        tide_status s = tide_empty_cache(t, NULL);
        if (s != TIDE_OK && first == TIDE_OK)
            first = s;
    }
    return first;
}

void *tide_cupy_malloc(void *param, size_t size, int device)
{
    void *p = NULL;
    if (tide_devices_malloc(param, device, size, 0, &p) != TIDE_OK)
        return NULL;
    return p;
}

void tide_cupy_free(void *param, void *ptr, int device)
{
    if (tide_devices_free(param, device, ptr) != TIDE_OK)
        fprintf(stderr, "tidepool: %s\n", tide_last_error());
}
