/*
 * Trace readers. A .gz file is read through a `gzip -dc` child process (gzip is on every Debian
 * system), so reading traces needs no compression library.
 */
#include "trace.h"

#include "tidepool.h" /* TIDE_MAX_STREAMS */

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- an open-addressing map from a trace's own keys (ids, pointers) to dense ids ----------------- */

struct key_map {
    uint64_t *keys;
    uint32_t *values;   /* UINT32_MAX: empty */
    size_t cap, count;
};

static size_t key_slot(uint64_t key, size_t cap)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static bool key_map_grow(struct key_map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 1024;
    uint64_t *keys = malloc(cap * sizeof *keys);
    uint32_t *values = malloc(cap * sizeof *values);
    if (!keys || !values) {
        free(keys);
        free(values);
        return false;
    }
    memset(values, 0xff, cap * sizeof *values);
    for (size_t i = 0; i < m->cap; i++) {
        if (m->values[i] == UINT32_MAX)
            continue;
        size_t j = key_slot(m->keys[i], cap);
        while (values[j] != UINT32_MAX)
            j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        values[j] = m->values[i];
    }
    free(m->keys);
    free(m->values);
    m->keys = keys;
    m->values = values;
    m->cap = cap;
    return true;
}

/* The slot of key, or of the empty slot where it would go. */
static size_t key_find(const struct key_map *m, uint64_t key)
{
    size_t i = key_slot(key, m->cap);
    while (m->values[i] != UINT32_MAX && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static bool key_put(struct key_map *m, uint64_t key, uint32_t value)
{
    if ((m->count + 1) * 2 > m->cap && !key_map_grow(m))
        return false;
    size_t i = key_find(m, key);
    if (m->values[i] == UINT32_MAX)
        m->count++;
    m->keys[i] = key;
    m->values[i] = value;
    return true;
}

static uint32_t key_get(const struct key_map *m, uint64_t key)
{
    return m->cap ? m->values[key_find(m, key)] : UINT32_MAX;
}

static void key_remove(struct key_map *m, uint64_t key)
{
    if (!m->cap)
        return;
    size_t mask = m->cap - 1, hole = key_find(m, key);
    if (m->values[hole] == UINT32_MAX)
        return;
    for (size_t j = (hole + 1) & mask; m->values[j] != UINT32_MAX; j = (j + 1) & mask) {
        size_t home = key_slot(m->keys[j], m->cap);
        bool home_after_hole = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!home_after_hole) {
            m->keys[hole] = m->keys[j];
            m->values[hole] = m->values[j];
            hole = j;
        }
    }
    m->values[hole] = UINT32_MAX;
    m->count--;
}

static void key_map_free(struct key_map *m)
{
    free(m->keys);
    free(m->values);
    memset(m, 0, sizeof *m);
}

/* ---- reading ----------------------------------------------------------------------------------------- */

struct reader {
    const char *path;
    FILE *f;
    pid_t child;              /* gzip, or 0 */
    int child_err;            /* the read end of gzip's stderr, or -1 */
    size_t line_no;
    char *line;
    size_t line_cap;
    bool at_end;              /* every line was read */
    char *err;
    size_t errcap;
};

__attribute__((format(printf, 2, 3))) static int fail(struct reader *r, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (r->line_no)
        snprintf(r->err, r->errcap, "%s:%zu: %s", r->path, r->line_no, what);
    else
        snprintf(r->err, r->errcap, "%s: %s", r->path, what);
    return -1;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int reader_open(struct reader *r)
{
    struct stat st;
    if (stat(r->path, &st) == 0 && S_ISDIR(st.st_mode))
        return fail(r, "is a directory, not a trace");
    if (!ends_with(r->path, ".gz")) {
        r->f = fopen(r->path, "r");
        return r->f ? 0 : fail(r, "cannot open: %s", strerror(errno));
    }
    if (access(r->path, R_OK) != 0)
        return fail(r, "cannot open: %s", strerror(errno));
    int fds[2], errs[2];
    if (pipe(fds) != 0)
        return fail(r, "cannot make a pipe for gzip: %s", strerror(errno));
    if (pipe(errs) != 0) {
        close(fds[0]);
        close(fds[1]);
        return fail(r, "cannot make a pipe for gzip: %s", strerror(errno));
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        close(errs[0]);
        close(errs[1]);
        return fail(r, "cannot start gzip: %s", strerror(errno));
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        dup2(errs[1], STDERR_FILENO); /* its complaint becomes part of our message */
        close(fds[0]);
        close(fds[1]);
        close(errs[0]);
        close(errs[1]);
        execlp("gzip", "gzip", "-dc", "--", r->path, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    close(errs[1]);
    r->child = pid;
    r->child_err = errs[0];
    r->f = fdopen(fds[0], "r");
    return r->f ? 0 : fail(r, "cannot read gzip's output");
}

/* gzip's own complaint, without its "gzip: PATH: " prefix, in out (empty if it said nothing). */
static void gzip_complaint(struct reader *r, char *out, size_t cap)
{
    size_t n = 0;
    ssize_t got;
    while (n + 1 < cap && (got = read(r->child_err, out + n, cap - 1 - n)) > 0)
        n += (size_t)got;
    out[n] = '\0';
    const char *what = out + strspn(out, "\n"); /* gzip starts a complaint on a line of its own */
    char *nl = strchr(what, '\n');
    if (nl)
        *nl = '\0';
    size_t plen = strlen(r->path);
    if (strncmp(what, "gzip: ", 6) == 0)
        what += 6;
    if (strncmp(what, r->path, plen) == 0 && strncmp(what + plen, ": ", 2) == 0)
        what += plen + 2;
    memmove(out, what, strlen(what) + 1);
}

/* Closes the file and says whether gzip did its part. A gzip error is the real cause of whatever the
 * reading made of its output (a truncated file ends in a cut line, which would read as a field-count
 * error), so when reading stopped early the rest is drained to learn how gzip ends, and its error, if
 * any, replaces the reader's. */
static int reader_close(struct reader *r, int rc)
{
    if (r->child > 0 && r->f && !r->at_end) {
        char sink[65536];
        while (fread(sink, 1, sizeof sink, r->f) > 0)
            ;
    }
    if (r->f)
        fclose(r->f);
    if (r->child > 0) {
        int status = 0;
        char complaint[300];
        waitpid(r->child, &status, 0);
        gzip_complaint(r, complaint, sizeof complaint);
        close(r->child_err);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            size_t last_line = r->line_no;
            r->line_no = 0;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                rc = fail(r, "gzip is not installed (needed to read .gz traces)");
            else
                rc = fail(r, "gzip could not decompress it (%s); %zu lines were read before it stopped",
                          *complaint ? complaint : "is it a gzip file?", last_line);
        }
    }
    free(r->line);
    return rc;
}

/* The next line without its end-of-line, or NULL at the end. */
static char *next_line(struct reader *r)
{
    ssize_t n = getline(&r->line, &r->line_cap, r->f);
    if (n < 0) {
        r->at_end = true;
        return NULL;
    }
    r->line_no++;
    while (n > 0 && (r->line[n - 1] == '\n' || r->line[n - 1] == '\r'))
        r->line[--n] = '\0';
    return r->line;
}

/* Splits line at commas into at most max fields; returns the count. */
static int split(char *line, char **fields, int max)
{
    int n = 0;
    for (char *p = line;; p++) {
        if (n < max)
            fields[n] = p;
        n++;
        p = strchr(p, ',');
        if (!p)
            break;
        *p = '\0';
    }
    return n;
}

static bool parse_u64(const char *s, int base, uint64_t *out)
{
    while (*s == ' ')
        s++;
    if (!*s || *s == '-' || *s == '+')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    while (*end == ' ')
        end++;
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

static int push(struct reader *r, struct trace *t, struct trace_op op)
{
    if (t->nops == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        struct trace_op *ops = realloc(t->ops, cap * sizeof *ops);
        if (!ops)
            return fail(r, "out of memory");
        t->ops = ops;
        t->cap = cap;
    }
    t->ops[t->nops++] = op;
    if (op.stream + 1 > t->nstreams)
        t->nstreams = op.stream + 1;
    return 0;
}

/* The next allocation's dense number. UINT32_MAX marks "none" in the id maps, so a trace holds at most
 * UINT32_MAX - 1 allocations: past that, numbers would wrap onto live ones. */
static int next_dense(struct reader *r, struct trace *t, uint32_t *dense)
{
    if (t->nallocs >= UINT32_MAX - 1)
        return fail(r, "more than %u allocations: split the trace", UINT32_MAX - 1);
    *dense = (uint32_t)t->nallocs++;
    return 0;
}

/* A trace's streams, numbered densely in order of appearance (0, the default stream, stays 0): the
 * replay makes one simulated stream for each, and no more than one allocator serves. */
struct stream_ids {
    struct key_map map;
    uint32_t next;
};

static int dense_stream(struct reader *r, struct stream_ids *s, uint64_t handle, const char *text,
                        uint32_t *out)
{
    *out = 0;
    if (handle == 0)
        return 0;
    uint32_t id = key_get(&s->map, handle);
    if (id == UINT32_MAX) {
        if (s->next == 0)
            s->next = 1;
        if (s->next >= TIDE_MAX_STREAMS)
            return fail(r, "stream %s: the trace names more than %d streams besides the default one, "
                        "and one allocator serves at most %d", text, TIDE_MAX_STREAMS - 1, TIDE_MAX_STREAMS);
        id = s->next++;
        if (!key_put(&s->map, handle, id))
            return fail(r, "out of memory");
    }
    *out = id;
    return 0;
}

/* op,id,size,stream */
static int read_tidepool(struct reader *r, struct trace *t, struct key_map *ids)
{
    struct key_map live = {0};
    struct stream_ids streams = {{0}, 0};
    int rc = 0;
    for (char *line; (line = next_line(r));) {
        if (!*line || *line == '#')
            continue;
        char *f[5];
        int n = split(line, f, 5);
        if (n != 4) {
            rc = fail(r, "expected 4 fields (op,id,size,stream), found %d", n);
            break;
        }
        uint64_t id, size, stream_number;
        if (!parse_u64(f[1], 10, &id)) {
            rc = fail(r, "id '%s' is not a whole number", f[1]);
            break;
        }
        if (!parse_u64(f[2], 10, &size)) {
            rc = fail(r, "size '%s' is not a whole number", f[2]);
            break;
        }
        uint32_t stream;
        if (!parse_u64(f[3], 10, &stream_number)) {
            rc = fail(r, "stream '%s' is not a whole number", f[3]);
            break;
        }
        if ((rc = dense_stream(r, &streams, stream_number, f[3], &stream)))
            break;
        if (strcmp(f[0], "a") == 0) {
            if (size == 0) {
                rc = fail(r, "allocation %llu has size 0", (unsigned long long)id);
                break;
            }
            if (key_get(ids, id) != UINT32_MAX) {
                rc = fail(r, "allocation id %llu appears twice", (unsigned long long)id);
                break;
            }
            uint32_t dense = 0;
            if ((rc = next_dense(r, t, &dense)))
                break;
            if (!key_put(ids, id, dense) || !key_put(&live, id, dense)) {
                rc = fail(r, "out of memory");
                break;
            }
            if ((rc = push(r, t, (struct trace_op){TRACE_ALLOC, stream, dense, size})))
                break;
        } else if (strcmp(f[0], "f") == 0) {
            uint32_t dense = key_get(&live, id);
            if (dense == UINT32_MAX) {
                rc = fail(r, "free of id %llu, which is not allocated at this point",
                          (unsigned long long)id);
                break;
            }
            key_remove(&live, id);
            t->nfrees++;
            if ((rc = push(r, t, (struct trace_op){TRACE_FREE, stream, dense, size})))
                break;
        } else if (strcmp(f[0], "e") == 0) {
            if (id || size) {
                rc = fail(r, "an empty_cache line ('e') has id and size 0, not %llu and %llu",
                          (unsigned long long)id, (unsigned long long)size);
                break;
            }
            t->nempty_caches++;
            if ((rc = push(r, t, (struct trace_op){TRACE_EMPTY_CACHE, stream, 0, 0})))
                break;
        } else {
            rc = fail(r, "op '%s' is none of 'a' (allocate), 'f' (free), 'e' (empty_cache)", f[0]);
            break;
        }
    }
    key_map_free(&live);
    key_map_free(&streams.map);
    return rc;
}

/* Thread,Time,Action,Pointer,Size,Stream */
static int read_rmm(struct reader *r, struct trace *t, struct key_map *ids)
{
    struct stream_ids streams = {{0}, 0};
    int rc = 0;
    for (char *line; (line = next_line(r));) {
        if (!*line)
            continue;
        char *f[7];
        int n = split(line, f, 7);
        if (n != 6) {
            rc = fail(r, "expected 6 fields (Thread,Time,Action,Pointer,Size,Stream), found %d", n);
            break;
        }
        uint64_t ptr, size, stream_handle;
        if (!parse_u64(f[3], 16, &ptr)) {
            rc = fail(r, "pointer '%s' is not a hexadecimal number", f[3]);
            break;
        }
        if (!parse_u64(f[4], 10, &size)) {
            rc = fail(r, "size '%s' is not a whole number", f[4]);
            break;
        }
        if (!parse_u64(f[5], 16, &stream_handle)) {
            rc = fail(r, "stream '%s' is not a hexadecimal number", f[5]);
            break;
        }
        uint32_t stream;
        if ((rc = dense_stream(r, &streams, stream_handle, f[5], &stream)))
            break;
        if (strcmp(f[2], "allocate") == 0) {
            if (size == 0)
                continue; /* RMM logs zero-byte allocations; there is nothing to replay */
            if (key_get(ids, ptr) != UINT32_MAX) {
                rc = fail(r, "pointer %s is allocated again before it was freed", f[3]);
                break;
            }
            uint32_t dense = 0;
            if ((rc = next_dense(r, t, &dense)))
                break;
            if (!key_put(ids, ptr, dense)) {
                rc = fail(r, "out of memory");
                break;
            }
            if ((rc = push(r, t, (struct trace_op){TRACE_ALLOC, stream, dense, size})))
                break;
        } else if (strcmp(f[2], "free") == 0) {
            uint32_t dense = key_get(ids, ptr);
            if (dense == UINT32_MAX) {
                t->skipped_frees++; /* allocated before the log began */
                continue;
            }
            key_remove(ids, ptr);
            t->nfrees++;
            if ((rc = push(r, t, (struct trace_op){TRACE_FREE, stream, dense, size})))
                break;
        } else if (strcmp(f[2], "allocate failure") != 0) {
            rc = fail(r, "action '%s' is not allocate, free or allocate failure", f[2]);
            break;
        }
    }
    key_map_free(&streams.map);
    return rc;
}

int trace_load(const char *path, struct trace *out, char *err, size_t errcap)
{
    memset(out, 0, sizeof *out);
    struct reader r = {.path = path, .err = err, .errcap = errcap, .child_err = -1};
    if (reader_open(&r) != 0)
        return -1;
    struct key_map ids = {0};
    int rc;
    char *header = next_line(&r);
    if (!header) {
        rc = fail(&r, "empty file");
    } else if (strncmp(header, "op,id,size,stream", 17) == 0) {
        out->format = "tidepool";
        rc = read_tidepool(&r, out, &ids);
    } else if (strncmp(header, "Thread,Time,Action,Pointer,Size,Stream", 38) == 0) {
        out->format = "rmm";
        rc = read_rmm(&r, out, &ids);
    } else {
        rc = fail(&r, "unknown format: the first line should be \"op,id,size,stream\" (tidepool) or "
                  "\"Thread,Time,Action,Pointer,Size,Stream\" (RMM log)");
    }
    key_map_free(&ids);
    if (rc == 0 && ferror(r.f))
        rc = fail(&r, "read error");
    rc = reader_close(&r, rc);
    if (rc == 0 && out->nallocs == 0)
        rc = fail(&r, "no allocations in the trace");
    if (rc != 0)
        trace_free(out);
    return rc;
}

void trace_free(struct trace *t)
{
    free(t->ops);
    memset(t, 0, sizeof *t);
}
