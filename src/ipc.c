/*
 * Openings of other processes' device memory (tide_ipc_open, tide_ipc_close): one per handle,
 * counted by its uses, so that the backend is asked to open a handle once and to close it with its
 * last use (tidepool.h, Memory of another process).
 *
 * A process holds few such openings (one per segment of each sender), and opening one costs a
 * driver call, so the table is a plain array searched from end to end under a lock of its own. The
 * lock is held across the backend's calls: released there, two threads opening one handle would
 * both ask the driver, and the second would fail. It is a leaf: no other lock of the allocator is
 * taken under it, and it is taken under none.
 */
#include "internal.h"
#include "hot_path.h"

#include <stdlib.h>
#include <string.h>

struct ipc_opening {
    uintptr_t addr;                   /* where the backend mapped it */
    uint32_t uses;                    /* tide_ipc_open calls not yet closed, at least 1 */
    uint32_t len;
    unsigned char handle[TIDE_IPC_HANDLE_MAX];
};

static bool backend_has_ipc(const tide_allocator *t)
{
    /* tide_create copied only what the caller's table held (struct_size) and zeroed the rest, so a
     * table from before these calls reads as one without them. */
    return t->backend.ipc_open && t->backend.ipc_close;
}

static struct ipc_opening *find_handle(tide_allocator *t, const void *handle, size_t len)
{
    for (size_t i = 0; i < t->nipc; i++)
        if (t->ipc[i].len == len && memcmp(t->ipc[i].handle, handle, len) == 0)
            return &t->ipc[i];
    return NULL;
}

static struct ipc_opening *find_addr(tide_allocator *t, uintptr_t addr)
{
    for (size_t i = 0; i < t->nipc; i++)
        if (t->ipc[i].addr == addr)
            return &t->ipc[i];
    return NULL;
}

/* Room for one more opening, made before the backend is asked, so that an opening it made can always
 * be recorded. */
static tide_status reserve_slot(tide_allocator *t)
{
    if (t->nipc < t->ipc_cap)
        return TIDE_OK;
    struct ipc_opening *grown = grow_table(t->ipc, &t->ipc_cap, sizeof *grown, 8);
    if (!grown)
        return tide__fail(TIDE_EHOSTMEM, "tide_ipc_open: out of host memory for the table of openings");
    t->ipc = grown;
    return TIDE_OK;
}

tide_status tide_ipc_open(tide_allocator *t, const void *handle, size_t handle_len, void **ptr)
{
    if (ptr)
        *ptr = NULL;
    CHECK_ALLOCATOR(t);
    if (!ptr)
        return tide__fail(TIDE_EINVAL, "tide_ipc_open: ptr is NULL");
    if (!handle)
        return tide__fail(TIDE_EINVAL, "tide_ipc_open: the handle is NULL");
    if (handle_len == 0 || handle_len > TIDE_IPC_HANDLE_MAX)
        return tide__fail(TIDE_EINVAL, "tide_ipc_open: a handle of %zu bytes (1 to %d: a CUDA handle is 64)",
                          handle_len, TIDE_IPC_HANDLE_MAX);
    if (!backend_has_ipc(t))
        return tide__fail(TIDE_EUNSUPPORTED, "tide_ipc_open: the %s backend cannot open memory of another "
                          "process (its table has no ipc_open and ipc_close)", t->backend.name);
    pthread_mutex_lock(&t->ipc_lock);
    tide_status s = TIDE_OK;
    struct ipc_opening *o = find_handle(t, handle, handle_len);
    if (o) {
        if (o->uses == UINT32_MAX)
            s = tide__fail(TIDE_EINVAL, "tide_ipc_open: this handle is open %u times already, the most "
                           "tidepool counts", o->uses);
        else {
            o->uses++;
            *ptr = (void *)o->addr;
        }
        pthread_mutex_unlock(&t->ipc_lock);
        return s;
    }
    if ((s = reserve_slot(t)) != TIDE_OK) {
        pthread_mutex_unlock(&t->ipc_lock);
        return s;
    }
    uintptr_t addr = 0;
    tide__clear_backend_message();
    s = t->backend.ipc_open(t->backend.ctx, handle, handle_len, &addr);
    if (s != TIDE_OK) {
        pthread_mutex_unlock(&t->ipc_lock);
        return tide__fail_with_context(s, "tide_ipc_open: the %s device could not open the handle",
                                       t->backend.name);
    }
    if (find_addr(t, addr)) {
        /* Two handles at one address: the backend is wrong, and closing either would unmap both. */
        t->backend.ipc_close(t->backend.ctx, addr);
        pthread_mutex_unlock(&t->ipc_lock);
        return tide__fail(TIDE_EDEVICE, "tide_ipc_open: the %s device opened a handle at 0x%llx, where "
                          "another handle is open already; closed it again", t->backend.name,
                          (unsigned long long)addr);
    }
    o = &t->ipc[t->nipc++];
    o->addr = addr;
    o->uses = 1;
    o->len = (uint32_t)handle_len;
    memcpy(o->handle, handle, handle_len);
    *ptr = (void *)addr;
    pthread_mutex_unlock(&t->ipc_lock);
    return TIDE_OK;
}

tide_status tide_ipc_close(tide_allocator *t, void *ptr)
{
    CHECK_ALLOCATOR(t);
    pthread_mutex_lock(&t->ipc_lock);
    struct ipc_opening *o = find_addr(t, (uintptr_t)ptr);
    if (!o) {
        pthread_mutex_unlock(&t->ipc_lock);
        return tide__fail(TIDE_EINVAL, "tide_ipc_close of %p: no opening of another process's memory is "
                          "there (never opened by tide_ipc_open, or closed as many times as it was "
                          "opened)", ptr);
    }
    if (o->uses > 1) {
        o->uses--;
        pthread_mutex_unlock(&t->ipc_lock);
        return TIDE_OK;
    }
    tide__clear_backend_message();
    tide_status s = t->backend.ipc_close(t->backend.ctx, o->addr);
    if (s != TIDE_OK) { /* it stays open, with its one use, for a later close or tide_destroy */
        pthread_mutex_unlock(&t->ipc_lock);
        return tide__fail_with_context(s, "tide_ipc_close of %p: the %s device could not close it (it "
                                       "stays open: close it again, or tide_destroy will)", ptr,
                                       t->backend.name);
    }
    *o = t->ipc[--t->nipc];
    pthread_mutex_unlock(&t->ipc_lock);
    return TIDE_OK;
}

size_t ipc_close_all(tide_allocator *t, size_t *refused)
{
    size_t open = t->nipc;
    *refused = 0;
    for (size_t i = 0; i < t->nipc; i++)
        if (t->backend.ipc_close(t->backend.ctx, t->ipc[i].addr) != TIDE_OK)
            (*refused)++;
    free(t->ipc);
    t->ipc = NULL;
    t->nipc = t->ipc_cap = 0;
    return open;
}
