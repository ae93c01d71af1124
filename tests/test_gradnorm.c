// test_gradnorm.c — gradnorm.h: Σ g² the same over any split into block-aligned pieces, any
// order of adding them and any thread count; close to a long-double reference; infinite for
// NaN, Inf or overflow; exact through limb carries.
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "gradnorm.h"

// Gradients over a wide range of magnitudes (1e-30 .. 1e3), signs mixed.
static float *grads(size_t n, unsigned seed) {
    float *g = malloc(n * sizeof *g);
    srand(seed);
    for (size_t i = 0; i < n; i++) {
        double mag = pow(10.0, -30.0 + 33.0 * rand() / (double)RAND_MAX);
        g[i] = (float)((rand() & 1 ? 1 : -1) * mag);
    }
    return g;
}

START_TEST(test_split_and_order) {
    const size_t n = 9 * GRADNORM_BLOCK + 123;
    float *g = grads(n, 1);
    gradnorm_t whole, parts;
    gradnorm_zero(&whole);
    gradnorm_add_squares(&whole, g, n);
    // pieces at block boundaries, added last first, each through its own accumulator
    const size_t cut[] = {0, 2 * GRADNORM_BLOCK, 3 * GRADNORM_BLOCK, 7 * GRADNORM_BLOCK, n};
    gradnorm_zero(&parts);
    for (int k = 3; k >= 0; k--) {
        gradnorm_t one;
        gradnorm_zero(&one);
        gradnorm_add_squares(&one, g + cut[k], cut[k + 1] - cut[k]);
        gradnorm_add(&parts, &one);
    }
    ck_assert_msg(memcmp(&whole, &parts, sizeof whole) == 0, "the pieces' sum differs from the whole's");
    double v = gradnorm_value(&whole);
    long double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (long double)g[i] * g[i];
    ck_assert_msg(fabsl(v - ref) <= 1e-12L * ref, "%.17g against %.17Lg", v, ref);
    free(g);
}
END_TEST

START_TEST(test_threads) {
    const size_t n = 40 * GRADNORM_BLOCK + 5; // enough blocks for the parallel loop
    float *g = grads(n, 2);
    gradnorm_t a, b;
    omp_set_num_threads(1);
    gradnorm_zero(&a);
    gradnorm_add_squares(&a, g, n);
    omp_set_num_threads(2);
    gradnorm_zero(&b);
    gradnorm_add_squares(&b, g, n);
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "1 and 2 threads differ");
    free(g);
}
END_TEST

START_TEST(test_edges) {
    gradnorm_t a;
    float zero[8] = {0}, tiny[4] = {1e-30f, -1e-30f, 1e-30f, 0};
    gradnorm_zero(&a);
    gradnorm_add_squares(&a, zero, 8);
    ck_assert(gradnorm_value(&a) == 0);
    gradnorm_add_squares(&a, tiny, 4); // ~3e-60: far above the grid's 2^-320
    const double t2 = 3.0 * (double)tiny[0] * (double)tiny[0];
    ck_assert_msg(fabs(gradnorm_value(&a) / t2 - 1) < 1e-12, "%g against %g", gradnorm_value(&a), t2);
    float big[3] = {1e19f, 1e19f, 0};
    gradnorm_zero(&a);
    gradnorm_add_squares(&a, big, 3); // ~2e38, over FP32's range: the accumulator holds it
    const double b2 = 2.0 * (double)big[0] * (double)big[0];
    ck_assert_msg(fabs(gradnorm_value(&a) / b2 - 1) < 1e-12, "%g against %g", gradnorm_value(&a), b2);
    float bad[2] = {1.0f, NAN};
    gradnorm_zero(&a);
    gradnorm_add_squares(&a, bad, 2);
    ck_assert(isinf(gradnorm_value(&a)));
    bad[1] = INFINITY;
    gradnorm_zero(&a);
    gradnorm_add_squares(&a, bad, 2);
    ck_assert(isinf(gradnorm_value(&a)));
    // carries: adding two accumulators, a full limb plus one rolls into the next limb
    gradnorm_t c, d;
    gradnorm_zero(&c);
    gradnorm_zero(&d);
    c.limb[3] = UINT64_MAX;
    d.limb[3] = 1;
    gradnorm_add(&c, &d);
    ck_assert(c.limb[3] == 0 && c.limb[4] == 1 && !c.inf);
    // and adding a block's sum: 1² lands on the lowest bit of the limb that weighs 2^0
    // (GRADNORM_FRAC is a multiple of 64), full together with the next: the carry ripples
    // through both, and the total is 2^128 exactly
    const int l1 = GRADNORM_FRAC / 64;
    gradnorm_zero(&c);
    c.limb[l1] = c.limb[l1 + 1] = UINT64_MAX;
    const float one = 1.0f;
    gradnorm_add_squares(&c, &one, 1);
    ck_assert(c.limb[l1] == 0 && c.limb[l1 + 1] == 0 && c.limb[l1 + 2] == 1 && !c.inf);
    ck_assert(gradnorm_value(&c) == ldexp(1.0, 128));
}
END_TEST

int main(void) {
    Suite *s = suite_create("gradnorm");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_split_and_order);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_edges);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
