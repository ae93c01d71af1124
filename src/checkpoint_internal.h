// checkpoint_internal.h — what checkpoint.c (the save, the folder's files) and
// checkpoint_load.c share: the tensors' declarations as the files name and shape them.
#pragma once
#include "model.h"
#include "safetensors.h"

typedef char tname_t[224];

// The declaration of tensor t of shard s (name + suffix into name, which it points at): the
// whole tensor's, for a piece of a cut one (model.h).
void ckpt_tensor_decl(const model_t *m, int s, int t, const char *suffix, st_dtype_t dt, st_tensor_t *out,
                      char *name);
