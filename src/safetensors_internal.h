// safetensors_internal.h — what the reader (safetensors.c) and the writer
// (safetensors_write.c) share; not for other callers.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "safetensors.h"

#define ST_IO_CHUNK ((size_t)1 << 30) // bytes per read()/write() call (Linux caps one at ~2 GiB)
#define ST_ALIGN ((size_t)4096)        // O_DIRECT: buffers, offsets and lengths are multiples of it

// F32, BF16 or F16.
int st_dtype_valid(st_dtype_t t);
// A name as it appears in messages: JSON-escaped (so any name prints on one line), cut at
// about 80 bytes, in single quotes: 'model.layers.0.mlp.up_proj.weight'. Into buf (returned).
const char *st_shown(char *buf, size_t len, const char *s, size_t n);
// numel · dtype size into *out, or -1 when it overflows 64 bits.
int st_tensor_bytes(int ndim, const uint64_t *shape, st_dtype_t dtype, uint64_t *out);
// Formats one line into err and returns rc.
int st_werr(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
