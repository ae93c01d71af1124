// testutil.h — helpers shared by the Check suites: number comparison, running the binary.
#pragma once
#include <stddef.h>

// |out − ref| ≤ atol + rtol·|ref| for every element; NaN never passes. On failure prints
// what, the first failing index, both values and the worst error to stderr; returns 0.
int tu_close(const char *what, const float *out, const double *ref, size_t n, double atol, double rtol);
int tu_close_f(const char *what, const float *out, const float *ref, size_t n, double atol, double rtol);
// Bit for bit, every element; on failure prints what, the first differing index and both
// values (with their bits) to stderr; returns 0.
int tu_same_bits(const char *what, const float *out, const float *want, size_t n);

// Runs argv (argv[0] is a path) with stdin from /dev/null; captures stdout and stderr
// (each cut at cap bytes, NUL-terminated, malloc'd; free them). Returns the exit code,
// or 128+signal. env may be NULL or "NAME=VALUE" strings added to the environment.
int tu_run(char *const argv[], char *const env[], char **out, char **err);

// Whole file as a malloc'd NUL-terminated string, or NULL when it cannot be read.
char *tu_slurp(const char *path);

// Captures this process's stderr (fd 2) between begin and end; end returns what was written
// (malloc'd). For the "said once" notice checks.
void tu_stderr_begin(void);
char *tu_stderr_end(void);

// Path of the built tiertrain binary.
const char *tu_binary(void);
// A fresh temporary directory under $TMPDIR (or /tmp); the caller removes it (tu_rm_rf).
char *tu_tmpdir(const char *tag);
// Removes path and everything under it (links are removed, not followed). Returns 0, or -1
// when something could not be removed (named on stderr); a path that does not exist is 0.
int tu_rm_rf(const char *path);
// Returns 1 when running under a sanitizer build (TT_SANITIZED set): long tests shrink.
int tu_sanitized(void);
