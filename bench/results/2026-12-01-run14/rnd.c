#include "micro_patterns.h"
#include "tidepool.h"
static void *t_alloc(void *ctx, size_t size, uintptr_t stream){void*p=0; if(tide_malloc(ctx,size,stream,&p))exit(1);return p;}
static void t_free(void *ctx, void *p, size_t size, uintptr_t stream){(void)size;(void)stream;if(tide_free(ctx,p))exit(1);}
int main(int argc,char**argv){
  int which=atoi(argv[1]); size_t pairs=atol(argv[2]);
  tide_sim_options o = {sizeof o, 1ull << 40, 0}; tide_sim *sim; tide_allocator *t;
  tide_sim_create(&o,&sim); tide_backend be = tide_sim_backend(sim); tide_create(&be,NULL,&t);
  struct bench_allocator a = {"t", t, t_alloc, t_free};
  double ns;
  if(which==0) ns=bench_same_size(&a,1u<<20,pairs,0);
  else if(which==1) ns=bench_random(&a,256,4u<<20,64,pairs,0);
  else ns=bench_random(&a,1u<<20,256u<<20,16,pairs,0);
  printf("%.1f ns\n",ns);
  tide_destroy(t); tide_sim_destroy(sim); return 0;}
