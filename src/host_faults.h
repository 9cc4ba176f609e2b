/*
 * Host-memory fault injection, for tests only: the library built again with this header forced in
 * front of every source (tests/CMakeLists.txt, tidepool_host_faults) takes its host memory through
 * the wrappers of host_faults.c, which can be told to fail the Nth allocation. The ordinary builds
 * never see it.
 */
#ifndef TIDE_HOST_FAULTS_H
#define TIDE_HOST_FAULTS_H

/* Forced in front of every source, so before history.c asks for dladdr: ask for it here. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h> /* first, so that the names below are declared before they become macros */
#include <string.h>

void *tide__faulty_malloc(size_t size);
void *tide__faulty_calloc(size_t n, size_t size);
void *tide__faulty_realloc(void *p, size_t size);
void *tide__faulty_aligned_alloc(size_t alignment, size_t size);
char *tide__faulty_strdup(const char *s);

/* The allocation to fail: the nth from now (1: the next one); 0: none. Every allocation is counted. */
void tide__host_faults_arm(unsigned long nth);
/* Host allocations made (or refused) since the program started; and how many were refused. */
unsigned long tide__host_faults_calls(void);
unsigned long tide__host_faults_refused(void);
/* Of the calls, those of aligned_alloc: the library uses it only for heaps and chunks of block structs,
 * so a test can see when a heap ran out of spare block structs and made more. */
unsigned long tide__host_faults_aligned_calls(void);

#define malloc(size) tide__faulty_malloc(size)
#define calloc(n, size) tide__faulty_calloc(n, size)
#define realloc(p, size) tide__faulty_realloc(p, size)
#define aligned_alloc(alignment, size) tide__faulty_aligned_alloc(alignment, size)
#define strdup(s) tide__faulty_strdup(s)

#endif /* TIDE_HOST_FAULTS_H */
