/*
 * Assertions in levels, chosen when the library is built: CMake's TIDE_ASSERT_LEVEL (0 by default)
 * defines the macro of that name for every source. A failed assertion says where and what, and aborts:
 * the allocator's own structures are broken, and going on could hand out memory twice.
 *
 *   TIDE_ASSERT_NONE (0)    release builds: every assertion compiles to nothing. Its condition is
 *                           still compiled, so that it cannot rot, but never evaluated.
 *   TIDE_ASSERT_CHEAP (1)   TIDE_ASSERT: invariants that cost a few instructions, at the state
 *                           changes that matter (a block taken is FREE, a block freed is ACTIVE, a
 *                           block filed in the free index is FREE and filed nowhere, a segment the
 *                           segment map entered is found there).
 *   TIDE_ASSERT_WALKS (2)   also TIDE_ASSERT_EXPENSIVE: invariants that walk a list (a block filed or
 *                           taken out is, or is not, on its class's list). make check-sanitize and
 *                           make fuzz build at this level.
 *
 * The configuration's debug:1 and debug:2 (enum debug_level, types.h) are another thing: the validator
 * (check.c) run by the library itself in any build, when the configuration asks for it.
 */
#ifndef TIDE_ASSERTIONS_H
#define TIDE_ASSERTIONS_H

#define TIDE_ASSERT_NONE 0
#define TIDE_ASSERT_CHEAP 1
#define TIDE_ASSERT_WALKS 2

#ifndef TIDE_ASSERT_LEVEL
#define TIDE_ASSERT_LEVEL TIDE_ASSERT_NONE
#endif

/* Prints "tidepool: assertion failed" with the condition and where it stands, and aborts (error.c). */
__attribute__((noreturn, cold)) void tide__assert_failed(const char *condition, const char *file, int line,
                                                         const char *function);

#define TIDE_ASSERT_AT(level, cond)                                                                \
    do {                                                                                           \
        if (TIDE_ASSERT_LEVEL >= (level) && __builtin_expect(!(cond), 0))                          \
            tide__assert_failed(#cond, __FILE__, __LINE__, __func__);                              \
    } while (0)
#define TIDE_ASSERT(cond) TIDE_ASSERT_AT(TIDE_ASSERT_CHEAP, cond)
#define TIDE_ASSERT_EXPENSIVE(cond) TIDE_ASSERT_AT(TIDE_ASSERT_WALKS, cond)

#endif /* TIDE_ASSERTIONS_H */
