/*
 * Allocation traces: read from tidepool's CSV ("op,id,size,stream", as in traces/) or RMM's log CSV
 * ("Thread,Time,Action,Pointer,Size,Stream"), plain or gzip'd, into one list of operations.
 */
#ifndef TIDE_TRACE_H
#define TIDE_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* TRACE_EMPTY_CACHE: the program called empty_cache here (tidepool's CSV only: "e,0,0,0"). */
enum trace_op_kind { TRACE_ALLOC = 0, TRACE_FREE = 1, TRACE_EMPTY_CACHE = 2 };

struct trace_op {
    uint8_t kind;       /* enum trace_op_kind */
    uint32_t stream;    /* 0 = the default stream; others numbered in order of appearance */
    uint32_t id;        /* dense: 0 .. nallocs-1, in order of allocation */
    uint64_t size;      /* bytes, as the trace gives them */
};

struct trace {
    struct trace_op *ops;
    size_t nops, cap;
    size_t nallocs, nfrees, nempty_caches;
    uint32_t nstreams;            /* distinct streams, the default one included if used */
    size_t skipped_frees;         /* RMM logs: frees of memory allocated before the log began */
    const char *format;           /* "tidepool" or "rmm" */
};

/* Reads a trace. On error returns -1 with "FILE:LINE: what was wrong" in err. */
int trace_load(const char *path, struct trace *out, char *err, size_t errcap);
void trace_free(struct trace *t);

#endif
