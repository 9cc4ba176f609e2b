/* Run 19: is tidepool's hot path slower on the CUDA backend than on the simulated device, on the same
 * host at the same time? Three allocators in one process, taking turns per repetition: the simulated
 * device (stream 0), CUDA (stream 0), CUDA (a created non-blocking stream, as gpu_bench micro uses).
 * Pair counts as in gpu_bench micro. Prints the median ns per pair of each and the median of the
 * repetitions' ratios to the simulated device. */
#include "micro_patterns.h"
#include "tidepool.h"
#include <cuda_runtime.h>
static void *t_alloc(void *ctx, size_t size, uintptr_t stream){void*p=0; if(tide_malloc(ctx,size,stream,&p)){fprintf(stderr,"%s\n",tide_last_error());exit(1);}return p;}
static void t_free(void *ctx, void *p, size_t size, uintptr_t stream){(void)size;(void)stream;if(tide_free(ctx,p)){fprintf(stderr,"%s\n",tide_last_error());exit(1);}}
int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 9;
    cudaSetDevice(0); cudaFree(0);
    cudaStream_t st; cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    tide_sim_options o = {sizeof o, 80ull << 30, 0}; tide_sim *sim;
    tide_sim_create(&o, &sim);
    tide_backend bs = tide_sim_backend(sim), bc1, bc2;
    tide_allocator *ts, *tc1, *tc2;
    if (tide_create(&bs, NULL, &ts) || tide_backend_cuda(0, &bc1) || tide_create(&bc1, NULL, &tc1) ||
        tide_backend_cuda(0, &bc2) || tide_create(&bc2, NULL, &tc2)) { fprintf(stderr, "%s\n", tide_last_error()); return 1; }
    struct bench_allocator a[3] = {{"sim", ts, t_alloc, t_free}, {"cuda0", tc1, t_alloc, t_free}, {"cudaS", tc2, t_alloc, t_free}};
    uintptr_t streams[3] = {0, 0, (uintptr_t)st};
    size_t pairs[3] = {300000, 200000, 50000};
    printf("| pattern | sim ns | CUDA stream 0 ns | CUDA stream ns | CUDA0/sim | CUDAs/sim |\n|---|---|---|---|---|---|\n");
    for (int p = 0; p < 3; p++) {
        double v[3][64], r1[64], r2[64];
        for (int r = 0; r < reps; r++) {
            for (int k = 0; k < 3; k++) {
                int kk = (k + r) % 3;
                v[kk][r] = bench_one_thread(p, &a[kk], pairs[p], streams[kk]);
            }
            r1[r] = v[1][r] / v[0][r]; r2[r] = v[2][r] / v[0][r];
        }
        printf("| %s | %.1f | %.1f | %.1f | %.3f | %.3f |\n", bench_one_thread_names[p], bench_median(v[0], reps),
               bench_median(v[1], reps), bench_median(v[2], reps), bench_median(r1, reps), bench_median(r2, reps));
    }
    tide_destroy(ts); tide_destroy(tc1); tide_destroy(tc2); tide_sim_destroy(sim);
    return 0;
}
