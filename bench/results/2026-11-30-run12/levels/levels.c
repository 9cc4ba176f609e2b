/* Does the one-thread pattern's slow level follow the core's speed? Alternates, 20 times: arithmetic
 * (one chain, one thread), the small random pattern in a new thread, the same on the main thread. */
#define _GNU_SOURCE
#include "micro_patterns.h"
#include "tidepool.h"
#include <sched.h>
static void *t_alloc(void *ctx, size_t size, uintptr_t stream){ void *p=NULL; if(tide_malloc((tide_allocator*)ctx,size,stream,&p)) exit(1); return p;}
static void t_free(void *ctx, void *p, size_t size, uintptr_t stream){(void)size;(void)stream; if(tide_free((tide_allocator*)ctx,p)) exit(1);}
int main(void){
  tide_sim_options o = {sizeof o, 1ull << 40, 0}; tide_sim *sim; tide_allocator *t;
  tide_sim_create(&o,&sim); tide_backend be=tide_sim_backend(sim); tide_create(&be,NULL,&t);
  struct bench_allocator a = {"t", t, t_alloc, t_free};
  uintptr_t streams[8] = {0};
  printf("rep cpu arith_ns thread_ns main_ns\n");
  for (int r = 0; r < 20; r++) {
    double ar = bench_arithmetic(1, 2000000, 0);
    double th = bench_threads(&a, 1, streams, 100000);
    double mn = bench_random(&a, 256, 4u << 20, 64, 100000, 0);
    printf("%d %d %.3f %.1f %.1f\n", r, sched_getcpu(), ar, th, mn);
  }
  return 0;
}
