// json.c — the strict JSON reader and string escaper behind json.h.
// Two passes over the input with one recursive-descent parser: pass 1 validates everything
// (syntax, UTF-8, numbers, depth and value limits) and counts values, string bytes and the
// members of every container; then one allocation holds all nodes and all decoded bytes, and
// pass 2 fills it (each container's members contiguous, in document order) and rejects
// duplicate keys. No allocation depends on anything but the counts pass 1 measured.
// Numbers go through strtod, which reads the C locale's '.': tiertrain never calls setlocale.
// Does not write trees. Called by safetensors.c and the checkpoint code.
#include "json.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define JSON_DEPTH_CAP 1024 // max_depth beyond this is clamped: the parser recurses per level

typedef struct {
    const unsigned char *p; // (len) input
    size_t len, pos;
    const char *name;
    int max_depth;
    size_t max_values;
    char *err;
    size_t errlen;
    int build;              // 0: pass 1 (validate, count); 1: pass 2 (fill)
    // measured by pass 1
    size_t nvalues;         // values, root included
    size_t nbytes;          // decoded strings, keys and number texts, each with its NUL
    size_t max_members;     // the largest object's member count (pass 2's scratch)
    size_t *counts;         // members of each container, in pre-order
    size_t ncontainers, counts_cap;
    // filled by pass 2
    size_t ci;              // next container, pre-order
    json_t *nodes;          // (nvalues)
    size_t nnext;
    char *bytes;            // (nbytes)
    size_t bnext;
    const json_t **scratch; // (max_members) for the duplicate-key check
} parser_t;

static int perr(parser_t *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int perr(parser_t *p, size_t at, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "%s: byte %zu: %s", p->name, at, msg);
    return -EINVAL;
}

// What stands at pos, for "got ..." in messages: "end of input", "'x'", "byte 0x8f".
static const char *got(const parser_t *p, char *buf, size_t len) {
    if (p->pos >= p->len) return "end of input";
    unsigned char c = p->p[p->pos];
    if (c >= 0x20 && c < 0x7f) snprintf(buf, len, "'%c'", c);
    else snprintf(buf, len, "byte 0x%02x", c);
    return buf;
}

static void skip_ws(parser_t *p) {
    while (p->pos < p->len) {
        unsigned char c = p->p[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

// Length of the valid UTF-8 sequence at s (1-4), or 0 when it is not one: overlong forms,
// UTF-16 surrogates (U+D800..DFFF) and code points past U+10FFFF are invalid (RFC 3629).
static size_t utf8_seq(const unsigned char *s, size_t avail) {
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t k;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c == 0xE0) { k = 3; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) k = 3;
    else if (c == 0xED) { k = 3; hi = 0x9F; }
    else if (c == 0xF0) { k = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) k = 4;
    else if (c == 0xF4) { k = 4; hi = 0x8F; }
    else return 0;
    if (avail < k || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return k;
}

// ---------------------------------------------------------------- strings

static int hex4(parser_t *p, uint32_t *out) {
    if (p->len - p->pos < 4) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p->p[p->pos + (size_t)i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint32_t)d;
    }
    p->pos += 4;
    *out = v;
    return 0;
}

// Parses the string whose '"' is at pos. Pass 1 counts its decoded bytes; pass 2 decodes it
// into the arena and returns it (NUL-terminated) in *out, its length in *outlen.
static int parse_string(parser_t *p, const char **out, size_t *outlen) {
    size_t start = p->pos;
    char *dst = p->build ? p->bytes + p->bnext : NULL;
    size_t n = 0;
    p->pos++;
    for (;;) {
        if (p->pos >= p->len) return perr(p, start, "unterminated string");
        unsigned char c = p->p[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) return perr(p, p->pos, "control character 0x%02x in a string (escape it, e.g. \\n or \\u00%02x)", c, c);
        if (c == '\\') {
            size_t esc = p->pos;
            if (p->len - p->pos < 2) return perr(p, start, "unterminated string");
            unsigned char e = p->p[p->pos + 1];
            p->pos += 2;
            char one = 0;
            switch (e) {
            case '"': one = '"'; break;
            case '\\': one = '\\'; break;
            case '/': one = '/'; break;
            case 'b': one = '\b'; break;
            case 'f': one = '\f'; break;
            case 'n': one = '\n'; break;
            case 'r': one = '\r'; break;
            case 't': one = '\t'; break;
            case 'u': break;
            default:
                if (e >= 0x20 && e < 0x7f) return perr(p, esc, "invalid escape '\\%c' in a string", e);
                return perr(p, esc, "invalid escape '\\' + byte 0x%02x in a string", e);
            }
            if (e != 'u') {
                if (dst) dst[n] = one;
                n++;
                continue;
            }
            uint32_t cp, lo;
            if (hex4(p, &cp) < 0) return perr(p, esc, "invalid \\u escape (accepted: \\u and 4 hex digits)");
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return perr(p, esc, "unpaired surrogate \\u%04" PRIX32 " in a string (a low surrogate must follow a high one)", cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                size_t lo_at = p->pos;
                if (p->len - p->pos < 2 || p->p[p->pos] != '\\' || p->p[p->pos + 1] != 'u')
                    return perr(p, esc, "unpaired surrogate \\u%04" PRIX32 " in a string (a high surrogate needs a "
                                "\\uDC00..\\uDFFF after it)", cp);
                p->pos += 2;
                if (hex4(p, &lo) < 0) return perr(p, lo_at, "invalid \\u escape (accepted: \\u and 4 hex digits)");
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return perr(p, esc, "unpaired surrogate \\u%04" PRIX32 " in a string (followed by \\u%04" PRIX32
                                ", not \\uDC00..\\uDFFF)", cp, lo);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            unsigned char u[4];
            size_t k;
            if (cp < 0x80) { u[0] = (unsigned char)cp; k = 1; }
            else if (cp < 0x800) { u[0] = (unsigned char)(0xC0 | cp >> 6); u[1] = (unsigned char)(0x80 | (cp & 0x3F)); k = 2; }
            else if (cp < 0x10000) {
                u[0] = (unsigned char)(0xE0 | cp >> 12);
                u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
                u[2] = (unsigned char)(0x80 | (cp & 0x3F));
                k = 3;
            } else {
                u[0] = (unsigned char)(0xF0 | cp >> 18);
                u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
                u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
                u[3] = (unsigned char)(0x80 | (cp & 0x3F));
                k = 4;
            }
            if (dst) memcpy(dst + n, u, k);
            n += k;
            continue;
        }
        size_t k = utf8_seq(p->p + p->pos, p->len - p->pos);
        if (!k) return perr(p, p->pos, "invalid UTF-8 in a string (byte 0x%02x)", c);
        if (dst) memcpy(dst + n, p->p + p->pos, k);
        n += k;
        p->pos += k;
    }
    if (dst) {
        dst[n] = 0;
        p->bnext += n + 1;
        *out = dst;
        *outlen = n;
    } else {
        p->nbytes += n + 1;
    }
    return 0;
}

// ---------------------------------------------------------------- numbers and literals

static int is_digit(parser_t *p) { return p->pos < p->len && p->p[p->pos] >= '0' && p->p[p->pos] <= '9'; }

static int parse_number(parser_t *p, json_t *dst) {
    size_t at = p->pos;
    if (p->p[p->pos] == '-') p->pos++;
    if (!is_digit(p)) return perr(p, at, "invalid number: expected a digit after '-'");
    if (p->p[p->pos] == '0') {
        p->pos++;
        if (is_digit(p)) return perr(p, at, "invalid number: leading zero");
    } else {
        while (is_digit(p)) p->pos++;
    }
    if (p->pos < p->len && p->p[p->pos] == '.') {
        p->pos++;
        if (!is_digit(p)) return perr(p, at, "invalid number: expected a digit after '.'");
        while (is_digit(p)) p->pos++;
    }
    if (p->pos < p->len && (p->p[p->pos] == 'e' || p->p[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->p[p->pos] == '+' || p->p[p->pos] == '-')) p->pos++;
        if (!is_digit(p)) return perr(p, at, "invalid number: expected a digit in the exponent");
        while (is_digit(p)) p->pos++;
    }
    size_t n = p->pos - at;
    if (n > JSON_MAX_NUMBER_LEN)
        return perr(p, at, "number of %zu characters is too long (at most %d)", n, JSON_MAX_NUMBER_LEN);
    char text[JSON_MAX_NUMBER_LEN + 1];
    memcpy(text, p->p + at, n);
    text[n] = 0;
    double v = strtod(text, NULL);
    if (!isfinite(v)) return perr(p, at, "number %s is too large for a double", text);
    if (!dst) {
        p->nbytes += n + 1;
        return 0;
    }
    char *s = p->bytes + p->bnext;
    memcpy(s, text, n + 1);
    p->bnext += n + 1;
    dst->type = JSON_NUMBER;
    dst->s = s;
    dst->n = n;
    dst->num = v;
    return 0;
}

static int parse_literal(parser_t *p, json_t *dst) {
    static const struct { const char *text; json_type_t type; } lits[] = {
        {"true", JSON_TRUE}, {"false", JSON_FALSE}, {"null", JSON_NULL},
    };
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(lits[i].text);
        if (p->p[p->pos] != (unsigned char)lits[i].text[0]) continue;
        if (p->len - p->pos < k || memcmp(p->p + p->pos, lits[i].text, k) != 0) break;
        p->pos += k;
        if (dst) dst->type = lits[i].type;
        return 0;
    }
    return perr(p, p->pos, "invalid literal (accepted: true, false, null)");
}

// ---------------------------------------------------------------- containers

static int parse_value(parser_t *p, int depth, json_t *dst);

// Opens a container at pos: checks depth; pass 1 reserves its count slot, pass 2 takes its
// members' nodes. Returns the member array (pass 2) through *kids.
static int open_container(parser_t *p, int depth, json_t *dst, json_type_t type, size_t *ci, json_t **kids) {
    if (depth > p->max_depth) return perr(p, p->pos, "nesting deeper than %d", p->max_depth);
    p->pos++;
    if (!p->build) {
        if (p->ncontainers == p->counts_cap) {
            size_t cap = p->counts_cap ? 2 * p->counts_cap : 64;
            size_t *c = realloc(p->counts, cap * sizeof *c);
            if (!c) {
                snprintf(p->err, p->errlen, "%s: out of memory", p->name);
                return -ENOMEM;
            }
            p->counts = c;
            p->counts_cap = cap;
        }
        *ci = p->ncontainers++;
        p->counts[*ci] = 0;
        *kids = NULL;
        return 0;
    }
    *ci = p->ci++;
    if (*ci >= p->ncontainers || p->counts[*ci] > p->nvalues - p->nnext)
        return perr(p, p->pos - 1, "internal error: the second pass disagrees with the first");
    size_t count = p->counts[*ci];
    *kids = count ? p->nodes + p->nnext : NULL;
    p->nnext += count;
    if (count) memset(*kids, 0, count * sizeof **kids);
    dst->type = type;
    dst->n = count;
    dst->kids = *kids;
    return 0;
}

static int key_cmp(const void *a, const void *b) {
    const json_t *x = *(const json_t *const *)a, *y = *(const json_t *const *)b;
    if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
    int c = memcmp(x->key, y->key, x->key_len);
    if (c) return c;
    return x->key_at < y->key_at ? -1 : x->key_at > y->key_at;
}

// Pass 2: fails on the first repeated key in document order within obj.
static int check_duplicates(parser_t *p, const json_t *obj) {
    if (obj->n < 2) return 0;
    for (size_t i = 0; i < obj->n; i++) p->scratch[i] = &obj->kids[i];
    qsort(p->scratch, obj->n, sizeof *p->scratch, key_cmp);
    const json_t *dup = NULL, *first = NULL;
    for (size_t i = 1; i < obj->n; i++) {
        const json_t *a = p->scratch[i - 1], *b = p->scratch[i];
        if (a->key_len != b->key_len || memcmp(a->key, b->key, a->key_len) != 0) continue;
        if (!dup || b->key_at < dup->key_at) { dup = b; first = a; }
    }
    if (!dup) return 0;
    // The key as JSON (escaped, cut short), so any key prints on one line.
    char shown[72];
    ssize_t k = json_escape(shown, sizeof shown, dup->key, dup->key_len);
    return perr(p, dup->key_at, "duplicate key %s%s (first at byte %zu)", shown, k >= (ssize_t)sizeof shown ? "..." : "",
                first->key_at);
}

static int parse_object(parser_t *p, int depth, json_t *dst) {
    char g[16];
    size_t ci, i = 0;
    json_t *kids;
    int rc = open_container(p, depth, dst, JSON_OBJECT, &ci, &kids);
    if (rc) return rc;
    skip_ws(p);
    if (p->pos < p->len && p->p[p->pos] == '}') {
        p->pos++;
        return 0;
    }
    for (;;) {
        skip_ws(p);
        if (p->pos >= p->len || p->p[p->pos] != '"') return perr(p, p->pos, "expected a string key, got %s", got(p, g, sizeof g));
        json_t *kid = kids ? &kids[i] : NULL;
        size_t key_at = p->pos;
        const char *key = NULL;
        size_t key_len = 0;
        if ((rc = parse_string(p, &key, &key_len))) return rc;
        skip_ws(p);
        if (p->pos >= p->len || p->p[p->pos] != ':') return perr(p, p->pos, "expected ':' after a key, got %s", got(p, g, sizeof g));
        p->pos++;
        if (kid) {
            kid->key = key;
            kid->key_len = key_len;
            kid->key_at = key_at;
        }
        if ((rc = parse_value(p, depth, kid))) return rc;
        i++;
        skip_ws(p);
        if (p->pos < p->len && p->p[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->len && p->p[p->pos] == '}') { p->pos++; break; }
        return perr(p, p->pos, "expected ',' or '}', got %s", got(p, g, sizeof g));
    }
    if (!p->build) {
        p->counts[ci] = i;
        if (i > p->max_members) p->max_members = i;
        return 0;
    }
    return check_duplicates(p, dst);
}

static int parse_array(parser_t *p, int depth, json_t *dst) {
    char g[16];
    size_t ci, i = 0;
    json_t *kids;
    int rc = open_container(p, depth, dst, JSON_ARRAY, &ci, &kids);
    if (rc) return rc;
    skip_ws(p);
    if (p->pos < p->len && p->p[p->pos] == ']') {
        p->pos++;
        return 0;
    }
    for (;;) {
        if ((rc = parse_value(p, depth, kids ? &kids[i] : NULL))) return rc;
        i++;
        skip_ws(p);
        if (p->pos < p->len && p->p[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->len && p->p[p->pos] == ']') { p->pos++; break; }
        return perr(p, p->pos, "expected ',' or ']', got %s", got(p, g, sizeof g));
    }
    if (!p->build) p->counts[ci] = i;
    return 0;
}

// One value at pos (after whitespace) into dst (pass 2; NULL in pass 1). depth is the
// nesting of the container holding it (0 for the root). Leaves dst's key fields alone.
static int parse_value(parser_t *p, int depth, json_t *dst) {
    char g[16];
    skip_ws(p);
    if (p->pos >= p->len) return perr(p, p->pos, "expected a value, got end of input");
    if (!p->build && ++p->nvalues > p->max_values)
        return perr(p, p->pos, "more than %zu values (the limit for this document)", p->max_values);
    if (dst) {
        dst->at = p->pos;
        dst->doc = p->name;
    }
    unsigned char c = p->p[p->pos];
    switch (c) {
    case '{': return parse_object(p, depth + 1, dst);
    case '[': return parse_array(p, depth + 1, dst);
    case '"': {
        const char *s = NULL;
        size_t n = 0;
        int rc = parse_string(p, &s, &n);
        if (rc == 0 && dst) {
            dst->type = JSON_STRING;
            dst->s = s;
            dst->n = n;
        }
        return rc;
    }
    case 't': case 'f': case 'n': return parse_literal(p, dst);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, dst);
        return perr(p, p->pos, "expected a value, got %s", got(p, g, sizeof g));
    }
}

int json_parse(const char *buf, size_t len, const char *name, const json_limits_t *lim, json_t **out, char *err,
               size_t errlen) {
    *out = NULL;
    parser_t p = {.p = (const unsigned char *)buf, .len = len, .name = name ? name : "json", .err = err, .errlen = errlen};
    p.max_depth = lim && lim->max_depth > 0 ? lim->max_depth : JSON_MAX_DEPTH;
    if (p.max_depth > JSON_DEPTH_CAP) p.max_depth = JSON_DEPTH_CAP;
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : JSON_MAX_BYTES;
    p.max_values = lim && lim->max_values ? lim->max_values : JSON_MAX_VALUES;
    if (len > max_bytes) {
        snprintf(err, errlen, "%s: %zu bytes, more than the %zu-byte limit for this document", p.name, len, max_bytes);
        return -EINVAL;
    }
    if (!buf && len) {
        snprintf(err, errlen, "%s: no buffer", p.name);
        return -EINVAL;
    }

    // Pass 1: validate and count.
    int rc = parse_value(&p, 0, NULL);
    if (rc == 0) {
        skip_ws(&p);
        char g[16];
        if (p.pos < p.len) rc = perr(&p, p.pos, "unexpected data after the document (%s)", got(&p, g, sizeof g));
    }
    if (rc) {
        free(p.counts);
        return rc;
    }

    // One allocation: nodes, then bytes. Both counts are bounded by len and max_values.
    size_t node_bytes = p.nvalues * sizeof(json_t);
    if (p.nvalues > SIZE_MAX / sizeof(json_t) || p.nbytes > SIZE_MAX - node_bytes) {
        free(p.counts);
        snprintf(err, errlen, "%s: out of memory", p.name);
        return -ENOMEM;
    }
    p.nodes = malloc(node_bytes + p.nbytes);
    p.scratch = p.max_members ? malloc(p.max_members * sizeof *p.scratch) : NULL;
    if (!p.nodes || (p.max_members && !p.scratch)) {
        free(p.nodes);
        free(p.scratch);
        free(p.counts);
        snprintf(err, errlen, "%s: out of memory for %zu values", p.name, p.nvalues);
        return -ENOMEM;
    }
    p.bytes = (char *)(p.nodes + p.nvalues);

    // Pass 2: fill, check duplicate keys.
    p.build = 1;
    p.pos = 0;
    p.nnext = 1;
    memset(&p.nodes[0], 0, sizeof p.nodes[0]);
    rc = parse_value(&p, 0, &p.nodes[0]);
    free(p.scratch);
    free(p.counts);
    if (rc) {
        free(p.nodes);
        return rc;
    }
    *out = p.nodes;
    return 0;
}

void json_free(json_t *root) { free(root); }

// ---------------------------------------------------------------- lookups and conversions

const char *json_type_name(json_type_t t) {
    switch (t) {
    case JSON_NULL: return "null";
    case JSON_FALSE: return "false";
    case JSON_TRUE: return "true";
    case JSON_NUMBER: return "number";
    case JSON_STRING: return "string";
    case JSON_ARRAY: return "array";
    case JSON_OBJECT: return "object";
    }
    return "?";
}

// "a string", "an array", "null", "a boolean" — for "got ..." in messages.
static const char *a_type(json_type_t t) {
    switch (t) {
    case JSON_NULL: return "null";
    case JSON_FALSE: case JSON_TRUE: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

const json_t *json_get(const json_t *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT || !key) return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < obj->n; i++)
        if (obj->kids[i].key_len == n && memcmp(obj->kids[i].key, key, n) == 0) return &obj->kids[i];
    return NULL;
}

// Sign and decimal digits of an integer-looking NUMBER. -EDOM when it has a fraction or an
// exponent; -ERANGE past 2^64-1 in magnitude.
static int num_parse(const json_t *v, int *neg, uint64_t *mag) {
    if (!v || v->type != JSON_NUMBER) return -EINVAL;
    const char *s = v->s;
    *neg = *s == '-';
    if (*neg) s++;
    if (strpbrk(s, ".eE")) return -EDOM;
    uint64_t m = 0;
    for (; *s; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (m > (UINT64_MAX - d) / 10) return -ERANGE;
        m = m * 10 + d;
    }
    *mag = m;
    return 0;
}

int json_num_uint64(const json_t *v, uint64_t *out) {
    int neg;
    uint64_t m;
    int rc = num_parse(v, &neg, &m);
    if (rc) return rc;
    if (neg && m) return -ERANGE;
    *out = m;
    return 0;
}

int json_num_int64(const json_t *v, int64_t *out) {
    int neg;
    uint64_t m;
    int rc = num_parse(v, &neg, &m);
    if (rc) return rc;
    if (neg) {
        if (m > (uint64_t)INT64_MAX + 1) return -ERANGE;
        *out = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
    } else {
        if (m > (uint64_t)INT64_MAX) return -ERANGE;
        *out = (int64_t)m;
    }
    return 0;
}

static int verr(const json_t *v, const char *what, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int verr(const json_t *v, const char *what, char *err, size_t errlen, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (v) snprintf(err, errlen, "%s: %s at byte %zu: %s", v->doc ? v->doc : "json", what, v->at, msg);
    else snprintf(err, errlen, "%s: %s", what, msg);
    return -EINVAL;
}

int json_as_int64(const json_t *v, const char *what, int64_t min, int64_t max, int64_t *out, char *err, size_t errlen) {
    if (!v || v->type != JSON_NUMBER)
        return verr(v, what, err, errlen, "expected an integer, got %s", v ? a_type(v->type) : "nothing");
    int64_t x = 0;
    int rc = json_num_int64(v, &x);
    if (rc == -EDOM) return verr(v, what, err, errlen, "expected an integer, got %.40s", v->s);
    if (rc == -ERANGE || x < min || x > max)
        return verr(v, what, err, errlen, "%.40s is out of range (accepted: %" PRId64 "..%" PRId64 ")", v->s, min, max);
    *out = x;
    return 0;
}

int json_as_uint64(const json_t *v, const char *what, uint64_t max, uint64_t *out, char *err, size_t errlen) {
    if (!v || v->type != JSON_NUMBER)
        return verr(v, what, err, errlen, "expected an integer, got %s", v ? a_type(v->type) : "nothing");
    uint64_t x = 0;
    int rc = json_num_uint64(v, &x);
    if (rc == -EDOM) return verr(v, what, err, errlen, "expected an integer, got %.40s", v->s);
    if (rc == -ERANGE || x > max)
        return verr(v, what, err, errlen, "%.40s is out of range (accepted: 0..%" PRIu64 ")", v->s, max);
    *out = x;
    return 0;
}

int json_as_double(const json_t *v, const char *what, double *out, char *err, size_t errlen) {
    if (!v || v->type != JSON_NUMBER)
        return verr(v, what, err, errlen, "expected a number, got %s", v ? a_type(v->type) : "nothing");
    *out = v->num;
    return 0;
}

int json_as_bool(const json_t *v, const char *what, int *out, char *err, size_t errlen) {
    if (!v || (v->type != JSON_TRUE && v->type != JSON_FALSE))
        return verr(v, what, err, errlen, "expected true or false, got %s", v ? a_type(v->type) : "nothing");
    *out = v->type == JSON_TRUE;
    return 0;
}

int json_as_string(const json_t *v, const char *what, const char **out, char *err, size_t errlen) {
    if (!v || v->type != JSON_STRING)
        return verr(v, what, err, errlen, "expected a string, got %s", v ? a_type(v->type) : "nothing");
    if (memchr(v->s, 0, v->n)) return verr(v, what, err, errlen, "the string holds a NUL character (\\u0000)");
    *out = v->s;
    return 0;
}

// The member key of obj, or NULL with "doc: missing key 'k' in the object at byte N".
static const json_t *member(const json_t *obj, const char *key, char *what, size_t wlen, char *err, size_t errlen) {
    snprintf(what, wlen, "key '%s'", key);
    if (!obj || obj->type != JSON_OBJECT) {
        verr(obj, "the value", err, errlen, "expected an object holding key '%s', got %s", key,
             obj ? a_type(obj->type) : "nothing");
        return NULL;
    }
    const json_t *v = json_get(obj, key);
    if (!v) snprintf(err, errlen, "%s: missing key '%s' in the object at byte %zu", obj->doc ? obj->doc : "json", key, obj->at);
    return v;
}

#define GETTER(call)                                             \
    char what[160];                                              \
    const json_t *v = member(obj, key, what, sizeof what, err, errlen); \
    if (!v) return -EINVAL;                                      \
    return call;

int json_get_int64(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out, char *err,
                   size_t errlen) {
    GETTER(json_as_int64(v, what, min, max, out, err, errlen))
}
int json_get_uint64(const json_t *obj, const char *key, uint64_t max, uint64_t *out, char *err, size_t errlen) {
    GETTER(json_as_uint64(v, what, max, out, err, errlen))
}
int json_get_double(const json_t *obj, const char *key, double *out, char *err, size_t errlen) {
    GETTER(json_as_double(v, what, out, err, errlen))
}
int json_get_bool(const json_t *obj, const char *key, int *out, char *err, size_t errlen) {
    GETTER(json_as_bool(v, what, out, err, errlen))
}
int json_get_string(const json_t *obj, const char *key, const char **out, char *err, size_t errlen) {
    GETTER(json_as_string(v, what, out, err, errlen))
}

static int get_typed(const json_t *obj, const char *key, json_type_t type, const json_t **out, char *err,
                     size_t errlen) {
    char what[160];
    const json_t *v = member(obj, key, what, sizeof what, err, errlen);
    if (!v) return -EINVAL;
    if (v->type != type) return verr(v, what, err, errlen, "expected %s, got %s", a_type(type), a_type(v->type));
    *out = v;
    return 0;
}

int json_get_object(const json_t *obj, const char *key, const json_t **out, char *err, size_t errlen) {
    return get_typed(obj, key, JSON_OBJECT, out, err, errlen);
}

int json_get_array(const json_t *obj, const char *key, const json_t **out, char *err, size_t errlen) {
    return get_typed(obj, key, JSON_ARRAY, out, err, errlen);
}

// ---------------------------------------------------------------- writing

ssize_t json_escape(char *dst, size_t cap, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t need = 0, w = 0; // bytes the whole string needs; bytes written (whole units only)
    int full = 0;
#define EMIT(src, k)                                            \
    do {                                                        \
        size_t k_ = (k);                                        \
        if (!full && cap && w + k_ < cap) {                     \
            memcpy(dst + w, (src), k_);                         \
            w += k_;                                            \
        } else {                                                \
            full = 1;                                           \
        }                                                       \
        need += k_;                                             \
    } while (0)
    EMIT("\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        char esc[8];
        if (c == '"') EMIT("\\\"", 2);
        else if (c == '\\') EMIT("\\\\", 2);
        else if (c == '\n') EMIT("\\n", 2);
        else if (c == '\t') EMIT("\\t", 2);
        else if (c == '\r') EMIT("\\r", 2);
        else if (c == '\b') EMIT("\\b", 2);
        else if (c == '\f') EMIT("\\f", 2);
        else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            EMIT(esc, 6);
        } else {
            size_t k = utf8_seq(u + i, n - i);
            if (!k) {
                if (cap) dst[w] = 0;
                return -EILSEQ;
            }
            EMIT(u + i, k);
            i += k;
            continue;
        }
        i++;
    }
    EMIT("\"", 1);
#undef EMIT
    if (cap) dst[w] = 0;
    return (ssize_t)need;
}

int json_fput_string(FILE *f, const char *s) {
    size_t n = strlen(s);
    ssize_t need = json_escape(NULL, 0, s, n);
    if (need < 0) return (int)need;
    char *buf = malloc((size_t)need + 1);
    if (!buf) return -ENOMEM;
    json_escape(buf, (size_t)need + 1, s, n);
    int rc = fwrite(buf, 1, (size_t)need, f) == (size_t)need ? 0 : -EIO;
    free(buf);
    return rc;
}
