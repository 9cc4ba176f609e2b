/*
 * Memory over time as a self-contained SVG: allocated, pending-free and reserved bytes through a
 * history of events. The horizontal axis counts the program's allocations, the time a training loop
 * keeps; the program's marks (tide_annotate, such as a step's start) and its empty_cache calls are
 * drawn across the chart with their names, and every segment reserved or released is a line across
 * it too (blue, red), so that each driver call can be placed against the memory it changed.
 */
#include "plot.h"

#include "timeline.h"

#include <stdlib.h>
#include <string.h>

#define WIDTH 1200
#define HEIGHT 560
#define LEFT 90
#define RIGHT 30
#define TOP 50
#define BOTTOM 80
#define MAX_COLUMNS 1000
#define MAX_MARKS 64 /* marks drawn with their names; past this many, their lines alone */

struct series {
    uint64_t allocated, pending, reserved;
};

/* A round step for the vertical axis: a power of two bytes (so labels read 256 MiB, 512 MiB, 1 GiB),
 * with four to eight steps to the top. */
static uint64_t axis_step(uint64_t top)
{
    uint64_t step = 1;
    while (step * 8 < top)
        step *= 2;
    return step;
}

static uint64_t max3(uint64_t a, uint64_t b, uint64_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* The events replayed into columns: each column's highest point of each series, and where segments
 * were reserved and released. */
struct mark {
    size_t column;
    char name[40];
};

struct plot_columns {
    size_t columns;
    struct series *col;
    uint8_t *reserve_mark, *release_mark;
    uint64_t *allocs_before; /* allocations before each column: the horizontal axis */
    uint64_t peak, peak_allocated, peak_reserved, segments_reserved, segments_released, allocations;
    struct mark marks[MAX_MARKS];
    size_t nmarks, marks_total;
};

static void plot_columns_free(struct plot_columns *p)
{
    free(p->col);
    free(p->reserve_mark);
    free(p->release_mark);
    free(p->allocs_before);
}

static void add_mark(struct plot_columns *p, size_t column, const char *name)
{
    if (p->nmarks < MAX_MARKS) {
        p->marks[p->nmarks].column = column;
        snprintf(p->marks[p->nmarks].name, sizeof p->marks[p->nmarks].name, "%s", name);
        p->nmarks++;
    }
    p->marks_total++;
}

static int plot_columns_from_events(const tide_event *ev, size_t n, struct plot_columns *p)
{
    struct series now = {0, 0, 0};
    memset(p, 0, sizeof *p);
    p->columns = n < MAX_COLUMNS ? n : MAX_COLUMNS;
    p->col = calloc(p->columns, sizeof *p->col);
    p->reserve_mark = calloc(p->columns, 1);
    p->release_mark = calloc(p->columns, 1);
    p->allocs_before = calloc(p->columns + 1, sizeof *p->allocs_before);
    /* requested sizes by address, to subtract at free: a small open-addressing map */
    size_t cap = 1024;
    while (cap < 4 * n)
        cap *= 2;
    uint64_t *keys = calloc(cap, sizeof *keys), *vals = calloc(cap, sizeof *vals);
    if (!p->col || !p->reserve_mark || !p->release_mark || !p->allocs_before || !keys || !vals) {
        plot_columns_free(p);
        free(keys), free(vals);
        return -1;
    }
    p->peak = 1;
    for (size_t i = 0; i < n; i++) {
        const tide_event *e = &ev[i];
        size_t c = i * p->columns / n, h = (size_t)((e->addr >> 9) * 0x9E3779B97F4A7C15ull) & (cap - 1);
        if (i == 0 || c != (i - 1) * p->columns / n)
            p->allocs_before[c] = p->allocations;
        switch (e->kind) {
        case TIDE_EVENT_EMPTY_CACHE:
            add_mark(p, c, "empty_cache");
            break;
        case TIDE_EVENT_ANNOTATION:
            add_mark(p, c, e->tag ? e->tag : "mark");
            break;
        case TIDE_EVENT_ALLOC:
            p->allocations++;
            while (keys[h] && keys[h] != e->addr)
                h = (h + 1) & (cap - 1);
            keys[h] = e->addr;
            vals[h] = e->size;
            now.allocated += e->size;
            break;
        case TIDE_EVENT_FREE_REQUESTED:
            while (keys[h] && keys[h] != e->addr)
                h = (h + 1) & (cap - 1);
            if (keys[h] == e->addr) {
                now.allocated -= vals[h];
                vals[h] = e->size; /* now pending, by its block size, until completed */
            }
            now.pending += e->size;
            break;
        case TIDE_EVENT_FREE_COMPLETED:
            while (keys[h] && keys[h] != e->addr)
                h = (h + 1) & (cap - 1);
            if (keys[h] == e->addr) {
                /* tombstone, not a hole: a later lookup must still walk past it */
                keys[h] = 1;
                vals[h] = 0;
            }
            now.pending -= e->size <= now.pending ? e->size : now.pending;
            break;
        case TIDE_EVENT_SEGMENT_RESERVED:
            now.reserved += e->size;
            p->reserve_mark[c] = 1;
            p->segments_reserved++;
            break;
        case TIDE_EVENT_SEGMENT_RELEASED:
            now.reserved -= e->size <= now.reserved ? e->size : now.reserved;
            p->release_mark[c] = 1;
            p->segments_released++;
            break;
        default:
            break;
        }
        if (now.allocated > p->col[c].allocated)
            p->col[c].allocated = now.allocated;
        if (now.allocated + now.pending > p->col[c].pending)
            p->col[c].pending = now.allocated + now.pending;
        if (now.reserved > p->col[c].reserved)
            p->col[c].reserved = now.reserved;
        p->peak = max3(p->peak, now.reserved, now.allocated + now.pending);
        if (now.allocated > p->peak_allocated)
            p->peak_allocated = now.allocated;
        if (now.reserved > p->peak_reserved)
            p->peak_reserved = now.reserved;
    }
    free(keys);
    free(vals);
    return 0;
}

static void xml_text(FILE *f, const char *s)
{
    for (const char *ch = s; *ch; ch++) /* escape what XML needs */
        fputs(*ch == '<' ? "&lt;" : *ch == '>' ? "&gt;" : *ch == '&' ? "&amp;" : (char[2]){*ch, 0}, f);
}

/* A round step for the horizontal axis: 1, 2 or 5 times a power of ten, four to ten steps in all. */
static uint64_t count_step(uint64_t total)
{
    uint64_t step = 1;
    for (;;) {
        for (int m = 1; m <= 5; m += m == 1 ? 1 : 3)
            if (step * (uint64_t)m * 10 >= total)
                return step * (uint64_t)m;
        step *= 10;
    }
}

static void draw_svg(FILE *f, const struct plot_columns *p, size_t n, const char *title)
{
    double plot_w = WIDTH - LEFT - RIGHT, plot_h = HEIGHT - TOP - BOTTOM;
    uint64_t step = axis_step(p->peak);
    uint64_t top = (p->peak + step - 1) / step * step;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"13\">\n", WIDTH, HEIGHT, WIDTH, HEIGHT);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    char b1[32], b2[32];
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">", LEFT);
    xml_text(f, title);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"42\" fill=\"#555\">peak allocated %s, peak reserved %s; %llu "
               "segments reserved, %llu released; %zu events</text>\n", LEFT, human_bytes(p->peak_allocated, b1),
            human_bytes(p->peak_reserved, b2), (unsigned long long)p->segments_reserved,
            (unsigned long long)p->segments_released, n);
    /* grid and axis labels */
    for (uint64_t v = 0; v <= top; v += step) {
        double y = TOP + plot_h - (double)v / (double)top * plot_h;
        fprintf(f, "<line x1=\"%d\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, LEFT + plot_w, y, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#333\">%s</text>\n", LEFT - 8, y + 4,
                human_bytes(v, b1));
    }
    /* three filled areas, back to front: reserved, allocated + pending, allocated */
    static const struct {
        const char *name, *fill, *stroke;
    } layers[3] = {{"reserved", "#cfe3f7", "#4a90d9"}, {"pending free", "#f7d9a8", "#e08a00"},
                   {"allocated", "#9fd6a4", "#2e8b3d"}};
    for (int l = 0; l < 3; l++) {
        fprintf(f, "<polygon fill=\"%s\" stroke=\"%s\" stroke-width=\"1\" points=\"%d,%.0f", layers[l].fill,
                layers[l].stroke, LEFT, TOP + plot_h);
        for (size_t c = 0; c < p->columns; c++) {
            uint64_t v = l == 0 ? p->col[c].reserved : l == 1 ? p->col[c].pending : p->col[c].allocated;
            double x = LEFT + (double)c * plot_w / (double)(p->columns > 1 ? p->columns - 1 : 1);
            double y = TOP + plot_h - (double)v / (double)top * plot_h;
            fprintf(f, " %.1f,%.1f", x, y);
        }
        fprintf(f, " %.0f,%.0f\"/>\n", LEFT + plot_w, TOP + plot_h);
    }
    /* every segment reserved (blue) or released (red): a line across the chart, and a tick below it */
    double span = (double)(p->columns > 1 ? p->columns - 1 : 1);
    for (size_t c = 0; c < p->columns; c++) {
        double x = LEFT + (double)c * plot_w / span;
        if (p->reserve_mark[c])
            fprintf(f, "<line class=\"segment-reserved\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.0f\" "
                       "stroke=\"#2060c0\" stroke-opacity=\"0.35\" stroke-width=\"1.5\"/>\n", x, x, TOP,
                    TOP + plot_h + 14);
        if (p->release_mark[c])
            fprintf(f, "<line class=\"segment-released\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.0f\" "
                       "stroke=\"#c02020\" stroke-opacity=\"0.5\" stroke-width=\"1.5\"/>\n", x, x, TOP,
                    TOP + plot_h + 14);
    }
    /* the program's own marks: its empty_cache calls and annotations (a training step's start) */
    for (size_t m = 0; m < p->nmarks; m++) {
        double x = LEFT + (double)p->marks[m].column * plot_w / span;
        fprintf(f, "<line class=\"mark\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.0f\" stroke=\"#555\" "
                   "stroke-dasharray=\"4 3\"/>\n", x, x, TOP - 4, TOP + plot_h);
        if (p->nmarks <= 16 || m % (p->nmarks / 16 + 1) == 0) {
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#555\">", x + 3, TOP + 8);
            xml_text(f, p->marks[m].name);
            fputs("</text>\n", f);
        }
    }
    fprintf(f, "<line x1=\"%d\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#333\"/>\n", LEFT, LEFT + plot_w,
            TOP + plot_h, TOP + plot_h);
    /* the horizontal axis: the program's allocations so far */
    uint64_t xstep = count_step(p->allocations ? p->allocations : 1);
    size_t c = 0;
    for (uint64_t v = 0; v <= p->allocations; v += xstep) {
        while (c < p->columns && p->allocs_before[c] < v)
            c++;
        if (c == p->columns)
            break;
        double x = LEFT + (double)c * plot_w / span;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#333\"/>"
                   "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#333\">%llu</text>\n", x, x,
                TOP + plot_h, TOP + plot_h + 5, x, TOP + plot_h + 30, (unsigned long long)v);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">the program's allocations so far "
               "(%llu in all)%s</text>\n", LEFT + plot_w / 2, HEIGHT - 26, (unsigned long long)p->allocations,
            p->marks_total ? "; dashed: its empty_cache calls and marks" : "");
    /* legend */
    int lx = LEFT + 10, ly = HEIGHT - 8;
    for (int l = 2; l >= 0; l--, lx += 150)
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"10\" fill=\"%s\" stroke=\"%s\"/><text x=\"%d\" "
                   "y=\"%d\">%s</text>\n", lx, ly - 10, layers[l].fill, layers[l].stroke, lx + 20, ly, layers[l].name);
    fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#2060c0\" stroke-width=\"2\"/><text x=\"%d\" "
               "y=\"%d\">segment reserved</text>\n", lx, lx, ly - 11, ly, lx + 8, ly);
    lx += 150;
    fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#c02020\" stroke-width=\"2\"/><text x=\"%d\" "
               "y=\"%d\">segment released</text>\n", lx, lx, ly - 11, ly, lx + 8, ly);
    fprintf(f, "</svg>\n");
}

int plot_svg(FILE *f, const tide_event *ev, size_t n, const char *title)
{
    struct plot_columns p;
    if (n == 0 || plot_columns_from_events(ev, n, &p) != 0)
        return -1;
    draw_svg(f, &p, n, title);
    plot_columns_free(&p);
    return ferror(f) ? -1 : 0;
}
