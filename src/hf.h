// hf.h — --init-from DIR: start training (or eval) from a Hugging Face Llama folder.
//
// The folder holds config.json (LlamaConfig) and either model.safetensors or shards
// model-0000k-of-0000n.safetensors named by model.safetensors.index.json ("weight_map":
// tensor name → file). Weights may be F32, BF16 or F16; they become the FP32 master (and so
// the compute copy), shard by shard and chunk by chunk through the trainer's state access, so
// NVMe-resident states load without the model ever being whole in RAM. Adam's m and v start
// at zero: the optimizer state is fresh (--resume is for tiertrain's own checkpoints, which
// are such folders too, plus optimizer.safetensors and state.json).
// Tensors that carry a crc32c entry (tiertrain's own folders) are checked; a folder without
// any gets one notice that it loads unverified.
// Who calls it: cli.c (the shape, before anything is sized), train.c and eval.c (the load).
#pragma once
#include <stddef.h>
#include "config.h"
#include "trainer.h"

typedef struct {
    int L, C, NH, NKV, F, V, tie;
    int max_pos;              // max_position_embeddings
    double rope_theta, norm_eps;
    rope_scaling_t rope_scaling; // none, or rope_scaling's "llama3" or "linear"
} hf_config_t;

// Reads DIR/config.json: the Llama shape, with HF's defaults for absent optional fields
// (num_key_value_heads = heads, rope_theta 10000, rms_norm_eps 1e-6, tie_word_embeddings
// false, max_position_embeddings 2048). Refuses, naming the field, what this model cannot
// be: another model_type or hidden_act, head_dim ≠ hidden_size / heads, a rope_scaling other
// than "llama3" or "linear", attention_bias or mlp_bias true. Returns 0, or -EINVAL / -errno with one line
// "--init-from DIR: config.json: ...".
int hf_read_config(const char *dir, hf_config_t *hc, char *err, size_t errlen);
// The rope_scaling member of a config.json object (also state.json's "model", checkpoint.c):
// absent, null or rope_type "default" is none; "linear" with its factor; "llama3" (Llama 3.1
// and 3.2) with factor, low_freq_factor, high_freq_factor, original_max_position_embeddings.
// Another type, a missing or bad field: -EINVAL with one line naming path and the field.
struct json;
int hf_rope_scaling_read(const struct json *obj, const char *path, rope_scaling_t *s, char *err, size_t errlen);
// s as config.json's rope_scaling value: null, or the object hf_rope_scaling_read reads back.
void hf_rope_scaling_json(const rope_scaling_t *s, char *buf, size_t len);

// A Hugging Face folder's files beside the weights and config.json's shape: the tokenizer and
// generation files (HF_EXTRA_NAMES, those present) and config.json's token ids (bos_token_id,
// eos_token_id, pad_token_id). A run reads them once from the folder it starts from
// (--init-from's, or --resume's checkpoint: --keep-last may prune it later), and every
// checkpoint carries them (checkpoint_save), so that it loads as a whole model.
#define HF_EXTRA_NAMES {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", \
                          "generation_config.json", "chat_template.jinja"}
enum { HF_EXTRA_FILES = 6 };
typedef struct {
    int n;
    const char *name[HF_EXTRA_FILES];
    char *data[HF_EXTRA_FILES];
    size_t len[HF_EXTRA_FILES];
    char ids[512]; // config.json's token id members as JSON text ("  \"bos_token_id\": 1,\n"...), or ""
} hf_extras_t;
// Reads them from dir; a file that is not there is skipped. Returns 0, or -errno with one line
// (a file there that cannot be read, or larger than 16 MiB). hf_extras_free releases
// what it read (also after a failure).
int hf_extras_read(hf_extras_t *c, const char *dir, char *err, size_t errlen);
void hf_extras_free(hf_extras_t *c);

// Loads the folder's weights into tr (built for hc's shape): every tensor of the model must
// be there with its shape, as F32, BF16 or F16. Prints one line with what was loaded to out
// (unless NULL). Returns 0, or -EINVAL (a bad or missing file, tensor, shape or dtype) /
// -errno, with one line naming the file and the tensor.
int hf_load(trainer_t *tr, const char *dir, FILE *out, char *err, size_t errlen);
