/*
 * Host-memory fault injection (see host_faults.h): compiled only into the test library
 * tidepool_host_faults. Each wrapper counts the call, fails it if it is the one armed, and otherwise
 * calls the C library (the parenthesized names are not the macros).
 */
#include "host_faults.h"

#include <stdatomic.h>
#include <stdbool.h>

static _Atomic unsigned long calls, refused, fail_at, aligned_calls;

void tide__host_faults_arm(unsigned long nth)
{
    atomic_store(&fail_at, nth ? atomic_load(&calls) + nth : 0);
}

unsigned long tide__host_faults_calls(void) { return atomic_load(&calls); }
unsigned long tide__host_faults_refused(void) { return atomic_load(&refused); }
unsigned long tide__host_faults_aligned_calls(void) { return atomic_load(&aligned_calls); }

static bool refuse(void)
{
    unsigned long n = atomic_fetch_add(&calls, 1) + 1;
    if (n != atomic_load(&fail_at))
        return false;
    atomic_fetch_add(&refused, 1);
    return true;
}

void *tide__faulty_malloc(size_t size) { return refuse() ? NULL : (malloc)(size); }
void *tide__faulty_calloc(size_t n, size_t size) { return refuse() ? NULL : (calloc)(n, size); }
void *tide__faulty_realloc(void *p, size_t size) { return refuse() ? NULL : (realloc)(p, size); }
void *tide__faulty_aligned_alloc(size_t alignment, size_t size)
{
    atomic_fetch_add(&aligned_calls, 1);
    return refuse() ? NULL : (aligned_alloc)(alignment, size);
}
char *tide__faulty_strdup(const char *s) { return refuse() ? NULL : (strdup)(s); }
