// data.c — STUB, replaced by the real loader.
#include <errno.h>
#include <stdio.h>
#include "data.h"
int data_open(data_t **out, const config_t *cfg, char *err, size_t errlen) { (void)cfg; *out = NULL; snprintf(err, errlen, "data not implemented"); return -ENOSYS; }
void data_next(data_t *d, int split, int *inputs, int *targets) { (void)d; (void)split; (void)inputs; (void)targets; }
void data_rewind(data_t *d, int split) { (void)d; (void)split; }
size_t data_tokens(const data_t *d, int split) { (void)d; (void)split; return 0; }
const char *data_describe(const data_t *d) { (void)d; return "stub"; }
void data_free(data_t *d) { (void)d; }
int data_tokenize(const char *in_path, const char *out_path) { (void)in_path; (void)out_path; return 2; }
