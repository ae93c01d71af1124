#!/usr/bin/env python3
"""ckpt_fuzz.py — `make fuzz-ckpt`: damages checkpoint folders at random and loads them.

Two pristine checkpoints are made first with the binary (--save-dtype fp32 and bf16, the
tiny model after 2 steps), and the reference outcome of loading each: the params_hash after
resuming one more step, and the validation loss `eval` prints. Then, until the time is up,
each execution copies one of them, picks one of its files and damages it once:

  flip       XOR 1-4 bytes with random non-zero values
  truncate   cut the file at a random length
  duplicate  insert a copy of a random 1-64 byte range at a random place

half of the positions falling in the file's first 4 KiB (the headers and the JSON), half
anywhere. It then loads the damaged folder with `train --resume` (70%: every state, the
data position, the schedule) or `eval --resume` (30%: the weights). Each outcome must be:

  exit 0 and the same result as the pristine folder (the damage hit bytes nothing reads), or
  exit 2 with exactly one line starting "tiertrain: ".

Anything else — another exit code, a different model loaded silently, a sanitizer report,
more than one line — is a finding: the damaged folder and the command are kept under
WORK/findings/N. Prints the executions per outcome and per damage kind, and exits 1 when
there is a finding.

Usage: ckpt_fuzz.py --binary build-asan/tiertrain [--seconds 600] [--seed S] [--work DIR]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

BASE = ["--model", "tiny", "--batch", "2", "--seq", "16", "--device", "cpu", "--threads", "1",
        "--warmup", "4", "--eval-every", "0", "--quiet"]
FILES = ["model.safetensors", "optimizer.safetensors", "config.json", "state.json"]


def run(cmd, env):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def summary_hash(log_path):
    try:
        with open(log_path) as f:
            for line in f:
                if '"event":"summary"' in line:
                    return json.loads(line)["params_hash"]
    except (OSError, ValueError, KeyError):
        pass
    return None


def val_loss(out):
    for line in out.splitlines():
        if line.startswith("eval: loss "):
            return line.split(",")[0]
    return None


def load(binary, folder, mode, work, env):
    """(rc, stdout, stderr, result): result is the resumed run's params_hash or eval's line."""
    if mode == "resume":
        log = os.path.join(work, "load.jsonl")
        if os.path.exists(log):
            os.unlink(log)
        cmd = [binary, "train"] + BASE + ["--steps", "3", "--resume", folder, "--log", log]
        rc, out, err = run(cmd, env)
        return cmd, rc, out, err, summary_hash(log) if rc == 0 else None
    cmd = [binary, "eval", "--device", "cpu", "--threads", "1", "--eval-tokens", "2000", "--resume", folder]
    rc, out, err = run(cmd, env)
    return cmd, rc, out, err, val_loss(out) if rc == 0 else None


def damage(rng, path):
    data = bytearray(open(path, "rb").read())
    n = len(data)
    kind = rng.choice(["flip", "truncate", "duplicate"])
    near = lambda: rng.randrange(min(n, 4096)) if rng.random() < 0.5 else rng.randrange(n)
    if kind == "flip":
        at = []
        for _ in range(rng.randint(1, 4)):
            i = near()
            data[i] ^= rng.randint(1, 255)
            at.append(i)
        what = "flip at %s" % at
    elif kind == "truncate":
        i = near()
        del data[i:]
        what = "truncate to %d of %d bytes" % (i, n)
    else:
        i, k = near(), rng.randint(1, 64)
        j = near()
        piece = data[i:i + k]
        data[j:j] = piece
        what = "duplicate %d bytes from %d at %d" % (len(piece), i, j)
    with open(path, "wb") as f:
        f.write(data)
    return kind, what


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    work = a.work or tempfile.mkdtemp(prefix="tt_ckpt_fuzz_")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    binary = os.path.abspath(a.binary)

    pristine, reference = {}, {}
    for dtype in ["fp32", "bf16"]:
        save = os.path.join(work, "save-" + dtype)
        shutil.rmtree(save, ignore_errors=True)
        rc, out, err = run([binary, "train"] + BASE + ["--steps", "2", "--save", save, "--save-dtype", dtype], env)
        if rc != 0:
            sys.exit("ckpt_fuzz: making the %s checkpoint failed (%d):\n%s" % (dtype, rc, err))
        pristine[dtype] = os.path.join(save, "step-00000002")
        for mode in ["resume", "eval"]:
            cmd, rc, out, err, res = load(binary, pristine[dtype], mode, work, env)
            if rc != 0 or res is None:
                sys.exit("ckpt_fuzz: loading the pristine %s checkpoint (%s) failed (%d):\n%s" % (dtype, mode, rc, err))
            reference[dtype, mode] = res

    counts, kinds, findings = {}, {}, 0
    t_end = time.time() + a.seconds
    execs = 0
    trial = os.path.join(work, "trial")
    while time.time() < t_end:
        dtype = rng.choice(["fp32", "bf16"])
        shutil.rmtree(trial, ignore_errors=True)
        shutil.copytree(pristine[dtype], trial)
        name = rng.choice(FILES)
        kind, what = damage(rng, os.path.join(trial, name))
        mode = "resume" if rng.random() < 0.7 else "eval"
        cmd, rc, out, err, res = load(binary, trial, mode, work, env)
        execs += 1
        lines = err.splitlines()
        if "Sanitizer" in err or "runtime error" in err:
            outcome = "sanitizer"
        elif rc == 0 and res == reference[dtype, mode]:
            outcome = "same result"
        elif rc == 0:
            outcome = "DIFFERENT RESULT"
        elif rc == 2 and len(lines) == 1 and lines[0].startswith("tiertrain: "):
            outcome = "refused, one line"
        else:
            outcome = "exit %d" % rc
        counts[outcome] = counts.get(outcome, 0) + 1
        k = kinds.setdefault(kind, {})
        k[outcome] = k.get(outcome, 0) + 1
        if outcome not in ("same result", "refused, one line"):
            findings += 1
            keep = os.path.join(work, "findings", str(findings))
            shutil.copytree(trial, os.path.join(keep, "folder"))
            with open(os.path.join(keep, "what.txt"), "w") as f:
                f.write("%s (%s) in %s of the %s checkpoint, %s load\ncommand: %s\nexit %d, result %s, reference %s\n"
                        "stderr:\n%s" % (kind, what, name, dtype, mode, " ".join(cmd), rc, res,
                                         reference[dtype, mode], err))
            print("ckpt_fuzz: finding %d: %s, %s in %s (%s, %s): exit %d\n%s" %
                  (findings, outcome, what, name, dtype, mode, rc, err[-2000:]), flush=True)
    shutil.rmtree(trial, ignore_errors=True)
    print("ckpt_fuzz: seed %d, %d executions in %.0f s, %d findings" % (seed, execs, a.seconds, findings))
    for outcome, n in sorted(counts.items()):
        print("  %-20s %6d" % (outcome, n))
    for kind, c in sorted(kinds.items()):
        print("  %-10s %s" % (kind, ", ".join("%s %d" % kv for kv in sorted(c.items()))))
    print(json.dumps({"fuzz": "checkpoint", "seed": seed, "executions": execs, "findings": findings,
                      "outcomes": counts}))
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
