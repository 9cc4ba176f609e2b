/*
 * What reading each clock costs on this machine, in ns per read (the history stamps events with one;
 * on a machine whose kernel has no fast clock source, CLOCK_MONOTONIC is a system call).
 *
 *   build/bench/clock_cost
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static double ns_per_read(clockid_t id, const char *name)
{
    enum { READS = 2000000 };
    struct timespec a, b, x;
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t sink = 0;
    for (int i = 0; i < READS; i++) {
        clock_gettime(id, &x);
        sink += (uint64_t)x.tv_nsec;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / READS;
    printf("%-24s %8.1f ns per read   (%llu)\n", name, ns, (unsigned long long)(sink & 1));
    return ns;
}

int main(void)
{
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    char source[64] = "?";
    if (f) {
        if (!fgets(source, sizeof source, f))
            source[0] = '\0';
        fclose(f);
    }
    printf("clock source: %s", source);
    ns_per_read(CLOCK_MONOTONIC, "CLOCK_MONOTONIC");
    ns_per_read(CLOCK_MONOTONIC_COARSE, "CLOCK_MONOTONIC_COARSE");
    ns_per_read(CLOCK_REALTIME, "CLOCK_REALTIME");
    return 0;
}
