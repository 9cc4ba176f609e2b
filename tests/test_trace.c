/*
 * Trace readers: tidepool's CSV and RMM's log, plain and gzip'd, and every kind of malformed input
 * rejected with the line number and what was wrong.
 */
#include "harness.h"
#include "trace.h"

#include <unistd.h>

static char dir[] = "/tmp/tidepool-trace-XXXXXX";

/* Writes text to a file named name in the test's folder (nothing if text is NULL); its path. */
static const char *write_file(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!text)
        return path;
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void expect_error(const char *name, const char *text, const char *words)
{
    const char *path = write_file(name, text);
    struct trace t;
    char err[512];
    if (trace_load(path, &t, err, sizeof err) == 0) {
        fprintf(stderr, "%s: read without error, expected \"%s\"\n", name, words);
        harness_failures++;
        trace_free(&t);
        return;
    }
    if (!strstr(err, words)) {
        fprintf(stderr, "%s: error \"%s\" does not say \"%s\"\n", name, err, words);
        harness_failures++;
    }
}

static void test_tidepool_format(void)
{
    const char *path = write_file("ok.csv", "op,id,size,stream\na,7,1024,0\na,9,512,2\nf,7,1024,0\n"
                                            "a,10,4096,2\nf,9,512,2\n");
    struct trace t;
    char err[256];
    CHECK(trace_load(path, &t, err, sizeof err) == 0);
    CHECK(t.nops == 5 && t.nallocs == 3 && t.nfrees == 2 && t.nstreams == 2);
    CHECK(strcmp(t.format, "tidepool") == 0);
    CHECK(t.ops[0].kind == TRACE_ALLOC && t.ops[0].id == 0 && t.ops[0].size == 1024);
    CHECK(t.ops[2].kind == TRACE_FREE && t.ops[2].id == 0); /* ids are made dense */
    CHECK(t.ops[4].id == 1 && t.ops[4].stream == 1); /* and streams, in order of appearance */
    trace_free(&t);
}

/* A stream's number is a name: the replay makes one simulated stream per stream the trace uses, so a
 * trace naming stream 60000 needs two (the tool once made 60001 threads, a minute's work, and then
 * failed), and one naming more than an allocator serves is refused at the line that does. */
static void test_stream_numbers_are_names(void)
{
    const char *path = write_file("sparse.csv", "op,id,size,stream\na,1,4096,60000\na,2,4096,7\n"
                                                "f,1,4096,60000\na,3,512,0\nf,2,4096,7\n");
    struct trace t;
    char err[256];
    CHECK(trace_load(path, &t, err, sizeof err) == 0);
    CHECK(t.nstreams == 3);
    CHECK(t.ops[0].stream == 1 && t.ops[1].stream == 2 && t.ops[2].stream == 1 && t.ops[3].stream == 0);
    trace_free(&t);
    size_t cap = 64 * 1100, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "op,id,size,stream\n");
    for (int i = 1; i <= 1024; i++)
        n += (size_t)snprintf(text + n, cap - n, "a,%d,512,%d\n", i, 5 * i);
    expect_error("streams.csv", text, "1025: stream 5120: the trace names more than 1023 streams");
    free(text);
}

/* "e,0,0,0": the program called empty_cache there; kept in order between the allocations. */
static void test_empty_cache_lines(void)
{
    const char *path = write_file("e.csv", "op,id,size,stream\na,1,512,0\ne,0,0,0\nf,1,512,0\ne,0,0,0\n");
    struct trace t;
    char err[256];
    CHECK(trace_load(path, &t, err, sizeof err) == 0);
    CHECK(t.nops == 4 && t.nallocs == 1 && t.nfrees == 1 && t.nempty_caches == 2);
    CHECK(t.ops[1].kind == TRACE_EMPTY_CACHE && t.ops[2].kind == TRACE_FREE && t.ops[3].kind == TRACE_EMPTY_CACHE);
    trace_free(&t);
}

static void test_rmm_format(void)
{
    const char *path = write_file("rmm.csv",
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "1,0.1,allocate,0x7f0000000000,1000,0x0\n"
        "1,0.2,free,0x7f00000f0000,64,0x0\n"          /* allocated before the log: skipped */
        "1,0.3,allocate,0x7f0000100000,2000,0x5599aa\n"
        "1,0.4,free,0x7f0000000000,1000,0x0\n"
        "1,0.5,allocate,0x7f0000000000,3000,0x5599aa\n" /* the pointer is reused after its free */
        "1,0.6,allocate failure,0x0,99999999,0x0\n");
    struct trace t;
    char err[256];
    CHECK(trace_load(path, &t, err, sizeof err) == 0);
    CHECK(strcmp(t.format, "rmm") == 0);
    CHECK(t.nallocs == 3 && t.nfrees == 1 && t.skipped_frees == 1);
    CHECK(t.nstreams == 2 && t.ops[1].stream == 1);
    trace_free(&t);
}

static void test_gzip(void)
{
    write_file("z.csv", "op,id,size,stream\na,1,512,0\nf,1,512,0\n");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "gzip -f %s/z.csv", dir);
    CHECK(system(cmd) == 0);
    char path[256];
    snprintf(path, sizeof path, "%s/z.csv.gz", dir);
    struct trace t;
    char err[256];
    CHECK(trace_load(path, &t, err, sizeof err) == 0);
    CHECK(t.nops == 2);
    trace_free(&t);
    /* A .gz that is not gzip, and the shipped traces. */
    expect_error("bad.csv.gz", "op,id,size,stream\n", "gzip could not decompress it");
    expect_error("bad2.csv.gz", "op,id,size,stream\n", "not in gzip format");
    CHECK(trace_load(TIDE_TRACES_DIR "/lstm_loop.csv.gz", &t, err, sizeof err) == 0);
    CHECK(t.nallocs == 7425);
    trace_free(&t);
}

/* A gzip file cut short ends in a cut line; the message is gzip's, not the cut line's field count. */
static void test_truncated_gzip(void)
{
    char cmd[600], path[256];
    snprintf(cmd, sizeof cmd,
             "cd %s && { echo op,id,size,stream; seq 1 20000 | sed 's/.*/a,&,4096,0/'; } | gzip -c > full.gz"
             " && head -c $(( $(wc -c < full.gz) / 2 )) full.gz > cut.csv.gz", dir);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/cut.csv.gz", dir);
    struct trace t;
    char err[256] = "";
    CHECK(trace_load(path, &t, err, sizeof err) == -1);
    CHECK(strstr(err, "gzip could not decompress it (unexpected end of file)") != NULL);
    CHECK(strstr(err, "lines were read before it stopped") != NULL);
    CHECK(strstr(err, "fields") == NULL);
    if (!strstr(err, "unexpected end of file"))
        fprintf(stderr, "got: %s\n", err);
}

static void test_directory_is_named(void)
{
    struct trace t;
    char err[256] = "";
    CHECK(trace_load(dir, &t, err, sizeof err) == -1);
    CHECK(strstr(err, "is a directory, not a trace") != NULL);
    CHECK(strstr(err, "empty") == NULL);
}

static void test_malformed_input(void)
{
    expect_error("empty.csv", "", "empty file");
    expect_error("header.csv", "a,b,c\n", "unknown format");
    expect_error("fields.csv", "op,id,size,stream\na,1,512,0\na,2,512\n", "3: expected 4 fields");
    expect_error("op.csv", "op,id,size,stream\nx,1,512,0\n", "2: op 'x' is none of");
    expect_error("empty_cache.csv", "op,id,size,stream\na,1,512,0\ne,0,512,0\n",
                 "3: an empty_cache line ('e') has id and size 0");
    expect_error("id.csv", "op,id,size,stream\na,one,512,0\n", "2: id 'one' is not a whole number");
    expect_error("size.csv", "op,id,size,stream\na,1,-5,0\n", "2: size '-5'");
    expect_error("zero.csv", "op,id,size,stream\na,1,0,0\n", "2: allocation 1 has size 0");
    expect_error("twice.csv", "op,id,size,stream\na,1,512,0\na,1,512,0\n", "3: allocation id 1 appears twice");
    expect_error("unknown.csv", "op,id,size,stream\na,1,512,0\nf,2,512,0\n", "3: free of id 2");
    expect_error("stream.csv", "op,id,size,stream\na,1,512,s\n", "2: stream 's'");
    expect_error("none.csv", "op,id,size,stream\n", "no allocations");
    expect_error("rmm_fields.csv", "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10\n",
                 "2: expected 6 fields");
    expect_error("rmm_action.csv", "Thread,Time,Action,Pointer,Size,Stream\n1,0,grab,0x10,5,0x0\n",
                 "2: action 'grab'");
    expect_error("rmm_ptr.csv", "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,zz,5,0x0\n",
                 "2: pointer 'zz'");
    expect_error("rmm_again.csv",
                 "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,5,0x0\n1,0,allocate,0x10,5,0x0\n",
                 "3: pointer 0x10 is allocated again");
    expect_error("missing.csv.gz", NULL, "cannot open");
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    RUN(test_tidepool_format);
    RUN(test_empty_cache_lines);
    RUN(test_stream_numbers_are_names);
    RUN(test_rmm_format);
    RUN(test_gzip);
    RUN(test_truncated_gzip);
    RUN(test_directory_is_named);
    RUN(test_malformed_input);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 2;
    return HARNESS_EXIT();
}
