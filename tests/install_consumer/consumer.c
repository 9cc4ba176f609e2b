/*
 * A program that uses tidepool as an installed package would: only <tidepool.h> and the library, found
 * through pkg-config or find_package (tests/install_and_use.sh). It allocates on the simulated device
 * (or, given the argument `cuda`, on CUDA device 0), frees, empties the cache, and checks that the
 * statistics saw it; prints "tidepool VERSION: ok".
 */
#include <stdio.h>
#include <string.h>
#include <tidepool.h>
#include <tidepool_cuda.h>
#include <tidepool_sim.h>

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "consumer: %s failed: %s\n", #cond, tide_last_error());               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    tide_sim *sim = NULL;
    tide_allocator *t = NULL;
    tide_backend backend;
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) {
        EXPECT(tide_backend_cuda(0, &backend) == TIDE_OK);
    } else {
        EXPECT(tide_sim_create(NULL, &sim) == TIDE_OK);
        backend = tide_sim_backend(sim);
    }
    EXPECT(tide_create(&backend, "limit:64MiB", &t) == TIDE_OK);

    void *p = NULL;
    EXPECT(tide_malloc(t, 1 << 20, 0, &p) == TIDE_OK && p != NULL);
    tide_stats stats = {.struct_size = sizeof stats};
    EXPECT(tide_get_stats(t, &stats) == TIDE_OK);
    EXPECT(stats.allocated_bytes[TIDE_POOL_ALL].current == 1 << 20);
    EXPECT(tide_free(t, p) == TIDE_OK);
    EXPECT(tide_free(t, (char *)p + 512) == TIDE_EINVAL); /* not a pointer tidepool gave */
    EXPECT(tide_empty_cache(t, NULL) == TIDE_OK);
    EXPECT(tide_get_stats(t, &stats) == TIDE_OK);
    EXPECT(stats.reserved_bytes[TIDE_POOL_ALL].current == 0);

    tide_destroy(t);
    if (sim)
        tide_sim_destroy(sim);
    printf("tidepool %d.%d.%d: ok\n", TIDE_VERSION_MAJOR, TIDE_VERSION_MINOR, TIDE_VERSION_PATCH);
    return 0;
}
