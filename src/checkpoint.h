// checkpoint.h — checkpoints that are complete or invisible (DESIGN §8).
//
// A checkpoint is a folder DIR/step-NNNNNNNN/ holding
//   model.safetensors      FP32 master weights (or BF16 with --save-dtype bf16), Hugging Face
//                          Llama names and shapes (lm_head.weight only when untied)
//   optimizer.safetensors  Adam m and v per tensor ("<name>.exp_avg", "<name>.exp_avg_sq"),
//                          and the FP32 master ("<name>.master") when the model file is BF16
//   config.json            LlamaConfig fields, loadable by transformers
//   state.json             step, data positions, the flags a resume must match, params_hash
// It is written under DIR/.tmp-step-NNNNNNNN-PID, every file fsynced, then renamed into
// place and the parent fsynced; DIR/latest (a one-line file naming the newest folder) is
// replaced the same way. Readers ignore .tmp-* folders, so a crash at any moment leaves the
// previous checkpoint as the newest complete one. States resident on NVMe stream through
// the host staging buffers a shard at a time: no save or load holds the whole model in RAM.
// Who calls it: train.c (save, resume), eval.c (load weights).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "data.h"
#include "hf.h" // hf_extras_t
#include "trainer.h"

typedef struct {
    char dir[TT_PATH_MAX];    // the checkpoint folder
    int step;                 // optimizer steps done
    uint64_t train_pos, val_pos; // data positions (tokens into each split)
    char params_hash[17];     // as the run printed it
    int version;              // 1: no checksums; 2: CRC-32C of every tensor, config.json, state.json
    uint32_t config_crc;      // config.json's (version 2)
    // the model (config.json / state.json)
    int L, C, NH, NKV, F, V, T, tie;
    int max_pos;              // config.json's max_position_embeddings (T where it has none)
    double rope_theta, norm_eps;
    rope_scaling_t rope_scaling; // state.json's model (none in folders saved before it was written)
    precision_t precision;
    int model_bf16;           // model.safetensors holds BF16 (the master is in the optimizer file)
    char data[TT_PATH_MAX];   // the training data source it was saved with
    int B, accum;             // its --batch and --accum (each rank's)
    int ranks;                // the world that saved it (0: not recorded, in folders saved before 2026-12-08)
    double lr, min_lr;        // the learning-rate schedule it was trained with
    int warmup, steps;
    double beta1, beta2, eps, wd, clip; // its AdamW settings and gradient clipping
} ckpt_info_t;

// The training recipe a checkpoint records, flag by flag: --resume takes each where no flag
// gives it (cli.c), and names each a flag gives another value (train.c). Each is an int or a
// double at the same name's offset in config_t and ckpt_info_t. (--data and --accum, each
// rank's, are apart.)
typedef struct {
    const char *flag; // without the dashes
    size_t cfg_off, info_off;
    int is_int;
} ckpt_recipe_t;
extern const ckpt_recipe_t ckpt_recipe[];
extern const int ckpt_nrecipe;
// The recipe field r of a config_t or ckpt_info_t (base), as a double.
double ckpt_recipe_get(const ckpt_recipe_t *r, const void *base, size_t off);

// Resolves a --resume argument: a checkpoint folder (has state.json), a --save directory
// (its `latest`), or DIR/latest. Returns 0 with the folder in out, or -errno with one line.
int checkpoint_resolve(const char *arg, char *out, size_t len, char *err, size_t errlen);
// Reads and checks state.json and config.json of a checkpoint folder. Returns 0, or -errno
// with one line naming the file and the problem (missing field, wrong type, bad value).
int checkpoint_info(const char *dir, ckpt_info_t *info, char *err, size_t errlen);
// Refuses a resume whose model differs from cfg's: -EINVAL with one line naming the first
// field that differs (e.g. "--resume X: the checkpoint has --dim 384, this run --dim 512").
int checkpoint_check_config(const ckpt_info_t *info, const config_t *cfg, char *err, size_t errlen);
// Loads the checkpoint at info->dir into tr (built for the same model): master weights and
// the compute copy; unless weights_only, also Adam m and v and the data positions (into d,
// when not NULL). Validates every tensor's name, dtype and shape and that every value is
// finite. Returns 0 or -errno with one line (bad files: -EINVAL; I/O: the errno).
int checkpoint_load(trainer_t *tr, data_t *d, const ckpt_info_t *info, int weights_only, char *err, size_t errlen);
// Saves tr's state after `step` under cfg->save_dir, with carry's files and token ids (hf.h;
// NULL: none), updates latest, keeps the newest
// --keep-last. Waits for the optimizer first. Writes the folder's path into where and the
// params_hash of the saved weights (computed while writing them) into *params_hash. Returns
// 0, or -errno with one line; on failure the temporary folder is removed and nothing that
// was visible changes.
int checkpoint_save(trainer_t *tr, const data_t *d, const hf_extras_t *carry, int step, uint64_t *params_hash,
                    char *where, size_t wlen, char *err, size_t errlen);

// One writer per --save directory: creates dir when missing, takes flock(LOCK_EX) on
// dir/.lock and writes this pid into it. Returns the open descriptor (the lock lasts until
// it is closed or the process ends), -EBUSY with "--save DIR is in use by pid N (...)" when
// another process holds it, or -errno with one line.
int checkpoint_lock(const char *dir, char *err, size_t errlen);
// The newest complete checkpoint under a --save directory: the folder its `latest` names,
// when that folder has a state.json (returns 0); else, with no such latest (a kill between a
// folder's rename and latest's write), the highest step-NNNNNNNN folder (returns 1: --resume
// must name it, not the directory). Writes it into out; -ENOENT when there is none.
int checkpoint_newest(const char *dir, char *out, size_t len);
// Bytes one checkpoint of m takes on disk: both safetensors files with their headers (BF16
// weights and an FP32 master in the optimizer file with bf16), config.json and state.json,
// each rounded up to 4 KiB.
uint64_t checkpoint_bytes(const model_t *m, int bf16);
// The complete checkpoints (step-NNNNNNNN folders) already in dir, oldest first: how many
// (at most cap) and each one's bytes on disk into sizes. 0 when dir does not exist.
int checkpoint_existing(const char *dir, uint64_t *sizes, int cap);
