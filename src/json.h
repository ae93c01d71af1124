// json.h — a small, strict JSON reader (RFC 8259) for the files tiertrain reads back:
// checkpoint config.json / state.json and safetensors headers. Parses a buffer of given
// length (no NUL needed) into a read-only tree held in one allocation, plus a string escaper
// for the writers (the rest of writing is fprintf).
// Does not stream, keep comments, accept JSON5 extensions, or write whole trees.
// Called by safetensors.c and the checkpoint code.
//
// Strictness, on purpose (every rejection is one line "NAME: byte N: what"):
//  - the whole buffer is one value with optional whitespace around it; trailing data fails;
//  - strings must be valid UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF) with
//    no raw control characters; \uXXXX escapes decode to UTF-8, surrogate pairs must pair;
//  - numbers follow the RFC grammar (no leading zeros, no "+", no ".5", no NaN/Infinity),
//    at most JSON_MAX_NUMBER_LEN characters, and must be finite as a double (1e999 fails);
//  - duplicate keys in one object fail (RFC 8259 leaves them undefined; the safetensors
//    format disallows them; a checkpoint never has them, so a duplicate means a bad file);
//  - limits: nesting depth, input bytes and number of values (json_limits_t), so memory is
//    bounded by about len + max_values·sizeof(json_t) whatever the input;
//  - a byte-order mark is not skipped (RFC 8259 §8.1: senders must not add one).
// Byte offsets in messages count from 0 at the start of the buffer.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define JSON_MAX_DEPTH 64                 // default nesting limit
#define JSON_MAX_BYTES ((size_t)256 << 20) // default input limit
#define JSON_MAX_VALUES ((size_t)4 << 20) // default limit on values (nodes) in one document
#define JSON_MAX_NUMBER_LEN 512           // characters in one number (RFC 8259 §9 allows limits)

typedef enum { JSON_NULL = 0, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type_t;

// One value. The root and everything under it live in one allocation owned by the root.
typedef struct json {
    json_type_t type;
    size_t n;            // STRING: bytes (without the NUL); NUMBER: text length; ARRAY/OBJECT: members
    const char *s;       // STRING: decoded UTF-8, NUL-terminated (may hold a NUL from \u0000: use n);
                         // NUMBER: its text exactly as written, NUL-terminated; else NULL
    struct json *kids;   // ARRAY/OBJECT: (n) members in document order; else NULL
    const char *key;     // a member of an OBJECT: its decoded key, NUL-terminated; else NULL
    size_t key_len;      // bytes of key (a key may hold a NUL from \u0000)
    size_t key_at;       // byte offset of the key's opening quote (members of an OBJECT)
    size_t at;           // byte offset where the value starts in the input
    double num;          // NUMBER: strtod of the text (finite); else 0
    const char *doc;     // the document name given to json_parse, for messages
} json_t;

typedef struct {
    int max_depth;       // containers nested deeper than this fail (0 → JSON_MAX_DEPTH)
    size_t max_bytes;    // longer input fails (0 → JSON_MAX_BYTES)
    size_t max_values;   // more values fail (0 → JSON_MAX_VALUES)
} json_limits_t;

// Parses len bytes of buf (no NUL needed) as one JSON document named name (used in messages
// and kept by pointer in every node: it must outlive the tree). lim may be NULL (defaults).
// Returns 0 and *out (free with json_free), or -EINVAL (bad document, over a limit) or
// -ENOMEM, with one line in err: "config.json: byte 123: expected ',' or '}'".
int json_parse(const char *buf, size_t len, const char *name, const json_limits_t *lim, json_t **out, char *err,
               size_t errlen);
void json_free(json_t *root); // NULL-safe; only on what json_parse returned

// "null", "false", "true", "number", "string", "array", "object".
const char *json_type_name(json_type_t t);

// The member of obj named key, or NULL (also when obj is NULL or not an object).
const json_t *json_get(const json_t *obj, const char *key);

// Exact conversions of a NUMBER's text: 0, -EDOM when it is not written as an integer
// (has a fraction or an exponent: "1.0", "1e3"), -ERANGE when it does not fit, -EINVAL when v
// is not a number.
int json_num_int64(const json_t *v, int64_t *out);
int json_num_uint64(const json_t *v, uint64_t *out);

// Typed access with messages. `what` names the value in the message ("key 'step'",
// "shape[1]"). Each returns 0, or -EINVAL with one line in err naming the document, what,
// its byte offset and the problem:
//   "state.json: key 'step' at byte 10: expected an integer, got a string"
//   "state.json: key 'step' at byte 10: expected an integer, got 1.5"
//   "state.json: key 'step' at byte 10: 300 is out of range (accepted: 0..255)"
int json_as_int64(const json_t *v, const char *what, int64_t min, int64_t max, int64_t *out, char *err, size_t errlen);
int json_as_uint64(const json_t *v, const char *what, uint64_t max, uint64_t *out, char *err, size_t errlen);
int json_as_double(const json_t *v, const char *what, double *out, char *err, size_t errlen);
int json_as_bool(const json_t *v, const char *what, int *out, char *err, size_t errlen);
// A string without NUL characters (so C string functions see all of it).
int json_as_string(const json_t *v, const char *what, const char **out, char *err, size_t errlen);

// The same on a member of obj; a missing key fails with
//   "state.json: missing key 'step' in the object at byte 0".
int json_get_int64(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out, char *err,
                   size_t errlen);
int json_get_uint64(const json_t *obj, const char *key, uint64_t max, uint64_t *out, char *err, size_t errlen);
int json_get_double(const json_t *obj, const char *key, double *out, char *err, size_t errlen);
int json_get_bool(const json_t *obj, const char *key, int *out, char *err, size_t errlen);
int json_get_string(const json_t *obj, const char *key, const char **out, char *err, size_t errlen);
// A member that must be an object / an array.
int json_get_object(const json_t *obj, const char *key, const json_t **out, char *err, size_t errlen);
int json_get_array(const json_t *obj, const char *key, const json_t **out, char *err, size_t errlen);

// ---------------------------------------------------------------- writing
// Writes n bytes of UTF-8 s as a quoted JSON string ("a\"b\n") into dst: '"' and '\' are
// escaped, control characters become \n \t \r \b \f or \u00XX, everything else is copied.
// Like snprintf: writes at most cap−1 bytes plus a NUL (when cap > 0), never a partial escape
// or UTF-8 sequence, and returns the full length the escaped string needs (without NUL);
// -EILSEQ when s is not valid UTF-8 (nothing that is not JSON is ever produced).
ssize_t json_escape(char *dst, size_t cap, const char *s, size_t n);
// Writes the NUL-terminated s to f as a quoted, escaped JSON string. 0, -EILSEQ, -ENOMEM or
// -EIO (check ferror/fclose as usual for the rest of the file).
int json_fput_string(FILE *f, const char *s);
