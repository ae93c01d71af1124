// ckpt_dir.h — what checkpoint.c and ckpt_dir.c share of the --save directory's upkeep (the
// public part, lock, newest, bytes and existing, is in checkpoint.h).
#pragma once

// Removes a checkpoint folder (flat: files only) or a temporary one. Best effort.
void ckpt_remove_folder(const char *dir);
// Removes leftovers of interrupted saves (.tmp-*: this process's, or a dead one's) and, with
// keep > 0, all but the newest keep step folders (never keep_name).
void ckpt_prune(const char *dir, int keep, const char *keep_name);
