/* Is the slow level a property of one run's arrays? Times three rounds of the small random pattern
 * with the same arrays, 30 times over, printing where the arrays lie. */
#define _GNU_SOURCE
#include "micro_patterns.h"
#include "tidepool.h"
int main(void){
  tide_sim_options o = {sizeof o, 1ull << 40, 0}; tide_sim *sim; tide_allocator *t;
  tide_sim_create(&o,&sim); tide_backend be=tide_sim_backend(sim); tide_create(&be,NULL,&t);
  size_t pairs = 100000; int live = 64;
  printf("rep round0 round1 round2  sizes victims ptrs held (low 12 bits, hex)\n");
  for (int rep = 0; rep < 30; rep++) {
    size_t *sizes = bench_sizes(pairs + live, 256, 4u << 20, 42);
    uint64_t pick = 42 ^ 0x5555;
    size_t *victims = malloc(pairs * sizeof *victims);
    for (size_t i = 0; i < pairs; i++) victims[i] = bench_rng(&pick) % live;
    void **ptrs = calloc(live, sizeof *ptrs);
    size_t *held = calloc(live, sizeof *held);
    double ns[3];
    for (int round = 0; round < 3; round++) {
      for (int k = 0; k < live; k++) { held[k] = sizes[k]; if (tide_malloc(t, held[k], 0, &ptrs[k])) return 1; }
      double t0 = bench_now();
      for (size_t i = 0; i < pairs; i++) {
        size_t k = victims[i];
        if (tide_free(t, ptrs[k])) return 1;
        held[k] = sizes[live + i];
        if (tide_malloc(t, held[k], 0, &ptrs[k])) return 1;
      }
      ns[round] = (bench_now() - t0) * 1e9 / pairs;
      for (int k = 0; k < live; k++) tide_free(t, ptrs[k]);
    }
    printf("%2d %6.1f %6.1f %6.1f  %03lx %03lx %03lx %03lx\n", rep, ns[0], ns[1], ns[2],
           (unsigned long)((uintptr_t)sizes & 0xfff), (unsigned long)((uintptr_t)victims & 0xfff),
           (unsigned long)((uintptr_t)ptrs & 0xfff), (unsigned long)((uintptr_t)held & 0xfff));
    free(sizes); free(victims); free(ptrs); free(held);
  }
  return 0;
}
