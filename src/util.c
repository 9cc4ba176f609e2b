/*
 * Small utilities every layer uses: the clocks, the heaps' spin lock, the count of forks, byte sizes in
 * words, and the growable text that JSON and reports are written into.
 */
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ---- clocks ----------------------------------------------------------------------------------------- */

/* Out of line: the struct it hands clock_gettime, inlined, would give every function on the path of a
 * free a stack canary (see TIDE_NO_CANARY in types.h). */
__attribute__((noinline)) uint64_t idle_clock(void)
{
    /* Orders idle segments by age across heaps, and shares nothing between threads (a counter would
     * bounce one cache line among them). A fine clock, not a coarse one: segments idled within one
     * coarse tick (a few milliseconds) tied, and which heap's went back first then hung on the
     * machine's load, so one program's replay made different driver calls from run to run (the
     * suite's vision trace: 199 calls, or 607 in one run of six side by side). */
    return now_ns();
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the spin lock --------------------------------------------------------------------------------- */

void spin_lock_wait(spin_lock *l)
{
    for (unsigned spins = 0;; spins++) {
        if (!atomic_load_explicit(&l->held, memory_order_relaxed) &&
            !atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
            return;
        if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
    }
}

/* ---- fork ------------------------------------------------------------------------------------------ */

_Atomic(uint32_t) process_forks;

/* In the child, which has one thread: no lock, nothing but the count, so it cannot deadlock on what the
 * parent's other threads held at the fork. */
static void count_fork_in_child(void) { atomic_fetch_add_explicit(&process_forks, 1, memory_order_relaxed); }

/* At load, not at the first tide_create: a pthread_once still under way in another thread at the fork
 * would never finish in the child. glibc forgets the handler when a dlopen'd library is unloaded. */
__attribute__((constructor)) static void watch_forks(void) { pthread_atfork(NULL, NULL, count_fork_in_child); }

/* ---- byte sizes -------------------------------------------------------------------------------------- */

const char *format_bytes(uint64_t bytes, char buf[32])
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024) {
        snprintf(buf, 32, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, 32, "%.1f %s", v, units[u]);
    return buf;
}

/* ---- text --------------------------------------------------------------------------------------------- */

void text_printf(struct text *x, const char *fmt, ...)
{
    if (x->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(x->p ? x->p + x->len : NULL, x->p ? x->cap - x->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            x->failed = true;
            return;
        }
        if (x->p && x->len + (size_t)n < x->cap) {
            x->len += (size_t)n;
            return;
        }
        size_t cap = x->cap ? x->cap : 4096;
        while (cap <= x->len + (size_t)n)
            cap *= 2;
        char *p = realloc(x->p, cap);
        if (!p) {
            x->failed = true;
            return;
        }
        x->p = p;
        x->cap = cap;
    }
}

void *grow_table(void *items, size_t *cap, size_t item_size, size_t first)
{
    size_t want = *cap ? 2 * *cap : first;
    if (want < *cap || want > SIZE_MAX / item_size)
        return NULL;
    void *grown = realloc(items, want * item_size);
    if (grown)
        *cap = want;
    return grown;
}

void text_json_string(struct text *x, const char *s)
{
    if (!s) {
        text_printf(x, "null");
        return;
    }
    text_printf(x, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            text_printf(x, "\\%c", c);
        else if (c < 0x20)
            text_printf(x, "\\u%04x", c);
        else
            text_printf(x, "%c", c);
    }
    text_printf(x, "\"");
}

tide_status text_finish(struct text *x, char **out, const char *what)
{
    if (x->failed || !x->p) {
        free(x->p);
        return tide__fail(TIDE_EHOSTMEM, "%s: out of host memory", what);
    }
    *out = x->p;
    return TIDE_OK;
}

void tide_string_free(char *text) { free(text); }
