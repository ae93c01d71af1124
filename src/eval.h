// eval.h — `tiertrain eval`: the mean next-token loss of a saved checkpoint over a token file.
// The checkpoint's config.json / state.json give the model; its weights are loaded with
// checkpoint_load (weights only). The file's first N tokens (--eval-tokens, 0 = all) are cut
// into consecutive, non-overlapping windows of T+1 tokens (window i = tokens[i(T+1) ..
// i(T+1)+T], inputs its first T, targets its last T; a trailing partial window is dropped),
// one forward per window (B = 1). Every window predicts exactly T tokens, so the mean of the
// per-window mean losses is the mean over all W·T predicted tokens.
// Does not train, write anything, or read the optimizer state. Called by main.c.
#pragma once
#include "config.h"

// Prints the resolved setup, then "eval: loss ..." and a last line
// {"event":"eval","loss":L,"tokens":W*T,"windows":W}. Returns 0; bad input (a missing or
// bad checkpoint, bad data, no window fits) prints one line and exits 2, an I/O failure
// exits 1.
int eval_run(const config_t *cfg);
