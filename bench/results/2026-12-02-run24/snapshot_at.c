/* Run 24: the library's blocks after the first N operations of a trace (tidepool CSV, not gzipped), with
 * expandable_segments:True, as tide_snapshot_json gives them.
 *     gcc -O1 -I include snapshot_at.c build/libtidepool.a -lm -lpthread -ldl -o snapshot_at
 *     zcat traces/lstm_loop.csv.gz > lstm.csv && ./snapshot_at lstm.csv 145 > snap145.json */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "tidepool.h"
int main(int argc,char**argv){
  tide_sim_options o={sizeof o,80ull<<30,0}; tide_sim*sim; tide_allocator*t;
  tide_sim_create(&o,&sim); tide_backend be=tide_sim_backend(sim);
  if(tide_create(&be,"expandable_segments:True",&t)) return 1;
  FILE*f=fopen(argv[1],"r"); char line[256]; fgets(line,sizeof line,f);
  static void* ptr[200000]; long n=0, stop=atol(argv[2]);
  while(fgets(line,sizeof line,f) && n<stop){
    char op; long id; long long sz; int st;
    sscanf(line,"%c,%ld,%lld,%d",&op,&id,&sz,&st);
    if(op=='a') tide_malloc(t,sz,0,&ptr[id]); else tide_free(t,ptr[id]);
    n++;
  }
  char*js; tide_snapshot_json(t,&js); puts(js); return 0;}
