#!/usr/bin/python3
"""torch_peer.py — the CPU peer for `tiertrain train` at one shape: a plain Llama (RMSNorm,
RoPE, SwiGLU, causal attention, untied head) in PyTorch fp32, AdamW, no recompute, on random
tokens, timed after warm-up. Needs Debian's python3-torch (run it with /usr/bin/python3).

Usage: bench/torch_peer.py [--layers 12 --dim 768 --heads 12 --ffn 2048 --vocab 256 --seq 256
                            --batch 4 --steps 6 --threads 2]
Prints a line per timed step and one JSON line {"peer":"torch",...,"tok_per_s":...}.
"""
import argparse
import json
import math
import os
import time


# OpenBLAS 0.3.21's families without AVX2 (kernels/cpu/matmul.c, matmul_blas_core_better)
NARROW = {"unknown", "Unknown", "Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom", "Core2",
          "Penryn", "Dunnington", "Nehalem", "Athlon", "Opteron", "Opteron_SSE3", "Barcelona", "Nano",
          "Sandybridge", "Bobcat", "Bulldozer", "Piledriver", "Steamroller"}


def openblas_pick():
    """OpenBLAS's own pick of kernel family on this CPU, asked in a child process (in this one
    OpenBLAS must load after OPENBLAS_CORETYPE is settled); None when it cannot be asked."""
    import subprocess
    import sys
    code = ("import ctypes, ctypes.util\n"
            "lib = ctypes.CDLL(ctypes.util.find_library('openblas') or 'libopenblas.so.0')\n"
            "lib.openblas_get_corename.restype = ctypes.c_char_p\n"
            "print(lib.openblas_get_corename().decode())\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def blas_family():
    """The OpenBLAS kernel family for this CPU's vector units, as tiertrain runs it: Debian's
    OpenBLAS 0.3.21 picks by CPU model and takes one newer than it knows (an AVX-512 Xeon, family
    6 model 207) for a Prescott, a third of the speed, and Debian's torch runs its products on
    that OpenBLAS. So the peer names the family as tiertrain does (src/backend_cpu.c,
    backend_blas_reexec): OpenBLAS's own pick unless it lacks the CPU's AVX2 or AVX-512 units,
    set before torch loads OpenBLAS; an OPENBLAS_CORETYPE of one's own stays."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return os.environ["OPENBLAS_CORETYPE"] or "(empty)"
    pick = openblas_pick()
    if pick is not None and pick not in NARROW:
        return pick
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    if all(x in flags for x in ("avx512f", "avx512bw", "avx512dq", "avx512vl")):
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif "avx2" in flags and "fma" in flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"
    return os.environ.get("OPENBLAS_CORETYPE", pick or "OpenBLAS's own pick")


BLAS = blas_family()
import torch  # noqa: E402 (after blas_family: OpenBLAS reads OPENBLAS_CORETYPE as it loads)
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, C, NH, Fd):
        super().__init__()
        self.NH, self.HS = NH, C // NH
        self.n1, self.n2 = torch.nn.Parameter(torch.ones(C)), torch.nn.Parameter(torch.ones(C))
        self.q, self.k, self.v, self.o = (torch.nn.Linear(C, C, bias=False) for _ in range(4))
        self.gate, self.up = torch.nn.Linear(C, Fd, bias=False), torch.nn.Linear(C, Fd, bias=False)
        self.down = torch.nn.Linear(Fd, C, bias=False)

    @staticmethod
    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        h = self.norm(x, self.n1)
        q, k, v = (t(h).view(B, T, self.NH, self.HS).transpose(1, 2) for t in (self.q, self.k, self.v))

        def rope(t):
            a, b = t[..., : self.HS // 2], t[..., self.HS // 2:]
            return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)

        q, k = rope(q), rope(k)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.HS) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.o(y)
        h = self.norm(x, self.n2)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(layers=12, dim=768, heads=12, ffn=2048, vocab=256, seq=256, batch=4, steps=6, threads=2).items():
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    C, T, HS = a.dim, a.seq, a.dim // a.heads
    emb = torch.nn.Embedding(a.vocab, C)
    blocks = torch.nn.ModuleList(Block(C, a.heads, a.ffn) for _ in range(a.layers))
    nf, head = torch.nn.Parameter(torch.ones(C)), torch.nn.Linear(C, a.vocab, bias=False)
    params = list(emb.parameters()) + list(blocks.parameters()) + [nf] + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    inv = 10000 ** (-torch.arange(0, HS // 2, dtype=torch.float32) / (HS // 2))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None]
    cos, sin = ang.cos(), ang.sin()
    mask = torch.full((T, T), float("-inf")).triu(1)
    times = []
    for step in range(a.steps):
        x = torch.randint(0, a.vocab, (a.batch, T + 1))
        t0 = time.time()
        h = emb(x[:, :-1])
        for b in blocks:
            h = b(h, cos, sin, mask)
        logits = head(Block.norm(h, nf))
        loss = F.cross_entropy(logits.view(-1, a.vocab), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        dt = time.time() - t0
        if step > 0:
            times.append(dt)
        print("step %d: loss %.4f, %.1f ms" % (step + 1, loss.item(), dt * 1e3), flush=True)
    ms = sum(times) / len(times) * 1e3
    print(json.dumps({"peer": "torch", "torch": torch.__version__, "openblas": BLAS, "threads": a.threads,
                      "step_ms": round(ms, 1), "tok_per_s": round(a.batch * T / (ms / 1e3), 1)}))


if __name__ == "__main__":
    main()
