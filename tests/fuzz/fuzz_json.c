// fuzz_json.c — libFuzzer target for json.c: parses arbitrary bytes. A rejection must be one
// non-empty line naming the document; an accepted tree must be consistent (strings valid
// UTF-8 and NUL-terminated, numbers finite, every key found by json_get) and must survive
// write → parse unchanged (strings through json_escape, numbers as their text).
// Built by tests/fuzz/run.sh (`make fuzz`; CTest's test_fuzz_replay runs its corpus once), not by CMake.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

typedef struct { char *p; size_t len, cap; } buf_t;

static void put(buf_t *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
        b->p = realloc(b->p, b->cap);
        CHECK(b->p);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void put_str(buf_t *b, const char *s, size_t n) {
    ssize_t k = json_escape(NULL, 0, s, n);
    CHECK(k >= 2); // parsed strings are valid UTF-8, so they always escape
    char *t = malloc((size_t)k + 1);
    CHECK(t);
    CHECK(json_escape(t, (size_t)k + 1, s, n) == k);
    put(b, t, (size_t)k);
    free(t);
}

static void emit(buf_t *b, const json_t *v) {
    switch (v->type) {
    case JSON_NULL: put(b, "null", 4); break;
    case JSON_TRUE: put(b, "true", 4); break;
    case JSON_FALSE: put(b, "false", 5); break;
    case JSON_NUMBER: put(b, v->s, v->n); break;
    case JSON_STRING: put_str(b, v->s, v->n); break;
    case JSON_ARRAY:
    case JSON_OBJECT:
        put(b, v->type == JSON_ARRAY ? "[" : "{", 1);
        for (size_t i = 0; i < v->n; i++) {
            if (i) put(b, ",", 1);
            if (v->type == JSON_OBJECT) {
                put_str(b, v->kids[i].key, v->kids[i].key_len);
                put(b, ":", 1);
            }
            emit(b, &v->kids[i]);
        }
        put(b, v->type == JSON_ARRAY ? "]" : "}", 1);
        break;
    }
}

static void check_tree(const json_t *v, size_t len) {
    CHECK(v->at < len || (v->at == 0 && len == 0));
    CHECK(v->doc && strcmp(v->doc, "fuzz") == 0);
    int64_t i64;
    uint64_t u64;
    double d;
    int b;
    const char *s;
    char err[512];
    switch (v->type) {
    case JSON_NUMBER:
        CHECK(v->s && strlen(v->s) == v->n && v->n <= JSON_MAX_NUMBER_LEN);
        CHECK(isfinite(v->num));
        if (json_num_uint64(v, &u64) == 0 && u64 < (1ULL << 53)) CHECK(v->num == (double)u64);
        if (json_num_int64(v, &i64) == 0 && i64 > -(1LL << 53) && i64 < (1LL << 53)) CHECK(v->num == (double)i64);
        CHECK(json_as_double(v, "v", &d, err, sizeof err) == 0 && d == v->num);
        break;
    case JSON_STRING:
        CHECK(v->s && v->s[v->n] == 0);
        CHECK(json_escape(NULL, 0, v->s, v->n) >= 2);
        if (json_as_string(v, "v", &s, err, sizeof err) == 0) CHECK(strlen(s) == v->n);
        else CHECK(memchr(v->s, 0, v->n) && err[0] && !strchr(err, '\n'));
        break;
    case JSON_TRUE:
    case JSON_FALSE:
        CHECK(json_as_bool(v, "v", &b, err, sizeof err) == 0 && b == (v->type == JSON_TRUE));
        break;
    case JSON_NULL:
        CHECK(json_as_bool(v, "v", &b, err, sizeof err) == -22 && !strchr(err, '\n'));
        break;
    case JSON_ARRAY:
    case JSON_OBJECT:
        CHECK((v->n == 0) == (v->kids == NULL));
        for (size_t i = 0; i < v->n; i++) {
            const json_t *k = &v->kids[i];
            if (v->type == JSON_OBJECT) {
                CHECK(k->key && k->key[k->key_len] == 0 && k->key_at < k->at);
                // No duplicates, so lookup by a NUL-free key finds exactly this member.
                if (!memchr(k->key, 0, k->key_len)) CHECK(json_get(v, k->key) == k);
            } else {
                CHECK(k->key == NULL);
            }
            if (i) CHECK(v->kids[i - 1].at < k->at);
            check_tree(k, len);
        }
        if (v->type == JSON_OBJECT) {
            int rc = json_get_int64(v, "step", 0, INT64_MAX, &i64, err, sizeof err);
            CHECK(rc == 0 || (err[0] && !strchr(err, '\n')));
        }
        break;
    }
}

static int same(const json_t *a, const json_t *b) {
    if (a->type != b->type || a->n != b->n) return 0;
    if (a->type == JSON_STRING || a->type == JSON_NUMBER) return memcmp(a->s, b->s, a->n) == 0;
    for (size_t i = 0; i < a->n; i++) {
        const json_t *x = &a->kids[i], *y = &b->kids[i];
        if (a->type == JSON_OBJECT && (x->key_len != y->key_len || memcmp(x->key, y->key, x->key_len) != 0)) return 0;
        if (!same(x, y)) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *j = NULL;
    char err[512] = "";
    int rc = json_parse((const char *)data, size, "fuzz", NULL, &j, err, sizeof err);
    if (rc) {
        CHECK(j == NULL);
        CHECK((rc == -22 || rc == -12) && strncmp(err, "fuzz: ", 6) == 0 && !strchr(err, '\n'));
        return 0;
    }
    CHECK(j);
    check_tree(j, size);
    buf_t b = {0};
    emit(&b, j);
    json_t *k = NULL;
    rc = json_parse(b.p, b.len, "fuzz", NULL, &k, err, sizeof err);
    CHECK(rc == 0);
    CHECK(same(j, k));
    json_free(k);
    json_free(j);
    free(b.p);
    return 0;
}
