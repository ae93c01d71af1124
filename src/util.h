// util.h — small shared helpers: fatal setup checks, usage errors, sizes, time, hashing.
// Runtime paths (io, scheduler, optimizer) never call the die helpers; they return -errno.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define ALIGN_UP(a, b) (CEIL_DIV((a), (b)) * (b))

// Setup/programmer errors: print file:line and exit 1 (llm.c style).
void *malloc_check(size_t size, const char *file, int line);
void *aligned_alloc_check(size_t align, size_t size, const char *file, int line);
#define mallocCheck(size) malloc_check((size), __FILE__, __LINE__)
#define alignedAllocCheck(align, size) aligned_alloc_check((align), (size), __FILE__, __LINE__)

// A big buffer, for free(): from 2 MiB on 2 MiB-aligned and advised transparent huge pages
// (fewer TLB misses, faster first touch; where the kernel refuses, 4 KiB pages as ever),
// smaller 4 KiB-aligned. NULL when out of memory (runtime paths report it themselves).
void *alloc_huge(size_t bytes);

// Bad user input: one line "tiertrain: <msg>" on stderr, exit 2.
void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// Runtime failure after work began: one line, exit 1.
void runtime_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// The exit code a library's -errno deserves: 2 when the user's input or request is at fault
// (-EINVAL a bad value or file, -ENOENT a missing file, -ENODEV a device that is not there,
// -EDQUOT over a budget), else 1 (a failure at run time). For the faces (train, eval, bench).
int exit_code_of(int rc);
// A load's -errno as the input's fault: a path that is not the kind a load takes (-ENOTDIR,
// -EISDIR) is a bad file (-EINVAL); anything else as it is.
int load_rc(int rc);
// One line "tiertrain: <msg>" on stderr, exit exit_code_of(rc).
void fail_with(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
// One informational line "tiertrain: <msg>" on stderr.
void notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void vnotice(const char *fmt, va_list ap);
// Off: notice() says nothing (the ranks other than 0, whose notices would repeat rank 0's).
void notice_silence(int off);

// "512M", "4G", "1.5GiB", "4096", "64k" -> bytes. K/M/G/T and KiB/MiB/GiB/TiB are powers
// of 1024 (as memory sizes are); "KB/MB/GB/TB" powers of 1000. Returns 0 or io.h
// io_parse_size's -EINVAL, -ERANGE, -EDOM.
int parse_size(const char *s, uint64_t *out);
// 1536 -> "1.5 KiB"; writes into buf, returns buf.
char *format_bytes(char *buf, size_t len, uint64_t bytes);

double now_ms(void); // CLOCK_MONOTONIC in milliseconds

// The directory part of path ("." when there is none, "/" for a name at the root) into buf.
void path_dir(const char *path, char *buf, size_t len);
// fsync of folder dir (a rename in it made durable): 0 or -errno.
int dir_fsync(const char *dir);
// Whether paths a and b name one file: the same inode where both exist, else the same path
// once each one's directory is resolved (two outputs not yet written). Empty: never.
int path_same_file(const char *a, const char *b);
// Whether path lies inside directory dir, at any depth (both resolved as above). Empty: never.
int path_inside(const char *path, const char *dir);
// Where path lies inside dir (as path_inside), the first name below dir ("step-00000002" for
// DIR/step-00000002/x) into out, and 1; else 0.
int path_first_below(const char *path, const char *dir, char *out, size_t len);

// Reads a whole small file (JSON, a `latest` line; at most 16 MiB) into a malloc'd buffer,
// NUL-terminated after its len bytes. Returns 0, or -errno with one line naming the file.
int read_small_file(const char *path, char **out, size_t *len, char *err, size_t errlen);

// FNV-1a 64 over bytes, continuing from h (start with FNV64_INIT).
#define FNV64_INIT 0xcbf29ce484222325ULL
uint64_t fnv1a64(uint64_t h, const void *data, size_t n);

// The index of the first of x[0..n) that is NaN or infinite, or below zero when nonneg (-0.0
// is not below zero); n when there is none. Checks blocks four lanes at a time, branch-free,
// then a bad block element by element: the loads check every value they read.
size_t first_bad_float(const float *x, size_t n, int nonneg);

// Deterministic, order-independent random numbers: splitmix64 streams.
uint64_t splitmix64(uint64_t *state);
uint64_t mix64(uint64_t a, uint64_t b); // a hash of two words, for per-tensor seeds
