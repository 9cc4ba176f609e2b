/*
 * What memory looks like now: the snapshot (every segment and block, as JSON) and the leak report
 * (what is still live, grouped by tag and call site, in words). An observer: allocator.c takes every
 * lock and hands the allocator over.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *state_name(uint8_t state)
{
    return state == BLOCK_ACTIVE ? "active" : state == BLOCK_PENDING ? "pending_free" : "cached";
}

void report_snapshot_locked(tide_allocator *t, struct text *x)
{
    tide_stats s = {.struct_size = sizeof s};
    stats_collect_locked(t, &s);
    size_t need = stats_to_json(&s, NULL, 0);
    char *stats = malloc(need + 1);
    if (!stats) {
        x->failed = true;
        return;
    }
    stats_to_json(&s, stats, need + 1);
    text_printf(x, "{\"backend\": ");
    text_json_string(x, t->backend.name);
    text_printf(x, ", \"guard_bytes\": %zu, \"segments\": [", t->guard);
    bool first_segment = true;
    for (uint32_t i = 0; i < atomic_load(&t->nheaps); i++) {
        struct heap *h = t->heaps[i];
        for (struct segment *seg = h->segments; seg; seg = seg->next) {
            text_printf(x, "%s\n {\"address\": %llu, \"size\": %zu, \"pool\": \"%s\", \"stream\": %llu, "
                        "\"private_pool\": %llu, \"expandable\": %s, \"asleep\": %s, \"blocks\": [",
                        first_segment ? "" : ",", (unsigned long long)seg->base, seg->size,
                        seg->pool == POOL_SMALL ? "small" : "large", (unsigned long long)h->stream,
                        (unsigned long long)h->pool_id, seg->arena ? "true" : "false",
                        seg->asleep ? "true" : "false");
            first_segment = false;
            for (struct block *b = seg->first; b; b = b->next) {
                bool active = b->state == BLOCK_ACTIVE;
                text_printf(x, "%s\n  {\"address\": %llu, \"size\": %zu, \"requested\": %zu, \"state\": "
                            "\"%s\", \"stream\": %llu, \"tag\": ", b == seg->first ? "" : ",",
                            (unsigned long long)(b->addr + (b->state == BLOCK_FREE ? 0 : t->guard)), b->size,
                            active ? b->requested : 0, state_name(b->state), (unsigned long long)h->stream);
                text_json_string(x, active ? b->tag : NULL);
                char site[256] = "";
                if (active && b->site)
                    describe_code_address(b->site, site, sizeof site);
                text_printf(x, ", \"site\": ");
                text_json_string(x, site[0] ? site : NULL);
                text_printf(x, "}");
            }
            text_printf(x, "]}");
        }
    }
    text_printf(x, "\n], \"stats\": %s}\n", stats);
    free(stats);
}

tide_status report_snapshot_take_locked(tide_allocator *t, tide_snapshot **out)
{
    size_t nsegments = 0, nblocks = 0;
    for (uint32_t i = 0; i < atomic_load(&t->nheaps); i++)
        for (struct segment *seg = t->heaps[i]->segments; seg; seg = seg->next) {
            nsegments++;
            for (struct block *b = seg->first; b; b = b->next)
                nblocks++;
        }
    /* One allocation holds all three, so one free gives it back. */
    tide_snapshot *snap = calloc(1, sizeof *snap + nsegments * sizeof(tide_snapshot_segment) +
                                        nblocks * sizeof(tide_snapshot_block));
    if (!snap)
        return tide__fail(TIDE_EHOSTMEM, "tide_snapshot_take: no host memory for %zu segments and %zu blocks",
                          nsegments, nblocks);
    tide_snapshot_segment *segs = (tide_snapshot_segment *)(snap + 1);
    tide_snapshot_block *blocks = (tide_snapshot_block *)(segs + nsegments);
    size_t si = 0, bi = 0;
    for (uint32_t i = 0; i < atomic_load(&t->nheaps); i++) {
        struct heap *h = t->heaps[i];
        for (struct segment *seg = h->segments; seg; seg = seg->next, si++) {
            tide_snapshot_segment *o = &segs[si];
            o->address = seg->base;
            o->size = seg->size;
            o->stream = h->stream;
            o->private_pool = h->pool_id;
            o->pool = seg->pool == POOL_SMALL ? TIDE_POOL_SMALL : TIDE_POOL_LARGE;
            o->expandable = seg->arena != NULL;
            o->first_block = bi;
            for (struct block *b = seg->first; b; b = b->next, bi++) {
                tide_snapshot_block *ob = &blocks[bi];
                bool active = b->state == BLOCK_ACTIVE;
                ob->address = b->addr + (b->state == BLOCK_FREE ? 0 : t->guard); /* as the JSON says */
                ob->size = b->size;
                ob->requested = active ? b->requested : 0;
                ob->state = active ? TIDE_BLOCK_ACTIVE : b->state == BLOCK_PENDING ? TIDE_BLOCK_PENDING_FREE
                                                                                    : TIDE_BLOCK_CACHED;
                ob->tag = active ? b->tag : NULL;
                ob->site = active ? b->site : NULL;
                o->nblocks++;
                if (active) {
                    o->allocated_bytes += b->size;
                    o->requested_bytes += b->requested;
                }
                if (active || b->state == BLOCK_PENDING)
                    o->active_bytes += b->size;
                else if (b->size > snap->largest_cached)
                    snap->largest_cached = b->size;
            }
        }
    }
    snap->nsegments = nsegments;
    snap->nblocks = nblocks;
    snap->segments = segs;
    snap->blocks = blocks;
    snap->guard_bytes = t->guard;
    *out = snap;
    return TIDE_OK;
}

/* One line of the leak report: live blocks with the same tag and call site. */
struct leak_group {
    const char *tag;
    void *site;
    bool pending;        /* freed, but references still hold it */
    uint64_t count, bytes;
    size_t largest;
};

static int by_bytes_descending(const void *a, const void *b)
{
    const struct leak_group *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

tide_status report_leaks_locked(tide_allocator *t, struct leak_groups *out)
{
    struct leak_group *groups = NULL;
    size_t n = 0, cap = 0;
    tide_status s = TIDE_OK;
    for (uint32_t i = 0; i < atomic_load(&t->nheaps) && s == TIDE_OK; i++) {
        for (struct segment *seg = t->heaps[i]->segments; seg && s == TIDE_OK; seg = seg->next) {
            for (struct block *b = seg->first; b; b = b->next) {
                bool pending = b->state == BLOCK_PENDING && b->refs;
                if (b->state != BLOCK_ACTIVE && !pending)
                    continue;
                const char *tag = pending ? NULL : b->tag;
                void *site = pending ? NULL : b->site;
                size_t g = 0;
                while (g < n && !(groups[g].tag == tag && groups[g].site == site && groups[g].pending == pending))
                    g++;
                if (g == n) {
                    if (n == cap) {
                        struct leak_group *more = grow_table(groups, &cap, sizeof *more, 16);
                        if (!more) {
                            s = TIDE_EHOSTMEM;
                            break;
                        }
                        groups = more;
                    }
                    groups[n++] = (struct leak_group){tag, site, pending, 0, 0, 0};
                }
                size_t bytes = pending ? b->size : b->requested;
                groups[g].count++;
                groups[g].bytes += bytes;
                if (bytes > groups[g].largest)
                    groups[g].largest = bytes;
            }
        }
    }
    if (s != TIDE_OK) {
        free(groups);
        return tide__fail(s, "tide_leak_report: out of host memory");
    }
    if (n > 1)
        qsort(groups, n, sizeof *groups, by_bytes_descending);
    out->group = groups;
    out->n = n;
    return TIDE_OK;
}

tide_status report_leak_text(struct leak_groups *leaks, char **out, uint64_t *live)
{
    struct leak_group *groups = leaks->group;
    size_t n = leaks->n;
    uint64_t count = 0, bytes = 0, held = 0;
    for (size_t i = 0; i < n; i++) {
        if (groups[i].pending) {
            held += groups[i].count;
            continue;
        }
        count += groups[i].count;
        bytes += groups[i].bytes;
    }
    struct text x = {0};
    char b1[32], b2[32];
    if (count == 0 && held == 0)
        text_printf(&x, "tidepool: no leaks: nothing is allocated and nothing is still referenced.\n");
    else
        text_printf(&x, "tidepool: %llu allocation%s still live, %s requested in all%s:\n",
                    (unsigned long long)count, count == 1 ? "" : "s", format_bytes(bytes, b1),
                    held ? ", and freed blocks still referenced (tide_retain without tide_release)" : "");
    for (size_t i = 0; i < n; i++) {
        const struct leak_group *g = &groups[i];
        if (g->pending) {
            text_printf(&x, "  %10s in %llu freed block%s still referenced by the device\n",
                        format_bytes(g->bytes, b1), (unsigned long long)g->count, g->count == 1 ? "" : "s");
            continue;
        }
        char site[256];
        if (g->site)
            describe_code_address(g->site, site, sizeof site);
        text_printf(&x, "  %10s in %llu allocation%s (largest %s), tag %s%s%s, allocated at %s\n",
                    format_bytes(g->bytes, b1), (unsigned long long)g->count, g->count == 1 ? "" : "s",
                    format_bytes(g->largest, b2), g->tag ? "'" : "", g->tag ? g->tag : "(none)",
                    g->tag ? "'" : "", g->site ? site : "(unknown: no history was on)");
    }
    free(groups);
    leaks->group = NULL;
    leaks->n = 0;
    if (live)
        *live = count;
    return text_finish(&x, out, "tide_leak_report");
}
