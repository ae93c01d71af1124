// data.h — training/validation tokens: the built-in synthetic corpus, raw text files
// (bytes are tokens), and llm.c token files (256 int32 header: magic, version, token count;
// then the tokens: uint16 with magic 20240520 version 1, GPT-2's format and tokenize's;
// uint32 with magic 20240801 version 7, Llama 3's). Validated on open; never reads past
// what it checked.
// Does not know about the model beyond V (vocab) and T (sequence length).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config.h"

typedef struct data data_t;

enum { DATA_TRAIN = 0, DATA_VAL = 1 };

// Opens cfg->data for a model of vocab cfg->V, sequence cfg->T, batch cfg->B.
// Bad input (missing/unreadable file, wrong magic/version/size, a token >= vocab, too few
// tokens for one batch) returns a negative errno and writes one line (without the
// "tiertrain: " prefix) to err naming the file, the problem and the fix.
int data_open(data_t **out, const config_t *cfg, char *err, size_t errlen);
// Next micro-batch of split: inputs (B, T) and targets (B, T) — B·T+1 consecutive tokens,
// targets shifted by one; the position advances by B·T and wraps at the split's end.
void data_next(data_t *d, int split, int *inputs, int *targets);
void data_rewind(data_t *d, int split);       // back to the split's first token
// Where the split's next window starts (tokens into the split): what a checkpoint keeps.
uint64_t data_position(const data_t *d, int split);
// Continues the split from pos (from data_position of a run over the same data). Returns
// 0, or -EINVAL when no window fits there (a different data file or batch shape).
int data_seek(data_t *d, int split, uint64_t pos);
// Tokens [at, at + n) into inputs and [at + 1, at + n] into targets, counted from the
// source's first token (not a split's): eval's windows. Needs at + n < data_count(d).
void data_window(const data_t *d, size_t at, size_t n, int *inputs, int *targets);
size_t data_count(const data_t *d);            // tokens in the source
const char *data_kind(const data_t *d);        // "built-in corpus", "text", "llm.c uint16 tokens" or "... uint32 ..."
size_t data_tokens(const data_t *d, int split); // tokens in the split
const char *data_describe(const data_t *d);    // e.g. "synthetic (1048576 tokens, 5% held out)"
void data_free(data_t *d);                     // NULL-safe

// tiertrain tokenize IN.txt -o OUT.bin: bytes of IN as uint16 tokens in the llm.c format.
// Returns 0, or 2 after printing one line for bad input, or 1 for a write failure.
int data_tokenize(const char *in_path, const char *out_path);
