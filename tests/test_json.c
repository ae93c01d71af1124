// test_json.c — the strict JSON reader and the string escaper: valid documents and the tree
// they give (types, order, offsets), every escape, exact big integers, every error class with
// its exact one-line message, the depth/size/value limits, the typed getters' messages, and
// escape → parse round trips over random strings.
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"
#include "testutil.h"

static json_t *parse_ok(const char *text) {
    json_t *j = NULL;
    char err[512] = "";
    int rc = json_parse(text, strlen(text), "t.json", NULL, &j, err, sizeof err);
    ck_assert_msg(rc == 0, "parse of <%s> failed: %s", text, err);
    ck_assert_ptr_nonnull(j);
    return j;
}

// ---------------------------------------------------------------- core

START_TEST(test_document) {
    const char *text = " {\"name\": \"tiny\", \"dims\": [1, -2, 3.5e1, 0],\n\t\"ok\": true, \"no\": false, "
                       "\"nothing\": null, \"nested\": {\"deep\": [[], {}]}}\r\n";
    json_t *j = parse_ok(text);
    ck_assert_int_eq(j->type, JSON_OBJECT);
    ck_assert_uint_eq(j->n, 6);
    ck_assert_uint_eq(j->at, 1);
    // Members in document order, each with its key and offsets.
    const char *keys[] = {"name", "dims", "ok", "no", "nothing", "nested"};
    json_type_t types[] = {JSON_STRING, JSON_ARRAY, JSON_TRUE, JSON_FALSE, JSON_NULL, JSON_OBJECT};
    for (int i = 0; i < 6; i++) {
        ck_assert_str_eq(j->kids[i].key, keys[i]);
        ck_assert_uint_eq(j->kids[i].key_len, strlen(keys[i]));
        ck_assert_int_eq(j->kids[i].type, types[i]);
        ck_assert_ptr_eq(json_get(j, keys[i]), &j->kids[i]);
        ck_assert_str_eq(j->kids[i].doc, "t.json");
        ck_assert_uint_eq(j->kids[i].key_at, (size_t)(strstr(text, keys[i]) - text - 1));
    }
    ck_assert_ptr_null(json_get(j, "missing"));
    ck_assert_ptr_null(json_get(j, "nam"));
    ck_assert_ptr_null(json_get(&j->kids[1], "name")); // not an object
    ck_assert_ptr_null(json_get(NULL, "name"));
    const json_t *name = json_get(j, "name");
    ck_assert_str_eq(name->s, "tiny");
    ck_assert_uint_eq(name->n, 4);
    ck_assert_uint_eq(name->at, (size_t)(strstr(text, "\"tiny\"") - text));
    const json_t *dims = json_get(j, "dims");
    ck_assert_uint_eq(dims->n, 4);
    ck_assert_str_eq(dims->kids[0].s, "1");
    ck_assert_str_eq(dims->kids[1].s, "-2");
    ck_assert_str_eq(dims->kids[2].s, "3.5e1"); // the text as written
    ck_assert(dims->kids[2].num == 35.0);
    ck_assert(dims->kids[1].num == -2.0);
    ck_assert_uint_eq(dims->kids[2].at, (size_t)(strstr(text, "3.5e1") - text));
    ck_assert_ptr_null(dims->kids[0].key);
    const json_t *deep = json_get(json_get(j, "nested"), "deep");
    ck_assert_int_eq(deep->type, JSON_ARRAY);
    ck_assert_uint_eq(deep->n, 2);
    ck_assert_int_eq(deep->kids[0].type, JSON_ARRAY);
    ck_assert_uint_eq(deep->kids[0].n, 0);
    ck_assert_ptr_null(deep->kids[0].kids);
    ck_assert_int_eq(deep->kids[1].type, JSON_OBJECT);
    ck_assert_uint_eq(deep->kids[1].n, 0);
    json_free(j);
    json_free(NULL);
}
END_TEST

START_TEST(test_scalars_at_root) {
    struct { const char *text; json_type_t type; } cases[] = {
        {"0", JSON_NUMBER}, {"-0", JSON_NUMBER}, {" \"\" ", JSON_STRING}, {"true", JSON_TRUE},
        {"false", JSON_FALSE}, {"null", JSON_NULL}, {"[]", JSON_ARRAY}, {"{}", JSON_OBJECT},
        {"1E+2", JSON_NUMBER}, {"-1.25e-3", JSON_NUMBER}, {"1e-400", JSON_NUMBER}, // underflow is finite
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = parse_ok(cases[i].text);
        ck_assert_int_eq(j->type, cases[i].type);
        json_free(j);
    }
    json_t *j = parse_ok("-1.25e-3");
    ck_assert(j->num == -1.25e-3);
    json_free(j);
}
END_TEST

// The buffer needs no NUL and only len bytes are read.
START_TEST(test_length_not_nul) {
    const char buf[] = {'[', '1', ',', '2', ']', 'x', 'y', 'z'};
    json_t *j = NULL;
    char err[256] = "";
    ck_assert_int_eq(json_parse(buf, 5, "t.json", NULL, &j, err, sizeof err), 0);
    ck_assert_uint_eq(j->n, 2);
    json_free(j);
    ck_assert_int_eq(json_parse("123", 2, "t.json", NULL, &j, err, sizeof err), 0);
    ck_assert_str_eq(j->s, "12");
    json_free(j);
    // A heap buffer of exactly the document (ASan catches a read past it).
    char *h = malloc(4);
    memcpy(h, "\"ab\"", 4);
    ck_assert_int_eq(json_parse(h, 4, "t.json", NULL, &j, err, sizeof err), 0);
    ck_assert_str_eq(j->s, "ab");
    json_free(j);
    memcpy(h, "\"ab\\", 4);
    ck_assert_int_eq(json_parse(h, 4, "t.json", NULL, &j, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "t.json: byte 0: unterminated string");
    free(h);
}
END_TEST

START_TEST(test_escapes) {
    struct { const char *text; const char *want; size_t n; } cases[] = {
        {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t", 8},
        {"\"\\u0041\\u00e9\\u00E9\"", "A\xC3\xA9\xC3\xA9", 5},
        {"\"\\u20AC\"", "\xE2\x82\xAC", 3},                  // U+20AC, 3 bytes
        {"\"\\uD83D\\uDE00\"", "\xF0\x9F\x98\x80", 4},      // U+1F600 from a surrogate pair
        {"\"\\udbff\\udfff\"", "\xF4\x8F\xBF\xBF", 4},      // U+10FFFF, the last code point
        {"\"\\u007f\\u0080\\u07ff\\u0800\\uffff\"", "\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF", 11},
        {"\"a\\u0000b\"", "a\0b", 3},                        // NUL kept; n tells
        {"\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x7F\"", "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x7F", 10}, // raw UTF-8
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = parse_ok(cases[i].text);
        ck_assert_int_eq(j->type, JSON_STRING);
        ck_assert_msg(j->n == cases[i].n && memcmp(j->s, cases[i].want, cases[i].n) == 0 && j->s[j->n] == 0,
                      "case %zu: got %zu bytes", i, j->n);
        json_free(j);
    }
    // Escaped keys are decoded too.
    json_t *j = parse_ok("{\"\\u0061\\n\":1}");
    ck_assert_ptr_nonnull(json_get(j, "a\n"));
    json_free(j);
}
END_TEST

START_TEST(test_big_integers) {
    json_t *j = parse_ok("[18446744073709551615, 9223372036854775807, -9223372036854775808, 18446744073709551616, "
                         "-1, 1.0, 1e3, -0, 9223372036854775808, -9223372036854775809, 12345678901234567890]");
    uint64_t u = 0;
    int64_t s = 0;
    ck_assert_int_eq(json_num_uint64(&j->kids[0], &u), 0);
    ck_assert(u == UINT64_MAX);
    ck_assert_int_eq(json_num_int64(&j->kids[0], &s), -ERANGE);
    ck_assert_int_eq(json_num_int64(&j->kids[1], &s), 0);
    ck_assert(s == INT64_MAX);
    ck_assert_int_eq(json_num_int64(&j->kids[2], &s), 0);
    ck_assert(s == INT64_MIN);
    ck_assert_int_eq(json_num_uint64(&j->kids[2], &u), -ERANGE);
    ck_assert_int_eq(json_num_uint64(&j->kids[3], &u), -ERANGE); // 2^64
    ck_assert_int_eq(json_num_uint64(&j->kids[4], &u), -ERANGE);
    ck_assert_int_eq(json_num_int64(&j->kids[4], &s), 0);
    ck_assert(s == -1);
    ck_assert_int_eq(json_num_int64(&j->kids[5], &s), -EDOM);
    ck_assert_int_eq(json_num_uint64(&j->kids[6], &u), -EDOM);
    ck_assert_int_eq(json_num_uint64(&j->kids[7], &u), 0);
    ck_assert(u == 0);
    ck_assert_int_eq(json_num_int64(&j->kids[8], &s), -ERANGE);
    ck_assert_int_eq(json_num_uint64(&j->kids[8], &u), 0);
    ck_assert(u == 9223372036854775808ULL);
    ck_assert_int_eq(json_num_int64(&j->kids[9], &s), -ERANGE);
    ck_assert_int_eq(json_num_uint64(&j->kids[10], &u), 0);
    ck_assert(u == 12345678901234567890ULL); // not representable as a double: exact only from text
    ck_assert_int_eq(json_num_uint64(json_get(j, "x"), &u), -EINVAL);
    json_free(j);
}
END_TEST

// ---------------------------------------------------------------- errors

typedef struct { const char *text; size_t len; const char *msg; } bad_t; // len 0: strlen(text)

static const bad_t bad[] = {
    {"", 0, "t.json: byte 0: expected a value, got end of input"},
    {"   ", 0, "t.json: byte 3: expected a value, got end of input"},
    {"{\"a\":1 \"b\":2}", 0, "t.json: byte 7: expected ',' or '}', got '\"'"},
    {"[1 2]", 0, "t.json: byte 3: expected ',' or ']', got '2'"},
    {"[1", 0, "t.json: byte 2: expected ',' or ']', got end of input"},
    {"{\"a\"", 0, "t.json: byte 4: expected ':' after a key, got end of input"},
    {"{\"a\" 1}", 0, "t.json: byte 5: expected ':' after a key, got '1'"},
    {"{1:2}", 0, "t.json: byte 1: expected a string key, got '1'"},
    {"{\"a\":1,}", 0, "t.json: byte 7: expected a string key, got '}'"},
    {"{", 0, "t.json: byte 1: expected a string key, got end of input"},
    {"[1,]", 0, "t.json: byte 3: expected a value, got ']'"},
    {"{\"a\":}", 0, "t.json: byte 5: expected a value, got '}'"},
    {"\"abc", 0, "t.json: byte 0: unterminated string"},
    {"\"a\\", 0, "t.json: byte 0: unterminated string"},
    {"[\"a\nb\"]", 0, "t.json: byte 3: control character 0x0a in a string (escape it, e.g. \\n or \\u000a)"},
    {"\"\t\"", 0, "t.json: byte 1: control character 0x09 in a string (escape it, e.g. \\n or \\u0009)"},
    {"\"\\q\"", 0, "t.json: byte 1: invalid escape '\\q' in a string"},
    {"\"\\'\"", 0, "t.json: byte 1: invalid escape '\\'' in a string"},
    {"\"\\\x01\"", 0, "t.json: byte 1: invalid escape '\\' + byte 0x01 in a string"},
    {"\"\\u12G4\"", 0, "t.json: byte 1: invalid \\u escape (accepted: \\u and 4 hex digits)"},
    {"\"\\u12\"", 0, "t.json: byte 1: invalid \\u escape (accepted: \\u and 4 hex digits)"},
    {"\"\\u", 0, "t.json: byte 1: invalid \\u escape (accepted: \\u and 4 hex digits)"},
    {"\"\\uD800\"", 0, "t.json: byte 1: unpaired surrogate \\uD800 in a string (a high surrogate needs a "
                       "\\uDC00..\\uDFFF after it)"},
    {"\"x\\udbff\\n\"", 0, "t.json: byte 2: unpaired surrogate \\uDBFF in a string (a high surrogate needs a "
                           "\\uDC00..\\uDFFF after it)"},
    {"\"\\uD800\\u0041\"", 0, "t.json: byte 1: unpaired surrogate \\uD800 in a string (followed by \\u0041, not "
                              "\\uDC00..\\uDFFF)"},
    {"\"\\uD800\\uD800\"", 0, "t.json: byte 1: unpaired surrogate \\uD800 in a string (followed by \\uD800, not "
                              "\\uDC00..\\uDFFF)"},
    {"\"\\uD800\\u00\"", 0, "t.json: byte 7: invalid \\u escape (accepted: \\u and 4 hex digits)"},
    {"\"\\uDC00\"", 0, "t.json: byte 1: unpaired surrogate \\uDC00 in a string (a low surrogate must follow a high "
                       "one)"},
    {"\"\xC3\x28\"", 0, "t.json: byte 1: invalid UTF-8 in a string (byte 0xc3)"},
    {"\"ab\xC0\xAF\"", 0, "t.json: byte 3: invalid UTF-8 in a string (byte 0xc0)"},      // overlong '/'
    {"\"\xE0\x80\xAF\"", 0, "t.json: byte 1: invalid UTF-8 in a string (byte 0xe0)"},    // overlong 3-byte
    {"\"\xED\xA0\x80\"", 0, "t.json: byte 1: invalid UTF-8 in a string (byte 0xed)"},    // encoded surrogate
    {"\"\xF4\x90\x80\x80\"", 0, "t.json: byte 1: invalid UTF-8 in a string (byte 0xf4)"}, // past U+10FFFF
    {"\"\xF5\x80\x80\x80\"", 0, "t.json: byte 1: invalid UTF-8 in a string (byte 0xf5)"},
    {"\"\x80\"", 0, "t.json: byte 1: invalid UTF-8 in a string (byte 0x80)"},             // lone continuation
    {"\"\xE2\x82\"", 0, "t.json: byte 1: invalid UTF-8 in a string (byte 0xe2)"},         // cut short
    {"\"\xE2\x82", 0, "t.json: byte 1: invalid UTF-8 in a string (byte 0xe2)"},
    {"\xEF\xBB\xBF{}", 0, "t.json: byte 0: expected a value, got byte 0xef"},             // a BOM
    {"[1,\0]", 5, "t.json: byte 3: expected a value, got byte 0x00"},
    {"\x01", 0, "t.json: byte 0: expected a value, got byte 0x01"},
    {"01", 0, "t.json: byte 0: invalid number: leading zero"},
    {"[-01]", 0, "t.json: byte 1: invalid number: leading zero"},
    {"-", 0, "t.json: byte 0: invalid number: expected a digit after '-'"},
    {"-a", 0, "t.json: byte 0: invalid number: expected a digit after '-'"},
    {"1.", 0, "t.json: byte 0: invalid number: expected a digit after '.'"},
    {"1.e5", 0, "t.json: byte 0: invalid number: expected a digit after '.'"},
    {".5", 0, "t.json: byte 0: expected a value, got '.'"},
    {"1e", 0, "t.json: byte 0: invalid number: expected a digit in the exponent"},
    {"[1E+]", 0, "t.json: byte 1: invalid number: expected a digit in the exponent"},
    {"+1", 0, "t.json: byte 0: expected a value, got '+'"},
    {"1e999", 0, "t.json: byte 0: number 1e999 is too large for a double"},
    {"[0, -1.5e400]", 0, "t.json: byte 4: number -1.5e400 is too large for a double"},
    {"NaN", 0, "t.json: byte 0: expected a value, got 'N'"},
    {"-Infinity", 0, "t.json: byte 0: invalid number: expected a digit after '-'"},
    {"0x10", 0, "t.json: byte 1: unexpected data after the document ('x')"},
    {"tru", 0, "t.json: byte 0: invalid literal (accepted: true, false, null)"},
    {"[nul]", 0, "t.json: byte 1: invalid literal (accepted: true, false, null)"},
    {"fals", 0, "t.json: byte 0: invalid literal (accepted: true, false, null)"},
    {"True", 0, "t.json: byte 0: expected a value, got 'T'"},
    {"truex", 0, "t.json: byte 4: unexpected data after the document ('x')"},
    {"{} {}", 0, "t.json: byte 3: unexpected data after the document ('{')"},
    {"1 2", 0, "t.json: byte 2: unexpected data after the document ('2')"},
    {"{}\0", 3, "t.json: byte 2: unexpected data after the document (byte 0x00)"},
    {"{\"a\":1,\"b\":2,\"a\":3}", 0, "t.json: byte 13: duplicate key \"a\" (first at byte 1)"},
    {"{\"a\":1,\"\\u0061\":2}", 0, "t.json: byte 7: duplicate key \"a\" (first at byte 1)"},
    {"{\"b\":{\"x\":1},\"a\":1,\"b\":2,\"a\":3}", 0, "t.json: byte 19: duplicate key \"b\" (first at byte 1)"},
    {"[{\"k\\n\":1,\"k\\n\":2}]", 0, "t.json: byte 10: duplicate key \"k\\n\" (first at byte 2)"},
};
enum { NBAD = sizeof bad / sizeof bad[0] };

START_TEST(test_error_message) {
    const bad_t *b = &bad[_i];
    size_t len = b->len ? b->len : strlen(b->text);
    char *copy = malloc(len ? len : 1); // exactly len bytes: ASan sees any read past the end
    memcpy(copy, b->text, len);
    json_t *j = (json_t *)&j;
    char err[512] = "";
    int rc = json_parse(copy, len, "t.json", NULL, &j, err, sizeof err);
    ck_assert_msg(rc == -EINVAL, "case %d <%s>: rc %d, want -EINVAL", _i, b->text, rc);
    ck_assert_ptr_null(j);
    ck_assert_msg(strcmp(err, b->msg) == 0, "case %d:\n got: %s\nwant: %s", _i, err, b->msg);
    free(copy);
}
END_TEST

START_TEST(test_long_number) {
    char buf[600];
    memset(buf, '7', sizeof buf); // 0.777...: long but finite
    buf[0] = '0';
    buf[1] = '.';
    json_t *j = NULL;
    char err[512] = "";
    ck_assert_int_eq(json_parse(buf, JSON_MAX_NUMBER_LEN, "t.json", NULL, &j, err, sizeof err), 0);
    ck_assert_uint_eq(j->n, JSON_MAX_NUMBER_LEN);
    json_free(j);
    ck_assert_int_eq(json_parse(buf, JSON_MAX_NUMBER_LEN + 1, "t.json", NULL, &j, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "t.json: byte 0: number of 513 characters is too long (at most 512)");
}
END_TEST

// ---------------------------------------------------------------- limits

static char *nested(int depth) {
    char *s = malloc((size_t)depth * 2 + 1);
    for (int i = 0; i < depth; i++) { s[i] = '['; s[depth + i] = ']'; }
    s[2 * depth] = 0;
    return s;
}

START_TEST(test_depth) {
    json_t *j = NULL;
    char err[256] = "";
    char *ok = nested(JSON_MAX_DEPTH);
    ck_assert_int_eq(json_parse(ok, strlen(ok), "t.json", NULL, &j, err, sizeof err), 0);
    const json_t *v = j;
    for (int i = 1; i < JSON_MAX_DEPTH; i++) v = &v->kids[0];
    ck_assert_int_eq(v->type, JSON_ARRAY);
    ck_assert_uint_eq(v->n, 0);
    json_free(j);
    char *deep = nested(JSON_MAX_DEPTH + 1);
    ck_assert_int_eq(json_parse(deep, strlen(deep), "t.json", NULL, &j, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "t.json: byte 64: nesting deeper than 64");
    // Objects count too, and a smaller limit applies.
    const char *objs = "{\"a\":{\"b\":[{}]}}";
    json_limits_t lim = {.max_depth = 3};
    ck_assert_int_eq(json_parse(objs, strlen(objs), "t.json", &lim, &j, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "t.json: byte 11: nesting deeper than 3");
    lim.max_depth = 4;
    ck_assert_int_eq(json_parse(objs, strlen(objs), "t.json", &lim, &j, err, sizeof err), 0);
    json_free(j);
    // A million '[' fails at the limit without recursing a million times.
    size_t big = 1 << 20;
    char *many = malloc(big);
    memset(many, '[', big);
    ck_assert_int_eq(json_parse(many, big, "t.json", NULL, &j, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "t.json: byte 64: nesting deeper than 64");
    free(many);
    free(ok);
    free(deep);
}
END_TEST

START_TEST(test_size_limits) {
    json_t *j = NULL;
    char err[256] = "";
    json_limits_t lim = {.max_bytes = 5};
    ck_assert_int_eq(json_parse("[1,2,3]", 7, "t.json", &lim, &j, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "t.json: 7 bytes, more than the 5-byte limit for this document");
    lim = (json_limits_t){.max_values = 3};
    ck_assert_int_eq(json_parse("[1,2,3]", 7, "t.json", &lim, &j, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "t.json: byte 5: more than 3 values (the limit for this document)");
    lim.max_values = 4;
    ck_assert_int_eq(json_parse("[1,2,3]", 7, "t.json", &lim, &j, err, sizeof err), 0);
    json_free(j);
    // A wide document: 200k values, every one reachable.
    size_t n = 200000;
    char *s = malloc(n * 2 + 2);
    s[0] = '[';
    for (size_t i = 0; i < n; i++) { s[1 + 2 * i] = (char)('0' + i % 10); s[2 + 2 * i] = ','; }
    s[2 * n] = ']';
    ck_assert_int_eq(json_parse(s, 2 * n + 1, "t.json", NULL, &j, err, sizeof err), 0);
    ck_assert_uint_eq(j->n, n);
    ck_assert(j->kids[n - 1].num == (double)((n - 1) % 10));
    json_free(j);
    free(s);
    // A wide object with unique keys (the duplicate check sorts; this must stay fast).
    size_t nk = 100000;
    char *o = malloc(nk * 16 + 2), *w = o;
    *w++ = '{';
    for (size_t i = 0; i < nk; i++) w += sprintf(w, "%s\"k%zu\":%zu", i ? "," : "", (nk - i) * 7919 % 100003, i);
    *w++ = '}';
    ck_assert_int_eq(json_parse(o, (size_t)(w - o), "t.json", NULL, &j, err, sizeof err), 0);
    ck_assert_uint_eq(j->n, nk);
    json_free(j);
    free(o);
}
END_TEST

// ---------------------------------------------------------------- getters

START_TEST(test_getters) {
    const char *text = "{\"step\": 42, \"big\": 18446744073709551615, \"neg\": -7, \"lr\": 3e-4, \"half\": 1.5, "
                       "\"s\": \"hi\", \"b\": true, \"nul\": \"a\\u0000b\", \"o\": {}, \"a\": [1], \"n\": 300}";
    json_t *j = parse_ok(text);
    char err[512] = "";
    int64_t i64 = 0;
    uint64_t u64 = 0;
    double d = 0;
    int b = 0;
    const char *s = NULL;
    const json_t *v = NULL;
    ck_assert_int_eq(json_get_int64(j, "step", 0, 1000, &i64, err, sizeof err), 0);
    ck_assert(i64 == 42);
    ck_assert_int_eq(json_get_int64(j, "neg", INT64_MIN, 0, &i64, err, sizeof err), 0);
    ck_assert(i64 == -7);
    ck_assert_int_eq(json_get_uint64(j, "big", UINT64_MAX, &u64, err, sizeof err), 0);
    ck_assert(u64 == UINT64_MAX);
    ck_assert_int_eq(json_get_double(j, "lr", &d, err, sizeof err), 0);
    ck_assert(d == 3e-4);
    ck_assert_int_eq(json_get_double(j, "step", &d, err, sizeof err), 0); // an integer is a number too
    ck_assert(d == 42.0);
    ck_assert_int_eq(json_get_bool(j, "b", &b, err, sizeof err), 0);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(json_get_string(j, "s", &s, err, sizeof err), 0);
    ck_assert_str_eq(s, "hi");
    ck_assert_int_eq(json_get_object(j, "o", &v, err, sizeof err), 0);
    ck_assert_int_eq(v->type, JSON_OBJECT);
    ck_assert_int_eq(json_get_array(j, "a", &v, err, sizeof err), 0);
    ck_assert_int_eq(v->type, JSON_ARRAY);

#define EXPECT(call, text)                                               \
    do {                                                                 \
        err[0] = 0;                                                      \
        int rc_ = (call);                                                \
        ck_assert_msg(rc_ == -EINVAL, "%s: rc %d", #call, rc_);          \
        ck_assert_msg(strcmp(err, text) == 0, "%s:\n got: %s\nwant: %s", #call, err, text); \
    } while (0)
    EXPECT(json_get_int64(j, "missing", 0, 10, &i64, err, sizeof err), "t.json: missing key 'missing' in the object at byte 0");
    EXPECT(json_get_int64(j, "s", 0, 10, &i64, err, sizeof err), "t.json: key 's' at byte 83: expected an integer, got a string");
    EXPECT(json_get_int64(j, "half", 0, 10, &i64, err, sizeof err), "t.json: key 'half' at byte 73: expected an integer, got 1.5");
    EXPECT(json_get_int64(j, "lr", 0, 10, &i64, err, sizeof err), "t.json: key 'lr' at byte 59: expected an integer, got 3e-4");
    EXPECT(json_get_int64(j, "n", 0, 255, &i64, err, sizeof err), "t.json: key 'n' at byte 143: 300 is out of range (accepted: 0..255)");
    EXPECT(json_get_int64(j, "big", INT64_MIN, INT64_MAX, &i64, err, sizeof err),
           "t.json: key 'big' at byte 20: 18446744073709551615 is out of range (accepted: -9223372036854775808..9223372036854775807)");
    EXPECT(json_get_uint64(j, "neg", UINT64_MAX, &u64, err, sizeof err),
           "t.json: key 'neg' at byte 49: -7 is out of range (accepted: 0..18446744073709551615)");
    EXPECT(json_get_uint64(j, "n", 299, &u64, err, sizeof err), "t.json: key 'n' at byte 143: 300 is out of range (accepted: 0..299)");
    EXPECT(json_get_uint64(j, "o", 9, &u64, err, sizeof err), "t.json: key 'o' at byte 124: expected an integer, got an object");
    EXPECT(json_get_double(j, "b", &d, err, sizeof err), "t.json: key 'b' at byte 94: expected a number, got a boolean");
    EXPECT(json_get_bool(j, "step", &b, err, sizeof err), "t.json: key 'step' at byte 9: expected true or false, got a number");
    EXPECT(json_get_string(j, "a", &s, err, sizeof err), "t.json: key 'a' at byte 133: expected a string, got an array");
    EXPECT(json_get_string(j, "nul", &s, err, sizeof err), "t.json: key 'nul' at byte 107: the string holds a NUL character (\\u0000)");
    EXPECT(json_get_object(j, "a", &v, err, sizeof err), "t.json: key 'a' at byte 133: expected an object, got an array");
    EXPECT(json_get_array(j, "o", &v, err, sizeof err), "t.json: key 'o' at byte 124: expected an array, got an object");
    EXPECT(json_get_bool(&j->kids[9], "x", &b, err, sizeof err),
           "t.json: the value at byte 133: expected an object holding key 'x', got an array");
    EXPECT(json_as_int64(&j->kids[9].kids[0], "dims[0]", 2, 5, &i64, err, sizeof err),
           "t.json: dims[0] at byte 134: 1 is out of range (accepted: 2..5)");
#undef EXPECT
    // The offsets in the messages are where the values are.
    ck_assert_uint_eq(json_get(j, "s")->at, (size_t)(strstr(text, "\"hi\"") - text));
    ck_assert_uint_eq(json_get(j, "n")->at, (size_t)(strstr(text, "300") - text));
    json_free(j);
}
END_TEST

// ---------------------------------------------------------------- writer

START_TEST(test_escape) {
    char buf[128];
    const char *s = "a\"b\\c\n\t\r\b\f\x01\x1f\x7f/\xC3\xA9\xF0\x9F\x98\x80";
    const char *want = "\"a\\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u001f\x7f/\xC3\xA9\xF0\x9F\x98\x80\"";
    ssize_t k = json_escape(buf, sizeof buf, s, strlen(s));
    ck_assert_int_eq(k, (ssize_t)strlen(want));
    ck_assert_str_eq(buf, want);
    // An embedded NUL is escaped, not a terminator.
    k = json_escape(buf, sizeof buf, "a\0b", 3);
    ck_assert_str_eq(buf, "\"a\\u0000b\"");
    // Too small: the full length comes back, the buffer holds whole units only and a NUL.
    ck_assert_int_eq(json_escape(NULL, 0, s, strlen(s)), (ssize_t)strlen(want));
    for (size_t cap = 1; cap < strlen(want) + 2; cap++) {
        memset(buf, 'Z', sizeof buf);
        k = json_escape(buf, cap, s, strlen(s));
        ck_assert_int_eq(k, (ssize_t)strlen(want));
        size_t w = strlen(buf);
        ck_assert_uint_lt(w, cap);
        ck_assert_msg(strncmp(buf, want, w) == 0, "cap %zu: %s", cap, buf);
        // A cut never leaves half an escape or half a UTF-8 sequence: what follows in want
        // starts a unit (a quote, a backslash escape, ASCII or a UTF-8 lead byte).
        if (w < strlen(want)) {
            unsigned char next = (unsigned char)want[w];
            ck_assert_msg((next & 0xC0) != 0x80, "cap %zu cut inside a UTF-8 sequence", cap);
            ck_assert_msg(w == 0 || buf[w - 1] != '\\' || (w >= 2 && buf[w - 2] == '\\'), "cap %zu cut inside an escape", cap);
        }
    }
    // Not UTF-8: refused, never written as broken JSON.
    ck_assert_int_eq(json_escape(buf, sizeof buf, "ok\xC3", 3), -EILSEQ);
    ck_assert_int_eq(json_escape(buf, sizeof buf, "\xED\xA0\x80", 3), -EILSEQ);

    // json_fput_string writes the same bytes.
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(json_fput_string(f, s), 0);
    ck_assert_int_eq(json_fput_string(f, "bad\xFF"), -EILSEQ);
    fflush(f);
    rewind(f);
    char back[128] = "";
    size_t got = fread(back, 1, sizeof back - 1, f);
    fclose(f);
    ck_assert_uint_eq(got, strlen(want));
    ck_assert_str_eq(back, want);
}
END_TEST

// Random strings of code points (all planes, controls, quotes) escape to JSON that parses
// back to the same bytes.
START_TEST(test_escape_round_trip) {
    uint64_t rng = 0x5eed0000 + (uint64_t)_i;
    for (int iter = 0; iter < 2000; iter++) {
        char raw[256];
        size_t n = 0;
        int len = (int)(rng % 40);
        for (int c = 0; c < len; c++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            uint32_t r = (uint32_t)(rng >> 33), cp;
            switch (r % 5) {
            case 0: cp = r >> 3 & 0x7F; break;                 // ASCII incl. controls and NUL
            case 1: cp = "\"\\/\n\x01"[(r >> 3) % 5]; break;
            case 2: cp = 0x80 + (r >> 3) % 0x780; break;       // 2-byte
            case 3: cp = 0x800 + (r >> 3) % 0xF800; if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xE000; break;
            default: cp = 0x10000 + (r >> 3) % 0x100000; break;
            }
            if (cp < 0x80) raw[n++] = (char)cp;
            else if (cp < 0x800) { raw[n++] = (char)(0xC0 | cp >> 6); raw[n++] = (char)(0x80 | (cp & 0x3F)); }
            else if (cp < 0x10000) {
                raw[n++] = (char)(0xE0 | cp >> 12); raw[n++] = (char)(0x80 | (cp >> 6 & 0x3F)); raw[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                raw[n++] = (char)(0xF0 | cp >> 18); raw[n++] = (char)(0x80 | (cp >> 12 & 0x3F));
                raw[n++] = (char)(0x80 | (cp >> 6 & 0x3F)); raw[n++] = (char)(0x80 | (cp & 0x3F));
            }
        }
        ssize_t k = json_escape(NULL, 0, raw, n);
        ck_assert_int_ge(k, 2);
        char *esc = malloc((size_t)k + 1);
        ck_assert_int_eq(json_escape(esc, (size_t)k + 1, raw, n), k);
        json_t *j = NULL;
        char err[512] = "";
        ck_assert_msg(json_parse(esc, (size_t)k, "rt", NULL, &j, err, sizeof err) == 0, "iter %d: %s", iter, err);
        ck_assert_int_eq(j->type, JSON_STRING);
        ck_assert_msg(j->n == n && memcmp(j->s, raw, n) == 0, "iter %d: %zu bytes back, %zu in", iter, j->n, n);
        json_free(j);
        free(esc);
    }
}
END_TEST

// ---------------------------------------------------------------- suite

static Suite *json_suite(void) {
    Suite *s = suite_create("json");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_document);
    tcase_add_test(core, test_scalars_at_root);
    tcase_add_test(core, test_length_not_nul);
    tcase_add_test(core, test_escapes);
    tcase_add_test(core, test_big_integers);
    tcase_add_test(core, test_getters);
    suite_add_tcase(s, core);
    TCase *errors = tcase_create("errors");
    tcase_add_loop_test(errors, test_error_message, 0, NBAD);
    tcase_add_test(errors, test_long_number);
    suite_add_tcase(s, errors);
    TCase *limits = tcase_create("limits");
    tcase_add_test(limits, test_depth);
    tcase_add_test(limits, test_size_limits);
    tcase_set_timeout(limits, 60);
    suite_add_tcase(s, limits);
    TCase *writer = tcase_create("writer");
    tcase_add_test(writer, test_escape);
    tcase_add_loop_test(writer, test_escape_round_trip, 0, 4);
    suite_add_tcase(s, writer);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(json_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
