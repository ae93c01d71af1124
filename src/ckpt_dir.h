// ckpt_dir.h — what checkpoint.c and ckpt_dir.c share of the --save directory's upkeep (the
// public part, lock, newest, bytes and existing, is in checkpoint.h).
#pragma once

// 1 when dir/name is one of our complete checkpoints: a directory (not a link to one) named
// step- and 8 digits that holds a state.json (written last, so its presence marks a folder
// complete). Anything else under a --save directory is the user's: listed, pruned and
// overwritten never.
int ckpt_is_checkpoint(const char *dir, const char *name);
// Removes a checkpoint folder (flat: files only) or a temporary one. Best effort.
void ckpt_remove_folder(const char *dir);
// Removes leftovers of interrupted saves (.tmp-*: this process's, or a dead one's) and, with
// keep > 0, all but the newest keep step folders (never keep_name).
void ckpt_prune(const char *dir, int keep, const char *keep_name);
