// bench_io.c — STUB.
#include "bench.h"
int bench_io(const config_t *cfg) { (void)cfg; return 2; }
