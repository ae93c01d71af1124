// safetensors.h — Hugging Face safetensors files (https://github.com/huggingface/safetensors):
// 8 bytes little-endian header length N, N bytes of JSON header, then the data section.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (byte offsets inside the data section) plus an optional "__metadata__" string→string map.
//
// The writer streams: the tensor list is fixed up front, the header goes out at open, then
// the caller appends every tensor's bytes in declared order in as many st_write calls as it
// likes (a model larger than RAM goes out a shard at a time). The reader validates the whole
// header at open and then reads any byte range of any tensor with pread.
// Does not mmap or know tiertrain's tensor names (model.h has those); the one conversion is
// st_read_f32's widening of BF16 and F16.
// Called by the checkpoint code.
//
// What the reader accepts (as the reference implementation does, plus the README's rules):
//  - file ≥ 8 bytes; N ≤ 100,000,000 and N ≤ file size − 8; the header is valid JSON
//    (json.h: strict UTF-8, no duplicate keys) whose first byte is '{', an object; trailing
//    whitespace (the writers' padding) is allowed;
//  - each tensor: exactly the fields dtype (F32, BF16 or F16; any other dtype is rejected by
//    name), shape (at most ST_MAX_DIMS non-negative integers; [] is a scalar) and
//    data_offsets [begin, end] with begin ≤ end, end − begin = numel · dtype size;
//  - sorted by offset, the tensors tile the data section exactly: the first begins at 0, each
//    begins where the previous ended (no overlap, no hole), the last ends at the end of the
//    file (the reference's MetadataIncompleteBuffer rule);
//  - "__metadata__", when present, is an object of strings; names and values hold no NUL;
//    a key "crc32c:<name>" must name a tensor of the file and hold 8 lowercase hex digits.
// Every failure is one line naming the file and the problem; runtime calls return -errno.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER 100000000ULL // the reference implementation's limit on N

typedef enum { ST_F32 = 0, ST_BF16, ST_F16 } st_dtype_t;

typedef struct {
    const char *name;            // UTF-8, NUL-terminated, no NUL inside
    st_dtype_t dtype;
    int ndim;                    // 0..ST_MAX_DIMS (0: a scalar)
    uint64_t shape[ST_MAX_DIMS]; // (ndim)
    uint64_t begin, end;         // data_offsets: bytes [begin, end) of the data section
} st_tensor_t;

typedef struct {
    const char *key, *value;     // one __metadata__ entry
} st_meta_t;

const char *st_dtype_name(st_dtype_t t); // "F32", "BF16", "F16"
size_t st_dtype_size(st_dtype_t t);      // 4, 2, 2

// ---------------------------------------------------------------- writing

typedef struct st_writer st_writer_t;
#define ST_STREAM_BUF ((size_t)8 << 20) // the writer's buffer (its writes go out this many bytes at a time),
                                        // and the reader's for O_DIRECT
#define ST_DIRECT_MIN ((size_t)256 << 10) // st_read_checked reads this much or more with O_DIRECT

// Creates (or truncates) path and writes the header for tensors[0..n) in that order: JSON
// keys in the given order ("__metadata__" first when nmeta > 0, its entries in the given
// order), data_offsets contiguous from 0 in the same order, the header padded with spaces so
// the data section starts at a multiple of 8. Only ndim, shape, dtype and name are read from
// tensors (begin/end are computed). Tensor data keeps 4-byte alignment only if every tensor
// before an F32 one has an even element count: put F32 tensors first to guarantee it (the
// reference writer sorts by dtype size).
// Returns 0 and *out, or -errno with one line in err: bad declarations (empty or duplicate
// name, "__metadata__" as a tensor name, invalid UTF-8, ndim out of range, sizes that
// overflow, a header over ST_MAX_HEADER) are -EINVAL; create/write failures (-ENOSPC, -EIO,
// -EACCES, ...) name the file and the call.
int st_writer_open(st_writer_t **out, const char *path, const st_tensor_t *tensors, int n, const st_meta_t *meta,
                   int nmeta, char *err, size_t errlen);
// Appends n bytes of tensor data (the next bytes in declared order; a call may span tensors).
// They are gathered into one of the writer's two buffers; a full one goes out (O_DIRECT
// where the filesystem takes it) on the writer's thread while the other fills, so a failed
// write shows at the call that fills the next buffer, or at st_writer_close. Short writes
// continue, EINTR retries. Returns 0 or -errno; the
// first error sticks (later calls return it again) and its message is st_writer_error().
// Writing past the declared total is -EINVAL.
int st_write(st_writer_t *w, const void *buf, size_t n);
const char *st_writer_error(const st_writer_t *w); // "" while there is no error
// Finishes: checks every declared byte was written (else -EINVAL naming the first tensor
// left incomplete), writes what the buffer holds, fsyncs, closes, frees w. Returns 0, or the sticky error / -errno of
// fsync or close with one line in err. w is freed either way; the file stays on failure
// (the checkpoint writes into a temporary directory and removes it).
int st_writer_close(st_writer_t *w, char *err, size_t errlen);
// st_writer_open with flags. ST_CRC32C: __metadata__ also holds "crc32c:<name>" → the
// CRC-32C of that tensor's data bytes, 8 lowercase hex digits, for every tensor (after the
// caller's entries; a caller key starting "crc32c:" is -EINVAL). The header is written with
// placeholders at open and again, same length, with the checksums at close.
#define ST_CRC32C 1u
#define ST_CRC_KEY "crc32c:"
int st_writer_open_flags(st_writer_t **out, const char *path, const st_tensor_t *tensors, int n, const st_meta_t *meta,
                         int nmeta, unsigned flags, char *err, size_t errlen);
// Abandons a writer: closes without checks or fsync, frees. NULL-safe.
void st_writer_free(st_writer_t *w);

// ---------------------------------------------------------------- reading

typedef struct {
    const char *path;
    uint64_t file_size;
    uint64_t header_len;       // N
    uint64_t data_start;       // 8 + N: file offset of the data section
    int ntensors;
    const st_tensor_t *tensors; // (ntensors) sorted by begin (file order)
    int nmeta;
    const st_meta_t *meta;     // (nmeta) in header order
    int nchecked;              // tensors with a "crc32c:<name>" entry (ST_CRC32C files: all)
    // private
    uint32_t *crc_want, *crc_run; // (ntensors) the stored checksum; the running one
    uint64_t *crc_pos;         // (ntensors) bytes folded into crc_run, from the tensor's start
    unsigned char *crc_has;    // (ntensors) 1 where a checksum is stored
    int fd;
    int dfd;                   // the file again with O_DIRECT, for st_read_checked (-1: not taken)
    unsigned char *bounce;     // (ST_STREAM_BUF, aligned) its reads land here first; made at the first one
    char *header_name;         // "PATH: header", the name json.c's messages and nodes use
    struct json *json;         // the parsed header: names point into it
    int *by_name;              // (ntensors) tensor indices sorted by name, for st_find
} st_reader_t;

// Opens and validates path (see the top of this file). Returns 0 and *out (close with
// st_close), or -errno with one line in err:
//   "model.safetensors: tensor 'x': data_offsets [0, 12] hold 12 bytes, shape [4] of F32 needs 16"
// A bad file is -EINVAL; open/read failures keep their errno.
int st_open(const char *path, st_reader_t **out, char *err, size_t errlen);
// Index of the tensor called name, or -1.
int st_find(const st_reader_t *r, const char *name);
// The value of __metadata__ key, or NULL.
const char *st_meta_get(const st_reader_t *r, const char *key);
// Reads nbytes of tensor idx starting offset bytes into it, into dst (pread in a loop, so a
// large tensor can be read in pieces; safe from several threads at once). Returns 0, or
// -EINVAL (bad idx or a range past the tensor) / -EIO (the file shrank) / -errno, with one
// line in err.
int st_read(const st_reader_t *r, int idx, void *dst, uint64_t offset, size_t nbytes, char *err, size_t errlen);
// st_read, and checks the data against its stored checksum: a read that continues where the
// last checked read of tensor idx stopped extends its running CRC, and the read that reaches
// the tensor's end compares it: -EINVAL on a mismatch, with the line
//   "PATH: tensor 'NAME' fails its CRC-32C check (stored 1a2b3c4d, read 5e6f7a8b): the file is corrupt"
// Other reads are not checked here (st_verify_rest checks those tensors). A read of
// ST_DIRECT_MIN bytes or more goes around the page cache (O_DIRECT, through a buffer of the
// reader's) where the filesystem allows it. Not thread-safe on one reader (st_read is).
int st_read_checked(st_reader_t *r, int idx, void *dst, uint64_t offset, size_t nbytes, char *err, size_t errlen);
// Checks every tensor with a stored checksum that st_read_checked has not checked whole,
// reading what it has not folded in yet (a chunk at a time). 0, or -EINVAL / -errno as there.
int st_verify_rest(st_reader_t *r, char *err, size_t errlen);
// Counts every tensor that `from`, a reader of the same file, checked whole as checked by
// `into` too (readers of one file on several threads; then st_verify_rest on one of them).
void st_take_checked(st_reader_t *into, const st_reader_t *from);
// The index of the first tensor (in file order) with no stored checksum, or -1.
int st_unchecked(const st_reader_t *r);
// Elements [first, first + n) of tensor idx as FP32 into dst, through st_read_checked (so
// the checksum is checked as they stream by): F32 as stored, BF16 and F16 widened exactly
// (read into dst's second half, in one read, and widened in place).
// The one dtype conversion this file does. 0 or -errno as st_read_checked.
int st_read_f32(st_reader_t *r, int idx, uint64_t first, size_t n, float *dst, char *err, size_t errlen);
// "[4, 16]": a shape for messages, into buf (returned).
const char *st_shape_str(char *buf, size_t len, int ndim, const uint64_t *shape);
void st_close(st_reader_t *r); // NULL-safe
