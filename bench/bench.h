// bench.h — `tiertrain bench NAME`: each prints a table for people and, as its last line,
// one JSON object {"bench": NAME, ...}. Returns the process exit code.
#pragma once
#include "config.h"

int bench_gemm(const config_t *cfg); // bench/bench_gemm.c
int bench_io(const config_t *cfg);   // bench/bench_io.c
int bench_adam(const config_t *cfg); // bench/bench_adam.c
