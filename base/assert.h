/*
 * base/assert.h: SHOAL_ASSERT, for caller bugs.
 *
 * STYLE.md: bugs abort, bad input returns an error. SHOAL_ASSERT(cond)
 * checks what only a bug in our own code can break (a type the caller was
 * told is unsupported, an index past what it was given); when cond is
 * false it prints "file:line: assertion failed: cond" on stderr and calls
 * abort(). It is never compiled out (NDEBUG does not change it). Never use
 * it on bytes from the network, a file or a client: those get an error.
 */
#ifndef SHOAL_BASE_ASSERT_H
#define SHOAL_BASE_ASSERT_H

#define SHOAL_ASSERT(cond) ((cond) ? (void)0 : shoal_assert_fail(__FILE__, __LINE__, #cond))

/* Print file:line and the failed expression on stderr, then abort(). */
_Noreturn void shoal_assert_fail(const char *file, int line, const char *expr);

#endif
