/* The terminal chart of memory over time. */
#include "timeline.h"

#include <string.h>

const char *human_bytes(uint64_t bytes, char buf[32])
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, 32, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, 32, "%.2f %s", v, units[u]);
    return buf;
}

void timeline_print(FILE *f, const uint64_t *live, const uint64_t *reserved, const uint64_t *op,
                    size_t n, int width, int height, bool utf8)
{
    if (n == 0 || width < 2 || height < 2)
        return;
    size_t cols = n < (size_t)width ? n : (size_t)width;
    uint64_t col_live[512], col_res[512];
    if (cols > 512)
        cols = 512;
    uint64_t top = 1;
    for (size_t c = 0; c < cols; c++) {
        size_t i0 = c * n / cols, i1 = (c + 1) * n / cols;
        if (i1 <= i0)
            i1 = i0 + 1;
        col_live[c] = col_res[c] = 0;
        for (size_t i = i0; i < i1 && i < n; i++) {
            if (live[i] > col_live[c])
                col_live[c] = live[i];
            if (reserved[i] > col_res[c])
                col_res[c] = reserved[i];
        }
        if (col_res[c] > top)
            top = col_res[c];
        if (col_live[c] > top)
            top = col_live[c];
    }
    const char *solid = utf8 ? "\u2588" : "#", *shade = utf8 ? "\u2591" : ".";
    const char *axis = utf8 ? "\u2502" : "|", *corner = utf8 ? "\u2514" : "+",
               *rule = utf8 ? "\u2500" : "-";
    char label[32];
    for (int r = 0; r < height; r++) {
        /* A cell is filled when the value reaches past the middle of its band. */
        double band_mid = (double)top * ((double)(height - r) - 0.5) / height;
        if (r == 0)
            fprintf(f, "  %10s %s", human_bytes(top, label), axis);
        else
            fprintf(f, "  %10s %s", "", axis);
        for (size_t c = 0; c < cols; c++) {
            if ((double)col_live[c] >= band_mid)
                fputs(solid, f);
            else if ((double)col_res[c] >= band_mid)
                fputs(shade, f);
            else
                fputc(' ', f);
        }
        fputc('\n', f);
    }
    fprintf(f, "  %10s %s", "0", corner);
    for (size_t c = 0; c < cols; c++)
        fputs(rule, f);
    fprintf(f, "\n  %10s  op 0%*s%llu\n", "", (int)cols - 4, "op ", (unsigned long long)op[n - 1]);
}
