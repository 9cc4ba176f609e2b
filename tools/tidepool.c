/*
 * tidepool: the command-line tool.
 *
 *   tidepool replay [options] FILE...   replay allocation traces through tidepool on a simulated device
 *   tidepool version
 */
#include "plot.h"
#include "replay.h"
#include "timeline.h"
#include "tidepool.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RUNS 64

static void usage(FILE *f)
{
    fputs("usage: tidepool replay [options] FILE...\n"
          "       tidepool plot [options] FILE -o OUT.svg\n"
          "       tidepool stats [--bytes] STATS.json\n"
          "       tidepool config\n"
          "       tidepool version\n"
          "\n"
          "replay: replays allocation traces (tidepool CSV, RMM log CSV, plain or .gz; a PyTorch\n"
          "snapshot converted by tools/torch_snapshot_to_csv.py) through tidepool on a simulated device,\n"
          "and reports peak live against peak reserved memory, device calls, pending frees drained, time\n"
          "per operation, and what tide_empty_cache gives back.\n"
          "plot: replays one trace with the history on and draws allocated, pending-free and reserved\n"
          "memory over time, with segment reservations and releases marked, as an SVG.\n"
          "stats: prints a statistics JSON (tide_stats_json, tidepool.torch.memory_stats) as a table;\n"
          "every number as read, --bytes: sizes too, in bytes rather than KiB, MiB, GiB or TiB.\n"
          "\n"
          "options (replay and plot):\n"
          "  --conf STR            tidepool config (\"limit:8GiB,max_split_size_mb:256\"); give it\n"
          "                        several times to compare configurations side by side\n"
          "  --json                print a machine-readable summary instead\n"
          "  --passes N            replay each trace N times back to back (a long run); default 1\n"
          "  --empty-cache-every N call tide_empty_cache every N operations; default never\n"
          "  --device-work MODE    none: no kernels, a free is reusable at once, as on one CUDA\n"
          "                        stream (the setting of the figures README.md and\n"
          "                        docs/performance.md give; the same every run). refs: each\n"
          "                        allocation is used by a simulated kernel that holds a reference\n"
          "                        until it completes, so frees go pending and the peaks depend on\n"
          "                        the kernels' timing, which varies from run to run. Default none\n"
          "  --kernel-delay-us N   a kernel completes N microseconds after launch; default 20\n"
          "  --inflight N          kernels a stream holds before the host waits (the launch\n"
          "                        queue); default 64\n"
          "  --device-memory SIZE  simulated device memory (\"80GiB\"); default 80GiB\n"
          "  --check               run tide_check after every operation (slow)\n"
          "  --history N           keep a history of the last N events during the replay\n"
          "  --history-stacks      record each event's native call stack too\n"
          "  --calls-out FILE      write the driver calls that reserved, released, mapped or\n"
          "                        unmapped memory as CSV (op,call,bytes): op is the index of\n"
          "                        the trace operation each came in, counted over all passes\n"
          "  --history-out FILE    write the history as JSON, every event in its exact order\n"
          "                        (TIDE_HISTORY_ORDERED; implies --history if not given)\n"
          "  --snapshot-out FILE   write a snapshot (every segment and block) as JSON at the end\n"
          "  --no-progress         no progress bar (shown on a terminal by default)\n"
          "  --no-chart            leave out the memory-over-time chart\n"
          "  -o FILE               plot: the SVG to write\n",
          f);
}

/* A whole number written in decimal digits alone (no sign, no space, no unit, no point) that fits 64
 * bits: the library's size parser reads it, so that every number the command takes is read one way. */
static int parse_count(const char *s, unsigned long long *out)
{
    uint64_t v;
    if (!*s || strspn(s, "0123456789") != strlen(s) || tide_parse_size(s, &v) != TIDE_OK)
        return -1;
    *out = v;
    return 0;
}

/* A size as the configuration takes it ("80GiB", "512MB", "4096"), more than 0. */
static int parse_bytes(const char *s, unsigned long long *out)
{
    uint64_t v;
    if (tide_parse_size(s, &v) != TIDE_OK || v == 0)
        return -1;
    *out = v;
    return 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void print_json(FILE *f, const char *path, const char *conf, const struct trace *t,
                       const struct replay_options *o, const struct replay_result *r)
{
    fputs("{\n  \"trace\": ", f);
    json_string(f, path);
    fputs(",\n  \"config\": ", f);
    json_string(f, conf ? conf : "");
    fprintf(f, ",\n  \"device_work\": \"%s\"", o->work == REPLAY_WORK_REFS ? "refs" : "none");
    fprintf(f, ",\n  \"passes\": %u", r->passes);
    fprintf(f, ",\n  \"ops\": %llu", (unsigned long long)r->ops);
    fprintf(f, ",\n  \"allocs\": %llu", (unsigned long long)r->allocs);
    fprintf(f, ",\n  \"frees\": %llu", (unsigned long long)r->frees);
    fprintf(f, ",\n  \"streams\": %u", t->nstreams);
    fprintf(f, ",\n  \"skipped_frees\": %zu", t->skipped_frees);
    fprintf(f, ",\n  \"peak_live_bytes\": %llu", (unsigned long long)r->peak_live_bytes);
    fprintf(f, ",\n  \"peak_reserved_bytes\": %llu", (unsigned long long)r->peak_reserved_bytes);
    fprintf(f, ",\n  \"peak_reserved_over_live\": %.4f", r->ratio);
    fprintf(f, ",\n  \"peak_in_use_bytes\": %llu", (unsigned long long)r->peak_in_use_bytes);
    fprintf(f, ",\n  \"peak_reserved_over_in_use\": %.4f", r->ratio_in_use);
    fprintf(f, ",\n  \"device_allocs\": %llu", (unsigned long long)r->device_allocs);
    fprintf(f, ",\n  \"device_frees\": %llu", (unsigned long long)r->device_frees);
    fprintf(f, ",\n  \"device_allocs_first_pass\": %llu", (unsigned long long)r->device_allocs_first_pass);
    fprintf(f, ",\n  \"pending_free_drained\": %llu", (unsigned long long)r->pending_drained);
    fprintf(f, ",\n  \"peak_pending_free_blocks\": %llu", (unsigned long long)r->peak_pending_blocks);
    fprintf(f, ",\n  \"empty_cache_calls\": %llu", (unsigned long long)r->empty_cache_calls);
    fprintf(f, ",\n  \"reserved_after_empty_cache_bytes\": %llu",
            (unsigned long long)r->reserved_after_empty_cache_bytes);
    fprintf(f, ",\n  \"backend_held_after_empty_cache_bytes\": %llu",
            (unsigned long long)r->backend_held_after_empty_cache_bytes);
    fprintf(f, ",\n  \"pending_after_empty_cache_blocks\": %llu",
            (unsigned long long)r->pending_after_empty_cache_blocks);
    fprintf(f, ",\n  \"seconds\": %.6f", r->seconds);
    fprintf(f, ",\n  \"ns_per_op\": %.1f", r->ns_per_op);
    fputs(",\n  \"pass_peak_reserved_bytes\": [", f);
    for (unsigned i = 0; i < r->passes; i++)
        fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)r->pass_peak_reserved[i]);
    fputs("],\n  \"pass_end_reserved_bytes\": [", f);
    for (unsigned i = 0; i < r->passes; i++)
        fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)r->pass_end_reserved[i]);
    fputs("],\n  \"reserved_after_each_empty_cache_bytes\": [", f);
    for (uint64_t i = 0; i < r->empty_cache_calls && i < REPLAY_FLOORS; i++)
        fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)r->floors[i]);
    fputs("]\n}", f);
}

static void print_summary(FILE *f, const char *path, const char *conf, const struct trace *t,
                          const struct replay_options *o, const struct replay_result *r, bool chart)
{
    char a[32], b[32], c[32];
    bool utf8 = false;
    const char *lang = getenv("LC_ALL");
    if (!lang || !*lang)
        lang = getenv("LANG");
    utf8 = lang && (strstr(lang, "UTF-8") || strstr(lang, "utf8"));
    fprintf(f, "tidepool replay %s\n", path);
    fprintf(f, "  %zu allocations, %zu frees, %u stream%s (%s format)", t->nallocs, t->nfrees,
            t->nstreams, t->nstreams == 1 ? "" : "s", t->format);
    if (t->nempty_caches)
        fprintf(f, ", %zu empty_cache call%s", t->nempty_caches, t->nempty_caches == 1 ? "" : "s");
    if (r->passes > 1)
        fprintf(f, ", replayed %u times", r->passes);
    if (t->skipped_frees)
        fprintf(f, "\n  %zu free%s of memory allocated before the log began, skipped", t->skipped_frees,
                t->skipped_frees == 1 ? "" : "s");
    fprintf(f, "\n  simulated device %s; config %s%s%s\n",
            human_bytes(o->device_bytes ? o->device_bytes : 80ull << 30, a), conf && *conf ? "\"" : "",
            conf && *conf ? conf : "(default)", conf && *conf ? "\"" : "");
    if (o->work == REPLAY_WORK_REFS)
        fprintf(f, "  device work: each allocation is used by a kernel that holds a reference until "
                "it completes, %u us after launch\n", o->kernel_delay_us);
    else
        fprintf(f, "  device work: none: a free is reusable at once, as on one CUDA stream (the figures of\n"
                "  README.md and docs/performance.md); --device-work refs has kernels hold each block\n");
    fprintf(f, "\n");
    fprintf(f, "  peak live            %12s   allocated by the program and not yet freed\n",
            human_bytes(r->peak_live_bytes, a));
    if (o->work == REPLAY_WORK_REFS)
        fprintf(f, "  peak in use          %12s   live, or freed while a kernel still used it: the floor\n",
                human_bytes(r->peak_in_use_bytes, a));
    fprintf(f, "  peak reserved        %12s   %.3f x peak live", human_bytes(r->peak_reserved_bytes, b),
            r->ratio);
    if (o->work == REPLAY_WORK_REFS)
        fprintf(f, ", %.3f x peak in use", r->ratio_in_use);
    fputc('\n', f);
    fprintf(f, "  device allocations   %12llu   device frees %llu (tide_empty_cache included)\n",
            (unsigned long long)r->device_allocs, (unsigned long long)r->device_frees);
    if (o->work == REPLAY_WORK_REFS || r->pending_drained)
        fprintf(f, "  pending frees        %12llu   blocks freed while the device still used them, all "
                "drained (peak %llu at once)\n", (unsigned long long)r->pending_drained,
                (unsigned long long)r->peak_pending_blocks);
    fprintf(f, "  time                 %10.3f s   %.0f ns per operation%s\n", r->seconds, r->ns_per_op,
            o->work == REPLAY_WORK_REFS ? " (simulated kernels included)" : "");
    if (r->passes > 1) {
        fprintf(f, "  reserved at the end of each pass:");
        for (unsigned i = 0; i < r->passes; i++) {
            if (i == 8 && r->passes > 10) {
                fprintf(f, " ...");
                i = r->passes - 2;
                continue;
            }
            fprintf(f, " %s", human_bytes(r->pass_end_reserved[i], a));
        }
        fprintf(f, "\n");
    }
    if (chart && r->timeline_n) {
        fprintf(f, "\n  memory over time (%s live, %s reserved)\n", utf8 ? "\u2588" : "#",
                utf8 ? "\u2591" : ".");
        timeline_print(f, r->timeline_live, r->timeline_reserved, r->timeline_op, r->timeline_n, 64,
                       10, utf8);
    }
    bool clean = r->reserved_after_empty_cache_bytes == 0 && r->backend_held_after_empty_cache_bytes == 0;
    fprintf(f, "\n  after tide_empty_cache: reserved %s, held by the backend %s%s\n",
            human_bytes(r->reserved_after_empty_cache_bytes, a),
            human_bytes(r->backend_held_after_empty_cache_bytes, c),
            clean ? ": everything was given back" : ": NOT everything was given back");
}

static void print_table_header(FILE *f)
{
    fprintf(f, "%-26s %-34s %11s %11s %13s %7s %8s %8s %8s\n", "trace", "config", "peak live",
            "peak in use", "peak reserved", "ratio", "dev alloc", "pending", "ns/op");
}

static void print_table_row(FILE *f, const char *path, const char *conf, const struct replay_result *r)
{
    char a[32], b[32], c[32];
    fprintf(f, "%-26s %-34s %11s %11s %13s %7.3f %8llu %8llu %8.0f\n", base_name(path),
            conf && *conf ? conf : "(default)", human_bytes(r->peak_live_bytes, a),
            human_bytes(r->peak_in_use_bytes, c), human_bytes(r->peak_reserved_bytes, b), r->ratio,
            (unsigned long long)r->device_allocs,
            (unsigned long long)r->pending_drained, r->ns_per_op);
}

/* What the end of a replay writes: the history, the snapshot, the plot. */
struct outputs {
    const char *history, *snapshot, *plot, *title, *calls;
};

static int write_text(const char *path, const char *text, char *err, size_t errcap)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errcap, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    bool written = fputs(text, f) >= 0;
    int saved = errno;
    /* fclose is called once, whatever happened: a second call on a failed close is undefined. */
    if (fclose(f) != 0 || !written) {
        snprintf(err, errcap, "cannot write %s: %s", path, strerror(written ? errno : saved));
        return -1;
    }
    return 0;
}

static int write_outputs(tide_allocator *t, void *arg, char *err, size_t errcap)
{
    const struct outputs *out = arg;
    char *text = NULL;
    if (out->history) {
        if (tide_history_json(t, &text) != TIDE_OK) {
            snprintf(err, errcap, "%s", tide_last_error());
            return -1;
        }
        int rc = write_text(out->history, text, err, errcap);
        tide_string_free(text);
        if (rc)
            return rc;
    }
    if (out->snapshot) {
        if (tide_snapshot_json(t, &text) != TIDE_OK) {
            snprintf(err, errcap, "%s", tide_last_error());
            return -1;
        }
        int rc = write_text(out->snapshot, text, err, errcap);
        tide_string_free(text);
        if (rc)
            return rc;
    }
    if (out->plot) {
        size_t cap = 1 << 20, n = 0;
        tide_event *events = NULL;
        for (;;) { /* read all of it: grow until a read comes back short */
            free(events);
            events = malloc(cap * sizeof *events);
            if (!events || tide_history_read(t, events, cap, &n, NULL) != TIDE_OK) {
                free(events);
                snprintf(err, errcap, "reading the history: out of host memory");
                return -1;
            }
            if (n < cap)
                break;
            cap *= 2;
        }
        FILE *f = fopen(out->plot, "w");
        int rc = f ? plot_svg(f, events, n, out->title) : -1;
        if (f && fclose(f) != 0)
            rc = -1;
        free(events);
        if (rc) {
            snprintf(err, errcap, "cannot write the plot to %s: %s", out->plot, f ? "no events, or a write failed"
                                                                                : strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* --calls-out: the replay's driver calls, one CSV line each. */
static int write_calls(const char *path, const struct replay_result *r, char *err, size_t errcap)
{
    static const char *const names[] = {"reserve", "release", "map", "unmap"};
    if (r->calls_lost) {
        snprintf(err, errcap, "out of host memory for the log of driver calls: %s not written", path);
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errcap, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "op,call,bytes\n");
    for (size_t i = 0; i < r->ncalls; i++)
        fprintf(f, "%llu,%s,%llu\n", (unsigned long long)r->calls[i].op, names[r->calls[i].kind],
                (unsigned long long)r->calls[i].bytes);
    if (fclose(f) != 0) {
        snprintf(err, errcap, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* What tidepool replay and tidepool plot were asked to do. */
struct replay_cli {
    bool plot;                        /* tidepool plot */
    const char *name;                 /* "tidepool replay" or "tidepool plot", for messages */
    struct replay_options o;
    const char *confs[MAX_RUNS];
    int nconfs;
    const char *files[MAX_RUNS];
    int nfiles;
    bool json, chart, progress;
    struct outputs out;
};

/* Reads the command line into *cli: -1 to go on, else the exit status (0 for --help, 2 for bad usage,
 * said on stderr). */
static int parse_replay_args(int argc, char **argv, struct replay_cli *cli)
{
    bool plot = cli->plot;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long long n;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(arg, "--json")) {
            cli->json = true;
        } else if (!strcmp(arg, "--no-chart")) {
            cli->chart = false;
        } else if (!strcmp(arg, "--history-stacks")) {
            cli->o.history_flags |= TIDE_HISTORY_STACKS;
        } else if (!strcmp(arg, "--no-progress")) {
            cli->progress = false;
        } else if (!strcmp(arg, "--check")) {
            cli->o.check_every_op = true;
        } else if (arg[0] == '-' && !val) {
            fprintf(stderr, "%s: %s needs a value\n", cli->name, arg);
            return 2;
        } else if (!strcmp(arg, "--conf")) {
            if (cli->nconfs == MAX_RUNS) {
                fprintf(stderr, "%s: at most %d --conf\n", cli->name, MAX_RUNS);
                return 2;
            }
            if (tide_config_check(val, "--conf") != TIDE_OK) {
                fprintf(stderr, "%s: %s\n", cli->name, tide_last_error());
                return 2;
            }
            cli->confs[cli->nconfs++] = val;
            i++;
        } else if (!strcmp(arg, "--passes")) {
            if (parse_count(val, &n) || n == 0 || n > 100000) {
                fprintf(stderr, "%s: --passes takes a number from 1 to 100000, not '%s'\n", cli->name, val);
                return 2;
            }
            cli->o.passes = (unsigned)n;
            i++;
        } else if (!strcmp(arg, "--empty-cache-every")) {
            if (parse_count(val, &n)) {
                fprintf(stderr, "%s: --empty-cache-every takes a number of operations, not '%s'\n", cli->name, val);
                return 2;
            }
            cli->o.empty_cache_every = (size_t)n;
            i++;
        } else if (!strcmp(arg, "--device-work")) {
            if (!strcmp(val, "refs"))
                cli->o.work = REPLAY_WORK_REFS;
            else if (!strcmp(val, "none"))
                cli->o.work = REPLAY_WORK_NONE;
            else {
                fprintf(stderr, "%s: --device-work is 'refs' or 'none', not '%s'\n", cli->name, val);
                return 2;
            }
            i++;
        } else if (!strcmp(arg, "--kernel-delay-us")) {
            if (parse_count(val, &n) || n > 10000000) {
                fprintf(stderr, "%s: --kernel-delay-us takes microseconds, not '%s'\n", cli->name, val);
                return 2;
            }
            cli->o.kernel_delay_us = (uint32_t)n;
            i++;
        } else if (!strcmp(arg, "--inflight")) {
            if (parse_count(val, &n) || n == 0 || n > 1000000) {
                fprintf(stderr, "%s: --inflight takes a number of kernels, not '%s'\n", cli->name, val);
                return 2;
            }
            cli->o.queue_depth = (uint32_t)n;
            i++;
        } else if (!strcmp(arg, "--history")) {
            if (parse_count(val, &n) || n == 0 || n > (1ull << 26)) {
                fprintf(stderr, "%s: --history takes a number of events from 1 to %llu, not '%s'\n", cli->name,
                        1ull << 26, val);
                return 2;
            }
            cli->o.history_capacity = (size_t)n;
            i++;
        } else if (!strcmp(arg, "--history-out")) {
            cli->out.history = val;
            i++;
        } else if (!strcmp(arg, "--calls-out")) {
            cli->out.calls = val;
            cli->o.record_calls = true;
            i++;
        } else if (!strcmp(arg, "--snapshot-out")) {
            cli->out.snapshot = val;
            i++;
        } else if (!strcmp(arg, "-o") && plot) {
            cli->out.plot = val;
            i++;
        } else if (!strcmp(arg, "--device-memory")) {
            if (parse_bytes(val, &n)) {
                fprintf(stderr, "%s: --device-memory takes a size like 80GiB, not '%s'\n", cli->name, val);
                return 2;
            }
            cli->o.device_bytes = n;
            i++;
        } else if (arg[0] == '-') {
            fprintf(stderr, "%s: unknown option %s (see %s --help)\n", cli->name, arg, cli->name);
            return 2;
        } else {
            if (cli->nfiles == MAX_RUNS) {
                fprintf(stderr, "%s: at most %d files\n", cli->name, MAX_RUNS);
                return 2;
            }
            cli->files[cli->nfiles++] = arg;
        }
    }
    if (cli->nfiles == 0) {
        usage(stderr);
        return 2;
    }
    /* tide_create reads it too, once per replay; a bad one is bad usage, said once, before any work. */
    const char *env = getenv("TIDEPOOL_CONF");
    if (env && tide_config_check(env, "TIDEPOOL_CONF") != TIDE_OK) {
        fprintf(stderr, "%s: %s\n", cli->name, tide_last_error());
        return 2;
    }
    if (plot && (!cli->out.plot || cli->nfiles != 1 || cli->nconfs > 1)) {
        fprintf(stderr, "%s: give one trace, at most one --conf, and -o OUT.svg\n", cli->name);
        return 2;
    }
    if ((cli->out.history || cli->out.snapshot || cli->out.plot || cli->out.calls) &&
        cli->nfiles * (cli->nconfs ? cli->nconfs : 1) > 1) {
        fprintf(stderr, "%s: --history-out, --snapshot-out and --calls-out take one trace and one --conf\n",
                cli->name);
        return 2;
    }
    return -1;
}

/* Replays every file under every configuration, printing as asked; the exit status. */
static int run_replays(struct replay_cli *cli)
{
    cli->o.progress = cli->progress && !cli->json && isatty(STDERR_FILENO);
    if (cli->out.history || cli->out.snapshot || cli->out.plot) {
        cli->o.at_end = write_outputs;
        cli->o.at_end_arg = &cli->out;
    }
    if (cli->nconfs == 0)
        cli->confs[cli->nconfs++] = NULL;
    bool table = cli->nfiles * cli->nconfs > 1;
    if (cli->json && table)
        printf("[\n");
    else if (table)
        print_table_header(stdout);
    int status = 0, printed = 0;
    for (int fi = 0; fi < cli->nfiles; fi++) {
        struct trace t;
        char err[512];
        if (trace_load(cli->files[fi], &t, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", cli->name, err);
            status = 1;
            continue;
        }
        if ((cli->out.history || cli->out.plot) && !cli->o.history_capacity) /* room for every event of the replay */
            cli->o.history_capacity = 3 * t.nops * (cli->o.passes ? cli->o.passes : 1) + 4096;
        /* A history written out or drawn is looked at, or made into a trace: every event in its place
         * matters more than the cost of recording it. */
        if (cli->out.history || cli->out.plot)
            cli->o.history_flags |= TIDE_HISTORY_ORDERED;
        cli->out.title = base_name(cli->files[fi]);
        for (int ci = 0; ci < cli->nconfs; ci++) {
            struct replay_result r;
            cli->o.config = cli->confs[ci];
            if (replay_run(&t, &cli->o, &r, err, sizeof err) != 0) {
                fprintf(stderr, "%s %s%s%s: %s\n", cli->name, cli->files[fi], cli->confs[ci] ? " --conf " : "",
                        cli->confs[ci] ? cli->confs[ci] : "", err);
                status = 1;
                continue;
            }
            if (cli->out.calls && write_calls(cli->out.calls, &r, err, sizeof err) != 0) {
                fprintf(stderr, "%s: %s\n", cli->name, err);
                status = 1;
            }
            if (cli->plot) {
                printf("wrote %s\n", cli->out.plot);
            } else if (cli->json) {
                if (printed++)
                    printf(",\n");
                print_json(stdout, cli->files[fi], cli->confs[ci], &t, &cli->o, &r);
                if (!table)
                    printf("\n");
            } else if (table) {
                print_table_row(stdout, cli->files[fi], cli->confs[ci], &r);
            } else {
                print_summary(stdout, cli->files[fi], cli->confs[ci], &t, &cli->o, &r, cli->chart);
            }
            if (r.reserved_after_empty_cache_bytes || r.backend_held_after_empty_cache_bytes) {
                fprintf(stderr, "%s %s: tide_empty_cache left memory reserved\n", cli->name, cli->files[fi]);
                status = 1;
            }
            replay_result_free(&r);
        }
        trace_free(&t);
    }
    if (cli->json && table)
        printf("\n]\n");
    return status;
}

static int cmd_replay(int argc, char **argv, bool plot)
{
    struct replay_cli cli = {.plot = plot, .name = plot ? "tidepool plot" : "tidepool replay", .chart = true,
                             .progress = true};
    /* No device work by default: the peaks are then the trace's and the policy's alone, the same
     * every run and the same as on one CUDA stream, which is what the documented figures are. */
    cli.o.work = REPLAY_WORK_NONE;
    cli.o.kernel_delay_us = 20;
    cli.o.queue_depth = 64;
    cli.o.timeline_points = 256;
    int status = parse_replay_args(argc, argv, &cli);
    return status >= 0 ? status : run_replays(&cli);
}

/* ---- tidepool stats: a statistics JSON as a table ----------------------------------------------------- */

#define MAX_STATS 512

struct stat_entry {
    char key[96];
    bool negative;      /* the value is -magnitude: a statistic is an int64_t or a uint64_t */
    uint64_t magnitude;
};

static void skip_space(const char **p)
{
    while (**p == ' ' || **p == '\n' || **p == '\r' || **p == '\t')
        (*p)++;
}

/* A JSON integer (RFC 8259: -?(0|[1-9][0-9]*), with no fraction or exponent after it) at *p, within
 * what a statistic can be (an int64_t or a uint64_t), read exactly; *p moves past it. */
static bool json_integer(const char **p, struct stat_entry *e)
{
    const char *q = *p;
    bool negative = *q == '-';
    q += negative;
    const char *digits = q;
    if (*q == '0')
        q++;
    else if (*q >= '1' && *q <= '9')
        while (*q >= '0' && *q <= '9')
            q++;
    else
        return false;
    if (*q == '.' || *q == 'e' || *q == 'E') /* no statistic has a fraction, and 1e3 is written 1000 */
        return false;
    char buf[24];
    uint64_t v;
    if ((size_t)(q - digits) >= sizeof buf)
        return false;
    memcpy(buf, digits, (size_t)(q - digits));
    buf[q - digits] = '\0';
    if (tide_parse_size(buf, &v) != TIDE_OK || (negative && v > (uint64_t)1 << 63))
        return false;
    e->negative = negative && v != 0;
    e->magnitude = v;
    *p = q;
    return true;
}

/* Reads {"key": number, ...} strictly; returns the count, or -1 with a message naming the byte offset. */
static int read_flat_json(const char *text, struct stat_entry *out, int cap, char *err, size_t errcap)
{
    const char *p = text;
    int n = 0;
    skip_space(&p);
    if (*p != '{') {
        snprintf(err, errcap, "at byte %ld: expected a JSON object ({)", (long)(p - text));
        return -1;
    }
    p++;
    skip_space(&p);
    if (*p == '}')
        return 0;
    for (;;) {
        skip_space(&p);
        if (*p != '"') {
            snprintf(err, errcap, "at byte %ld: expected a \"key\"", (long)(p - text));
            return -1;
        }
        const char *end = p + 1;
        while (*end && *end != '"' && *end != '\\')
            end++;
        if (*end != '"' || end - p - 1 >= (long)sizeof out->key) {
            snprintf(err, errcap, "at byte %ld: a key that does not end, holds an escape, or is too long",
                     (long)(p - text));
            return -1;
        }
        if (n == cap) {
            snprintf(err, errcap, "more than %d statistics", cap);
            return -1;
        }
        memcpy(out[n].key, p + 1, (size_t)(end - p - 1));
        out[n].key[end - p - 1] = '\0';
        p = end + 1;
        skip_space(&p);
        if (*p != ':') {
            snprintf(err, errcap, "at byte %ld: expected ':' after \"%.64s\"", (long)(p - text), out[n].key);
            return -1;
        }
        p++;
        skip_space(&p);
        if (!json_integer(&p, &out[n])) {
            snprintf(err, errcap, "at byte %ld: the value of \"%.64s\" is not a number a statistic can have "
                     "(a whole number from -2^63 to 2^64 - 1, with no fraction or exponent)", (long)(p - text),
                     out[n].key);
            return -1;
        }
        n++;
        skip_space(&p);
        if (*p == '}')
            return n;
        if (*p != ',') {
            snprintf(err, errcap, "at byte %ld: expected ',' or '}' after the value of \"%.64s\"",
                     (long)(p - text), out[n - 1].key);
            return -1;
        }
        p++;
    }
}

/* The whole of a file as a NUL-terminated text (up to max bytes), or NULL with a message. */
static char *read_whole_file(const char *path, size_t max, char *err, size_t errcap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errcap, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t len = 0, cap = 1 << 16;
    char *text = malloc(cap);
    for (;;) {
        if (!text) {
            snprintf(err, errcap, "out of memory reading %s", path);
            break;
        }
        len += fread(text + len, 1, cap - 1 - len, f);
        if (ferror(f)) {
            snprintf(err, errcap, "cannot read %s: %s", path, errno == EISDIR ? "it is a directory"
                                                                               : strerror(errno));
            break;
        }
        if (feof(f)) {
            fclose(f);
            text[len] = '\0';
            if (strlen(text) != len) {
                snprintf(err, errcap, "%s holds a NUL byte: not a JSON text", path);
                free(text);
                return NULL;
            }
            return text;
        }
        if (cap > max) {
            snprintf(err, errcap, "%s is larger than %zu MiB", path, max >> 20);
            break;
        }
        cap *= 2;
        char *more = realloc(text, cap);
        if (!more)
            free(text);
        text = more;
    }
    free(text);
    fclose(f);
    return NULL;
}

static void format_stat(char *buf, const char *name, const struct stat_entry *e, bool in_bytes)
{
    char b[32];
    const char *sign = e->negative ? "-" : "";
    if (strstr(name, "bytes") && !in_bytes)
        snprintf(buf, 32, "%s%s", sign, human_bytes(e->magnitude, b));
    else
        snprintf(buf, 32, "%s%llu", sign, (unsigned long long)e->magnitude);
}

static int cmd_stats(int argc, char **argv)
{
    bool in_bytes = argc == 2 && !strcmp(argv[0], "--bytes");
    argc -= in_bytes;
    argv += in_bytes;
    if (argc != 1) {
        fprintf(stderr, "usage: tidepool stats [--bytes] STATS.json (or a snapshot JSON)\n");
        return 2;
    }
    char err[256];
    char *text = read_whole_file(argv[0], (size_t)1 << 30, err, sizeof err);
    if (!text) {
        fprintf(stderr, "tidepool stats: %s\n", err);
        return 1;
    }
    static struct stat_entry st[MAX_STATS];
    /* a snapshot (tide_snapshot_json, tidepool replay --snapshot-out) carries its statistics inside */
    const char *inner = strstr(text, "\"stats\": {");
    int n = read_flat_json(inner ? inner + 9 : text, st, MAX_STATS, err, sizeof err);
    free(text);
    if (n < 0) {
        fprintf(stderr, "tidepool stats: %s: %s\n", argv[0], err);
        return 2;
    }
    if (n == 0) {
        fprintf(stderr, "tidepool stats: %s holds no statistics\n", argv[0]);
        return 2;
    }
    static const char *pools[] = {"all", "small_pool", "large_pool"};
    bool shown[MAX_STATS] = {false};
    /* Two tables: current and peak, then what each statistic gained and lost (allocated, freed). */
    static const char *const leaves[2][2] = {{"current", "peak"}, {"allocated", "freed"}};
    static const char *const heads[2][6] = {{"all", "all peak", "small", "small peak", "large", "large peak"},
                                            {"allocated", "freed", "small alloc", "small freed", "large alloc",
                                             "large freed"}};
    for (int table = 0; table < 2; table++) {
        char first[32];
        snprintf(first, sizeof first, ".all.%s", leaves[table][0]);
        printf("%-22s", "");
        for (int c = 0; c < 6; c++)
            printf(" %12s", heads[table][c]);
        printf("\n");
        for (int i = 0; i < n; i++) {
            const char *dot = strchr(st[i].key, '.');
            if (!dot || shown[i] || strcmp(dot, first) != 0)
                continue;
            char name[96];
            snprintf(name, sizeof name, "%.*s", (int)(dot - st[i].key), st[i].key);
            printf("%-22s", name);
            for (int pool = 0; pool < 3; pool++)
                for (int leaf = 0; leaf < 2; leaf++) {
                    char want[160], cell[32] = "-";
                    snprintf(want, sizeof want, "%s.%s.%s", name, pools[pool], leaves[table][leaf]);
                    for (int j = 0; j < n; j++)
                        if (!strcmp(st[j].key, want)) {
                            format_stat(cell, name, &st[j], in_bytes);
                            shown[j] = true;
                        }
                    printf(" %12s", cell);
                }
            printf("\n");
        }
        printf("\n");
    }
    for (int i = 0; i < n; i++) {
        if (shown[i])
            continue;
        char cell[32];
        format_stat(cell, st[i].key, &st[i], in_bytes);
        printf("%-40s %s\n", st[i].key, cell);
    }
    return 0;
}

/* tidepool config: every configuration key, as the Markdown table README.md shows. */
static int cmd_config(int argc, char **argv)
{
    (void)argv;
    if (argc != 0) {
        fprintf(stderr, "usage: tidepool config (it takes no arguments)\n");
        return 2;
    }
    printf("| key | default | what |\n|---|---|---|\n");
    const tide_config_key *k;
    for (size_t i = 0; (k = tide_config_key_at(i)) != NULL; i++)
        printf("| `%s` | %s | %s |\n", k->name, k->default_value, k->doc);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "replay"))
        return cmd_replay(argc - 2, argv + 2, false);
    if (!strcmp(argv[1], "plot"))
        return cmd_replay(argc - 2, argv + 2, true);
    if (!strcmp(argv[1], "stats"))
        return cmd_stats(argc - 2, argv + 2);
    if (!strcmp(argv[1], "config"))
        return cmd_config(argc - 2, argv + 2);
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("tidepool %d.%d.%d\n", TIDE_VERSION_MAJOR, TIDE_VERSION_MINOR, TIDE_VERSION_PATCH);
        return 0;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "tidepool: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
