#!/usr/bin/python3
"""make_ref.py — writes the PyTorch reference fixtures the model test (tests/test_model.c) reads.

An independent Llama-style model written out in PyTorch (float64): RMSNorm, RoPE in the
Hugging Face convention (rotate_half, theta 10000), causal grouped-query attention written
out (torch 1.13 has no scaled_dot_product_attention), SwiGLU, no biases, LM head tied or
untied. It draws weights and tokens, runs forward and backward, and writes weights, tokens,
logits, loss and every parameter gradient.

Run with Debian's python3-torch:  /usr/bin/python3 tests/ref/make_ref.py
The fixtures are committed; CI only reads them.

File format (little-endian), version 1:
  u32 magic 0x46525454 ("TTRF"), u32 version 1,
  i32 L, C, NH, NKV, F, V, B, T, tie, i32 reserved,
  f64 rope_theta, f64 norm_eps, f64 loss,
  i32 tokens[B*T], i32 targets[B*T],
  f32 logits[B*T*V],
  then for each tensor in tiertrain's shard order (embed; per layer attn_norm, wq, wk, wv, wo,
  mlp_norm, w_gate, w_up, w_down; final norm; lm_head when untied):
  f32 weight[numel], f32 grad[numel]
"""
import struct
import sys
import os
import torch

MAGIC, VERSION = 0x46525454, 1


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(x, theta):  # x (B, H, T, HS)
    T, HS = x.shape[2], x.shape[3]
    inv = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def forward(p, tokens, cfg):
    L, C, NH, NKV, F, V, B, T, tie, theta, eps = cfg
    HS = C // NH
    x = p["embed"][tokens]  # (B, T, C)
    for l in range(L):
        w = lambda n: p[f"{l}.{n}"]
        h = rmsnorm(x, w("attn_norm"), eps)
        q = (h @ w("wq").T).view(B, T, NH, HS).transpose(1, 2)
        k = (h @ w("wk").T).view(B, T, NKV, HS).transpose(1, 2)
        v = (h @ w("wv").T).view(B, T, NKV, HS).transpose(1, 2)
        q, k = rope(q, theta), rope(k, theta)
        rep = NH // NKV
        k = k.repeat_interleave(rep, dim=1)  # query head h reads kv head h // rep (HF repeat_kv)
        v = v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)) / (HS ** 0.5)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        s = s.masked_fill(mask, float("-inf"))
        a = torch.softmax(s, dim=-1) @ v  # (B, NH, T, HS)
        a = a.transpose(1, 2).reshape(B, T, C)
        x = x + a @ w("wo").T
        h = rmsnorm(x, w("mlp_norm"), eps)
        g = h @ w("w_gate").T
        u = h @ w("w_up").T
        x = x + (torch.nn.functional.silu(g) * u) @ w("w_down").T
    x = rmsnorm(x, p["norm"], eps)
    head = p["embed"] if tie else p["lm_head"]
    return x @ head.T  # (B, T, V)


def tensor_order(L, tie):
    names = ["embed"]
    for l in range(L):
        names += [f"{l}.{n}" for n in ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")]
    names.append("norm")
    if not tie:
        names.append("lm_head")
    return names


def make(path, L, C, NH, NKV, F, V, B, T, tie, seed):
    theta, eps = 10000.0, 1e-5
    g = torch.Generator().manual_seed(seed)
    HS = C // NH
    KV = NKV * HS
    shapes = {"embed": (V, C), "norm": (C,), "lm_head": (V, C)}
    for l in range(L):
        shapes.update({f"{l}.attn_norm": (C,), f"{l}.wq": (C, C), f"{l}.wk": (KV, C), f"{l}.wv": (KV, C),
                       f"{l}.wo": (C, C), f"{l}.mlp_norm": (C,), f"{l}.w_gate": (F, C), f"{l}.w_up": (F, C),
                       f"{l}.w_down": (C, F)})
    names = tensor_order(L, tie)
    p = {}
    for n in names:
        shp = shapes[n]
        if len(shp) == 1:  # norm weights near one, so their gradients are exercised
            t = 1.0 + 0.1 * torch.randn(shp, generator=g, dtype=torch.float64)
        else:  # large enough that attention is far from uniform
            t = (0.5 / shp[1] ** 0.5) * torch.randn(shp, generator=g, dtype=torch.float64)
            if n == "embed" and not tie:
                t = t * 4
        # weights are stored as float32 in the fixture; the reference uses exactly those values
        p[n] = t.float().double().requires_grad_(True)
    tokens = torch.randint(0, V, (B, T + 1), generator=g)
    inp, tgt = tokens[:, :-1], tokens[:, 1:]
    cfg = (L, C, NH, NKV, F, V, B, T, tie, theta, eps)
    logits = forward(p, inp, cfg)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    loss.backward()
    with open(path, "wb") as f:
        f.write(struct.pack("<II", MAGIC, VERSION))
        f.write(struct.pack("<10i", L, C, NH, NKV, F, V, B, T, int(tie), 0))
        f.write(struct.pack("<3d", theta, eps, loss.item()))
        f.write(inp.reshape(-1).to(torch.int32).numpy().tobytes())
        f.write(tgt.reshape(-1).to(torch.int32).numpy().tobytes())
        f.write(logits.detach().reshape(-1).float().numpy().tobytes())
        for n in names:
            f.write(p[n].detach().reshape(-1).float().numpy().tobytes())
            f.write(p[n].grad.reshape(-1).float().numpy().tobytes())
    print(f"{path}: loss {loss.item():.6f}, {sum(p[n].numel() for n in names)} parameters")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    # Odd sequence length, kv-heads < heads, dims not powers of two.
    make(os.path.join(here, "model_untied.bin"), L=2, C=48, NH=4, NKV=2, F=80, V=72, B=2, T=13, tie=False, seed=1)
    make(os.path.join(here, "model_tied.bin"), L=2, C=48, NH=6, NKV=3, F=72, V=64, B=2, T=7, tie=True, seed=2)
