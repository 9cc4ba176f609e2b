/*
 * Statistics. Each heap keeps its own counters under its own lock (so the fast path shares nothing
 * between streams); tide_get_stats sums them. Reserved memory changes only under the pressure lock, so
 * its total and peak are kept exactly there. What each statistic gained since the last reset is kept
 * per heap and pool (struct stat_gains); what it lost is worked out here, from the gains and the
 * values at the reset.
 */
#include "internal.h"
#include "stats_events.h"

#include <string.h>

static void reset_counter(struct counter *c) { c->peak = c->cur; }

static int64_t at_least(int64_t peak, int64_t value) { return value > peak ? value : peak; }

static void add_stat(tide_stat *out, int64_t cur, int64_t peak)
{
    out->current += cur;
    out->peak += peak;
}

void heap_stats_reset_peaks(struct heap_stats *s)
{
    for (int i = 0; i < TIDE_POOL_COUNT; i++) {
        struct pool_stats *p = &s->pool[i];
        struct counter *all[] = {&p->reserved, &p->allocated, &p->requested, &p->pending,
                                 &p->allocation, &p->segment, &p->pending_blocks, &p->asleep,
                                 &p->offloaded, &p->split_blocks};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            reset_counter(all[k]);
        p->active_peak = pool_active(p);
        p->cached_peak = pool_cached(p);
        p->inactive_split_peak = pool_inactive_split(p);
    }
    reset_counter(&s->oversize.blocks);
    reset_counter(&s->oversize.segments);
}

void stats_reset_accumulated_locked(tide_allocator *t)
{
    uint32_t nheaps = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < nheaps; i++) {
        struct heap_stats *hs = &t->heaps[i]->stats;
        for (int k = 0; k < TIDE_POOL_COUNT; k++) {
            memset(&hs->pool[k].gained, 0, sizeof hs->pool[k].gained);
            hs->base[k] = stats_values(&hs->pool[k]);
        }
        hs->oversize.blocks_gained = hs->oversize.segments_gained = 0;
        hs->oversize.blocks_base = hs->oversize.blocks.cur;
        hs->oversize.segments_base = hs->oversize.segments.cur;
        hs->num_pending_drained = hs->num_fence_errors = 0;
    }
    t->num_alloc_retries = t->num_ooms = t->num_device_alloc = t->num_device_free = 0;
    t->num_sync_all_streams = t->num_gc_released = 0;
    t->device_call_ns = 0;
}

/* One pool's gained and the value it moved since the reset, added to out and to the total. */
static void add_accumulated(tide_stat_accumulated *out, int k, int64_t gained, int64_t now, int64_t base)
{
    tide_stat_accumulated *both[] = {&out[k], &out[TIDE_POOL_ALL]};
    for (int i = 0; i < 2; i++) {
        both[i]->allocated += gained;
        both[i]->freed += gained - (now - base);
    }
}

/* A heap's accumulated statistics, added to s (the pools' gains are kept where the events were). */
static void collect_accumulated(const struct heap_stats *hs, tide_stats *s)
{
    for (int k = TIDE_POOL_SMALL; k <= TIDE_POOL_LARGE; k++) {
        const struct pool_stats *p = &hs->pool[k];
        const struct stat_gains *g = &p->gained;
        struct stat_values v = stats_values(p), b = hs->base[k];
        add_accumulated(s->accumulated.allocation, k, g->blocks, v.allocation, b.allocation);
        add_accumulated(s->accumulated.active, k, g->blocks, v.active, b.active);
        add_accumulated(s->accumulated.allocated_bytes, k, g->bytes, v.allocated, b.allocated);
        add_accumulated(s->accumulated.active_bytes, k, g->bytes, v.active_bytes, b.active_bytes);
        add_accumulated(s->accumulated.requested_bytes, k, g->requested, v.requested, b.requested);
        add_accumulated(s->accumulated.reserved_bytes, k, g->reserved, v.reserved, b.reserved);
        add_accumulated(s->accumulated.segment, k, g->segments, v.segment, b.segment);
        add_accumulated(s->accumulated.inactive_split_bytes, k, g->split, v.split, b.split);
        add_accumulated(s->accumulated_inactive_split, k, g->split_blocks, v.split_blocks, b.split_blocks);
    }
    const struct oversize_stats *o = &hs->oversize;
    s->accumulated.oversize_allocations.allocated += o->blocks_gained;
    s->accumulated.oversize_allocations.freed += o->blocks_gained - (o->blocks.cur - o->blocks_base);
    s->accumulated.oversize_segments.allocated += o->segments_gained;
    s->accumulated.oversize_segments.freed += o->segments_gained - (o->segments.cur - o->segments_base);
    add_stat(&s->oversize_allocations, o->blocks.cur, o->blocks.peak);
    add_stat(&s->oversize_segments, o->segments.cur, o->segments.peak);
}

void stats_collect_locked(tide_allocator *t, tide_stats *out)
{
    tide_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = out->struct_size;
    s.version = TIDE_STATS_VERSION;
    uint32_t nheaps = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < nheaps; i++) {
        const struct heap_stats *hs = &t->heaps[i]->stats;
        for (int k = 0; k < TIDE_POOL_COUNT; k++) {
            const struct pool_stats *p = &hs->pool[k];
            /* A sleeping pool's pages are not reserved (sleep.c); its blocks count as before. */
            add_stat(&s.reserved_bytes[k], p->reserved.cur - p->asleep.cur, p->reserved.peak);
            add_stat(&s.asleep_bytes[k], p->asleep.cur, p->asleep.peak);
            add_stat(&s.offloaded_bytes[k], p->offloaded.cur, p->offloaded.peak);
            add_stat(&s.allocated_bytes[k], p->allocated.cur, p->allocated.peak);
            add_stat(&s.requested_bytes[k], p->requested.cur, p->requested.peak);
            add_stat(&s.active_bytes[k], pool_active(p), p->active_peak);
            add_stat(&s.pending_free_bytes[k], p->pending.cur, p->pending.peak);
            /* (See drained_unsettled: another thread's tide_malloc is between its drain and its fit.) */
            bool mid = hs->drained_unsettled;
            add_stat(&s.cached_bytes[k], pool_cached(p), mid ? at_least(p->cached_peak, pool_cached(p))
                                                              : p->cached_peak);
            add_stat(&s.inactive_split_bytes[k], pool_inactive_split(p),
                     mid ? at_least(p->inactive_split_peak, pool_inactive_split(p)) : p->inactive_split_peak);
            add_stat(&s.inactive_split[k], p->split_blocks.cur,
                     mid ? at_least(p->split_blocks.peak, p->split_blocks.cur) : p->split_blocks.peak);
            add_stat(&s.allocation[k], p->allocation.cur, p->allocation.peak);
            add_stat(&s.segment[k], p->segment.cur, p->segment.peak);
            add_stat(&s.pending_free_blocks[k], p->pending_blocks.cur, p->pending_blocks.peak);
            add_stat(&s.active[k], p->allocation.cur + p->pending_blocks.cur,
                     p->allocation.peak + p->pending_blocks.peak);
        }
        collect_accumulated(hs, &s);
        s.num_pending_drained += hs->num_pending_drained;
        s.num_fence_errors += hs->num_fence_errors;
    }
    /* The total reserved is kept exactly under the pressure lock, whatever the number of streams. */
    s.reserved_bytes[TIDE_POOL_ALL].current = (int64_t)t->reserved;
    s.reserved_bytes[TIDE_POOL_ALL].peak = (int64_t)t->reserved_peak;
    s.num_alloc_retries = t->num_alloc_retries;
    s.num_ooms = t->num_ooms;
    s.num_device_alloc = t->num_device_alloc;
    s.num_device_free = t->num_device_free;
    s.num_sync_all_streams = t->num_sync_all_streams;
    s.num_gc_released = t->num_gc_released;
    s.device_call_ns = t->device_call_ns;
    s.sleep_host_cached_bytes = t->sleep_host_cached;
    s.limit_bytes = t->limit;
    s.gc_threshold_bytes = t->gc_threshold;
    s.device_total_bytes = t->device_total;
    s.num_streams = nheaps;

    size_t n = out->struct_size < sizeof s ? out->struct_size : sizeof s;
    memcpy(out, &s, n);
}

/* ---- JSON ------------------------------------------------------------------------------------------- */

struct json_out {
    char *buf;
    size_t cap, len;
    bool first;
};

/* One "key": value line; the value is already in words, so that an int64_t statistic and a uint64_t
 * count each print in their own type (a uint64_t through long long printed 2^63 and up as negative). */
static void emit(struct json_out *o, const char *key, const char *sub, const char *leaf, const char *value)
{
    char line[160];
    int n;
    if (sub)
        n = snprintf(line, sizeof line, "%s\n  \"%s.%s.%s\": %s", o->first ? "" : ",", key, sub, leaf, value);
    else if (leaf)
        n = snprintf(line, sizeof line, "%s\n  \"%s.%s\": %s", o->first ? "" : ",", key, leaf, value);
    else
        n = snprintf(line, sizeof line, "%s\n  \"%s\": %s", o->first ? "" : ",", key, value);
    o->first = false;
    for (int i = 0; i < n; i++, o->len++)
        if (o->len + 1 < o->cap)
            o->buf[o->len] = line[i];
}

static void emit_signed(struct json_out *o, const char *key, const char *sub, const char *leaf, int64_t v)
{
    char value[24];
    snprintf(value, sizeof value, "%lld", (long long)v);
    emit(o, key, sub, leaf, value);
}

static void emit_unsigned(struct json_out *o, const char *key, uint64_t v)
{
    char value[24];
    snprintf(value, sizeof value, "%llu", (unsigned long long)v);
    emit(o, key, NULL, NULL, value);
}

size_t stats_to_json(const tide_stats *s, char *buf, size_t cap)
{
    static const char *pools[TIDE_POOL_COUNT] = {"all", "small_pool", "large_pool"};
    const struct {
        const char *name;
        const tide_stat *stat;
    } stats[] = {
        {"reserved_bytes", s->reserved_bytes},         {"allocated_bytes", s->allocated_bytes},
        {"requested_bytes", s->requested_bytes},       {"active_bytes", s->active_bytes},
        {"pending_free_bytes", s->pending_free_bytes}, {"cached_bytes", s->cached_bytes},
        {"inactive_split_bytes", s->inactive_split_bytes}, {"allocation", s->allocation},
        {"segment", s->segment},                       {"pending_free_blocks", s->pending_free_blocks},
        {"asleep_bytes", s->asleep_bytes},             {"offloaded_bytes", s->offloaded_bytes},
        {"active", s->active},                         {"inactive_split", s->inactive_split},
    };
    /* PyTorch's .allocated and .freed, beside its .current and .peak above. */
    const struct {
        const char *name;
        const tide_stat_accumulated *acc;
    } accumulated[] = {
        {"allocation", s->accumulated.allocation},           {"segment", s->accumulated.segment},
        {"active", s->accumulated.active},                   {"allocated_bytes", s->accumulated.allocated_bytes},
        {"reserved_bytes", s->accumulated.reserved_bytes},   {"active_bytes", s->accumulated.active_bytes},
        {"inactive_split_bytes", s->accumulated.inactive_split_bytes},
        {"requested_bytes", s->accumulated.requested_bytes},
        {"inactive_split", s->accumulated_inactive_split},
    };
    const struct {
        const char *name;
        const tide_stat *stat;
        const tide_stat_accumulated *acc;
    } oversize[] = {
        {"oversize_allocations", &s->oversize_allocations, &s->accumulated.oversize_allocations},
        {"oversize_segments", &s->oversize_segments, &s->accumulated.oversize_segments},
    };
    const struct {
        const char *name;
        uint64_t value;
    } events[] = {
        {"num_alloc_retries", s->num_alloc_retries},       {"num_ooms", s->num_ooms},
        {"num_device_alloc", s->num_device_alloc},         {"num_device_free", s->num_device_free},
        {"num_sync_all_streams", s->num_sync_all_streams}, {"num_pending_drained", s->num_pending_drained},
        {"num_gc_released", s->num_gc_released},           {"num_fence_errors", s->num_fence_errors},
        {"limit_bytes", s->limit_bytes},                   {"gc_threshold_bytes", s->gc_threshold_bytes},
        {"device_total_bytes", s->device_total_bytes},     {"num_streams", s->num_streams},
        {"device_call_ns", s->device_call_ns},             {"sleep_host_cached_bytes", s->sleep_host_cached_bytes},
    };
    struct json_out o = {buf, cap, 0, true};
    if (cap)
        buf[0] = '\0';
    if (o.len + 1 < o.cap)
        buf[o.len] = '{';
    o.len++;
    for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++)
        for (int k = 0; k < TIDE_POOL_COUNT; k++) {
            emit_signed(&o, stats[i].name, pools[k], "current", stats[i].stat[k].current);
            emit_signed(&o, stats[i].name, pools[k], "peak", stats[i].stat[k].peak);
        }
    for (size_t i = 0; i < sizeof accumulated / sizeof accumulated[0]; i++)
        for (int k = 0; k < TIDE_POOL_COUNT; k++) {
            emit_signed(&o, accumulated[i].name, pools[k], "allocated", accumulated[i].acc[k].allocated);
            emit_signed(&o, accumulated[i].name, pools[k], "freed", accumulated[i].acc[k].freed);
        }
    for (size_t i = 0; i < sizeof oversize / sizeof oversize[0]; i++) {
        emit_signed(&o, oversize[i].name, NULL, "current", oversize[i].stat->current);
        emit_signed(&o, oversize[i].name, NULL, "peak", oversize[i].stat->peak);
        emit_signed(&o, oversize[i].name, NULL, "allocated", oversize[i].acc->allocated);
        emit_signed(&o, oversize[i].name, NULL, "freed", oversize[i].acc->freed);
    }
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
        emit_unsigned(&o, events[i].name, events[i].value);
    const char *tail = "\n}\n";
    for (const char *c = tail; *c; c++, o.len++)
        if (o.len + 1 < o.cap)
            buf[o.len] = *c;
    if (cap)
        buf[o.len < cap ? o.len : cap - 1] = '\0';
    return o.len;
}
