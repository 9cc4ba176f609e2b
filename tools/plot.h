/*
 * Memory over time as a self-contained SVG, from a history of events (tide_history_read).
 */
#ifndef TIDE_PLOT_H
#define TIDE_PLOT_H

#include "tidepool.h"

#include <stddef.h>
#include <stdio.h>

/* Writes the chart to f. Returns 0, or -1 if there are no events or host memory or writing failed. */
int plot_svg(FILE *f, const tide_event *events, size_t n, const char *title);

#endif
