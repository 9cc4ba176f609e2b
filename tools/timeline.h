/*
 * Memory over time, drawn in the terminal, and the byte formatting the tools share.
 */
#ifndef TIDE_TIMELINE_H
#define TIDE_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* "512 B", "1.5 MiB", "2.53 GiB" into buf. */
const char *human_bytes(uint64_t bytes, char buf[32]);

/* Draws live (solid) under reserved (shaded) memory: n samples, each at operation op[i], in a chart
 * width x height characters. utf8 picks block characters over ASCII. */
void timeline_print(FILE *f, const uint64_t *live, const uint64_t *reserved, const uint64_t *op,
                    size_t n, int width, int height, bool utf8);

#endif
