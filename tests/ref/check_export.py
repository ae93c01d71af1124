#!/usr/bin/python3
"""check_export.py — checks a tiertrain checkpoint against an independent PyTorch Llama.

Reads the checkpoint's model.safetensors with its own small reader (8-byte header length,
JSON header, raw little-endian data; no `safetensors` package) and its config.json
(LlamaConfig fields), checks that every tensor name and shape is what Hugging Face's
LlamaForCausalLM expects for that config (nothing missing, nothing extra), builds a float64
Llama from those weights (RMSNorm, RoPE with rotate_half as HF does, grouped-query causal
attention written out — torch 1.13 has no scaled_dot_product_attention —, SwiGLU, tied or
untied head), and computes the mean next-token loss over the same windows as
`tiertrain eval`: the token file's first N tokens cut into consecutive, non-overlapping
windows of T+1 (inputs the first T, targets the last T; a trailing partial window dropped).
It runs `BINARY eval ...` itself, parses its last JSON line and compares the two losses.
When `transformers` imports, the folder is also loaded with
LlamaForCausalLM.from_pretrained(folder) and its loss over the same windows compared too.

Usage (Debian's python3-torch: /usr/bin/python3):
  tests/ref/check_export.py BINARY --resume DIR --data FILE [--seq T] [--eval-tokens N]
                            [--precision fp32|bf16] [--threads N] [--rtol R]
DIR is what `tiertrain eval --resume` takes: a checkpoint folder, a --save directory (its
`latest`) or DIR/latest. FILE is a text file (bytes are tokens) or an llm.c .bin token file.

Tolerance (relative, on the mean loss): 1e-4 when tiertrain computes in fp32. The C forward
is float32 throughout (products accumulated in float32 by sgemm, norms/softmax/loss in
float32) against float64 here, with bit-identical weights: the F32 model file holds the
master weights the fp32 forward uses; with a BF16 model file (--save-dtype bf16) tiertrain
evaluates the FP32 master from optimizer.safetensors, so the reference does too, after
checking that every BF16 tensor is exactly its master rounded to nearest-even. Each op adds
O(1e-7) relative error; one 64-token window of `tiny` lands near 3e-8 and the mean over
windows lower still, and test_model.c holds a 2-layer model's loss to 1e-5. 1e-4 leaves
margin for deeper presets yet catches a wrong term: HF's rotate_half RoPE swapped for the
interleaved pairing moves a trained `tiny` model's loss by 1.1e-3, repeat instead of
repeat_interleave for the kv heads by 1.8e-2, a missing final norm by 6.6e-2. With
--precision bf16 every activation is rounded to 8 mantissa bits (2^-9 relative): 2e-2, the
loss tolerance of test_model.c's bf16 cases. The transformers comparison (same weights,
loaded as float64) uses 1e-5: HF's LlamaRMSNorm computes in float32 whatever the model
dtype, and its RoPE builds inv_freq and the angles in float32, so it is a float32-accurate
model, like tiertrain's fp32 forward.

Exits 0 when everything matches; otherwise 1 with one line saying what differed.
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys

import torch

LLMC_MAGIC, LLMC_VERSION, LLMC_HEADER_INTS = 20240520, 1, 256
RTOL_FP32, RTOL_BF16, RTOL_HF = 1e-4, 2e-2, 1e-5


class Mismatch(Exception):
    pass


# ---------------------------------------------------------------- files

def read_safetensors(path):
    """{name: float64 tensor}, {name: dtype string}. Validates what it relies on."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise Mismatch(f"{path}: {len(raw)} bytes, too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise Mismatch(f"{path}: header length {n} is past the end of the file ({len(raw)} bytes)")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    tensors, dtypes = {}, {}
    sizes = {"F32": 4, "BF16": 2, "F16": 2}
    spans = []
    for name, d in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (b, e) = d["dtype"], d["shape"], d["data_offsets"]
        if dt not in sizes:
            raise Mismatch(f"{path}: {name}: dtype {dt} (expected F32 or BF16)")
        numel = math.prod(shape) if shape else 1
        if e - b != numel * sizes[dt] or e > len(data):
            raise Mismatch(f"{path}: {name}: data_offsets [{b}, {e}] do not hold {numel} x {dt}")
        spans.append((b, e))
        buf = bytearray(data[b:e])  # writable copy: torch.frombuffer warns on read-only buffers
        if dt == "F32":
            t = torch.frombuffer(buf, dtype=torch.float32) if numel else torch.zeros(0)
        elif dt == "F16":
            t = torch.frombuffer(buf, dtype=torch.float16).float() if numel else torch.zeros(0)
        else:  # BF16: the high 16 bits of a float32
            t = (torch.frombuffer(buf, dtype=torch.int16).to(torch.int32) << 16).view(torch.float32) \
                if numel else torch.zeros(0)
        tensors[name] = t.double().reshape(shape)
        dtypes[name] = dt
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            raise Mismatch(f"{path}: the tensors do not tile the data section (gap or overlap at byte {pos})")
        pos = e
    if pos != len(data):
        raise Mismatch(f"{path}: {len(data) - pos} bytes after the last tensor")
    return tensors, dtypes


def read_tokens(path):
    """The token file as a 1-D int64 tensor: an llm.c .bin (uint16) or a text file's bytes."""
    if path == "synthetic":
        raise Mismatch("--data synthetic: the built-in corpus lives only inside tiertrain; give a text or .bin file")
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".bin"):
        h = struct.unpack_from(f"<{LLMC_HEADER_INTS}i", raw, 0)
        if h[0] != LLMC_MAGIC or h[1] != LLMC_VERSION:
            raise Mismatch(f"{path}: not an llm.c token file (magic {h[0]}, version {h[1]})")
        count = h[2]
        body = raw[LLMC_HEADER_INTS * 4:]
        if len(body) != 2 * count:
            raise Mismatch(f"{path}: the header says {count} tokens, the file holds {len(body) // 2}")
        return torch.frombuffer(bytearray(body), dtype=torch.int16).to(torch.int64) & 0xFFFF
    return torch.tensor(list(raw), dtype=torch.int64)


def resolve(arg):
    """The checkpoint folder a --resume argument names (checkpoint.h's rules)."""
    def latest_of(d):
        with open(os.path.join(d, "latest")) as f:
            name = f.read().strip()
        return name if os.path.isabs(name) else os.path.join(d, name)
    if os.path.isdir(arg) and os.path.exists(os.path.join(arg, "state.json")):
        return arg
    if os.path.isdir(arg) and os.path.exists(os.path.join(arg, "latest")):
        return latest_of(arg)
    if os.path.basename(arg.rstrip("/")) == "latest" and os.path.isfile(arg):
        return latest_of(os.path.dirname(os.path.abspath(arg)))
    raise Mismatch(f"--resume {arg}: not a checkpoint folder, a --save directory or DIR/latest")


# ---------------------------------------------------------------- names and shapes

def expected_shapes(cfg):
    C, F, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    NH, NKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    HS = cfg.get("head_dim") or C // NH
    want = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C]}
    for l in range(L):
        p = f"model.layers.{l}."
        want.update({p + "input_layernorm.weight": [C], p + "post_attention_layernorm.weight": [C],
                     p + "self_attn.q_proj.weight": [NH * HS, C], p + "self_attn.k_proj.weight": [NKV * HS, C],
                     p + "self_attn.v_proj.weight": [NKV * HS, C], p + "self_attn.o_proj.weight": [C, NH * HS],
                     p + "mlp.gate_proj.weight": [F, C], p + "mlp.up_proj.weight": [F, C],
                     p + "mlp.down_proj.weight": [C, F]})
    if not cfg.get("tie_word_embeddings", False):
        want["lm_head.weight"] = [V, C]
    return want


def check_config(cfg):
    need = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "vocab_size", "rms_norm_eps", "rope_theta", "tie_word_embeddings", "max_position_embeddings"]
    missing = [k for k in need if k not in cfg]
    if missing:
        raise Mismatch(f"config.json lacks {', '.join(missing)}")
    if cfg.get("model_type", "llama") != "llama":
        raise Mismatch(f"config.json: model_type {cfg['model_type']!r}, expected 'llama'")
    if cfg.get("hidden_act", "silu") != "silu":
        raise Mismatch(f"config.json: hidden_act {cfg['hidden_act']!r}, expected 'silu'")
    if "LlamaForCausalLM" not in cfg.get("architectures", ["LlamaForCausalLM"]):
        raise Mismatch(f"config.json: architectures {cfg['architectures']} lacks LlamaForCausalLM")
    for k in ("attention_bias", "mlp_bias"):
        if cfg.get(k, False):
            raise Mismatch(f"config.json: {k} is true; tiertrain has no biases")
    C, NH, NKV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    if C % NH or NH % NKV:
        raise Mismatch(f"config.json: hidden_size {C}, heads {NH}, kv heads {NKV} do not divide")
    if cfg.get("head_dim", C // NH) != C // NH:
        raise Mismatch(f"config.json: head_dim {cfg['head_dim']} != hidden_size / heads = {C // NH}")
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) not in ("llama3", "linear", "default"):
        raise Mismatch(f"config.json: rope_scaling {rs} (tiertrain scales RoPE as llama3 or linear only)")


def check_names(tensors, cfg):
    want = expected_shapes(cfg)
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing:
        raise Mismatch(f"model.safetensors lacks {len(missing)} tensor(s) HF Llama expects, e.g. {missing[0]}")
    if extra:
        raise Mismatch(f"model.safetensors has {len(extra)} tensor(s) HF Llama does not expect, e.g. {extra[0]}")
    for n, shp in want.items():
        if list(tensors[n].shape) != shp:
            raise Mismatch(f"model.safetensors: {n} has shape {list(tensors[n].shape)}, HF Llama expects {shp}")
    for n, t in tensors.items():
        if not torch.isfinite(t).all():
            raise Mismatch(f"model.safetensors: {n} holds a non-finite value")
    return len(want)


# ---------------------------------------------------------------- the float64 reference

def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def inv_freq_of(theta, HS, scaling):
    """HF's inverse frequencies, in float64: plain, or rope_scaling's llama3 / linear
    (transformers' _compute_llama3_parameters and _compute_linear_scaling_rope_parameters)."""
    inv = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    kind = scaling.get("rope_type", scaling.get("type")) if scaling else "default"
    if kind == "linear":
        return inv / scaling["factor"]
    if kind != "llama3":
        return inv
    factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    llama = torch.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
    return torch.where(medium, smoothed, llama)


def rope(x, theta, scaling=None):  # x (B, H, T, HS): HF's apply_rotary_pos_emb with positions 0..T-1
    T, HS = x.shape[2], x.shape[3]
    inv = inv_freq_of(theta, HS, scaling)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def logits_of(p, cfg, tokens):  # tokens (B, T) -> (B, T, V)
    C, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    NH, NKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps, theta = float(cfg["rms_norm_eps"]), float(cfg["rope_theta"])
    HS = C // NH
    B, T = tokens.shape
    x = p["model.embed_tokens.weight"][tokens]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for l in range(L):
        w = lambda n: p[f"model.layers.{l}.{n}.weight"]
        h = rmsnorm(x, w("input_layernorm"), eps)
        q = (h @ w("self_attn.q_proj").T).view(B, T, NH, HS).transpose(1, 2)
        k = (h @ w("self_attn.k_proj").T).view(B, T, NKV, HS).transpose(1, 2)
        v = (h @ w("self_attn.v_proj").T).view(B, T, NKV, HS).transpose(1, 2)
        q, k = rope(q, theta, cfg.get("rope_scaling")), rope(k, theta, cfg.get("rope_scaling"))
        rep = NH // NKV
        k = k.repeat_interleave(rep, dim=1)  # query head h reads kv head h // rep (HF repeat_kv)
        v = v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
        s = s.masked_fill(mask, float("-inf"))
        a = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + a @ w("self_attn.o_proj").T
        h = rmsnorm(x, w("post_attention_layernorm"), eps)
        g, u = h @ w("mlp.gate_proj").T, h @ w("mlp.up_proj").T
        x = x + (torch.nn.functional.silu(g) * u) @ w("mlp.down_proj").T
    x = rmsnorm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return x @ head.T


def windows_of(tokens, n_first, T):
    """(W, T+1): the first n_first tokens (0 = all) in consecutive windows of T+1."""
    n = tokens.numel() if n_first == 0 else min(n_first, tokens.numel())
    W = n // (T + 1)
    return tokens[:W * (T + 1)].view(W, T + 1)


def mean_loss(fn, win, V, chunk=32):
    """Mean cross-entropy over every window's T targets, in float64; fn: (B, T) -> (B, T, V)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, win.shape[0], chunk):
            w = win[i:i + chunk]
            lg = fn(w[:, :-1]).double()
            total += torch.nn.functional.cross_entropy(lg.reshape(-1, V), w[:, 1:].reshape(-1),
                                                       reduction="sum").item()
            count += w[:, 1:].numel()
    return total / count


# ---------------------------------------------------------------- tiertrain eval

def run_tiertrain(args):
    cmd = [args.binary, "eval", "--resume", args.resume, "--data", args.data, "--precision", args.precision]
    if args.seq:
        cmd += ["--seq", str(args.seq)]
    if args.eval_tokens:
        cmd += ["--eval-tokens", str(args.eval_tokens)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise Mismatch(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise Mismatch(f"{' '.join(cmd)} printed no JSON line")
    ev = json.loads(lines[-1])
    if ev.get("event") != "eval" or not all(k in ev for k in ("loss", "tokens", "windows")):
        raise Mismatch(f"tiertrain eval's last JSON line is not an eval event: {lines[-1]}")
    m = re.search(r"^tiertrain eval: checkpoint (.*) \(step (\d+)", r.stdout, re.M)
    return ev, (m.group(1) if m else None), " ".join(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--resume", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--eval-tokens", type=int, default=0)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=0.0, help="relative tolerance on the loss (default: see the docstring)")
    args = ap.parse_args()
    torch.set_grad_enabled(False)

    folder = resolve(args.resume)
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    check_config(cfg)
    tensors, dtypes = read_safetensors(os.path.join(folder, "model.safetensors"))
    ntensors = check_names(tensors, cfg)
    file_dtype = "BF16" if "BF16" in dtypes.values() else "F32"
    if len(set(dtypes.values())) != 1:
        raise Mismatch(f"model.safetensors mixes dtypes {sorted(set(dtypes.values()))}")

    # A BF16 model file (--save-dtype bf16): tiertrain evaluates with the FP32 master that
    # optimizer.safetensors carries ("<name>.master"). The reference uses the same master, and
    # every BF16 tensor must be exactly the master rounded to nearest-even.
    weights, weights_from = tensors, "model.safetensors"
    if file_dtype == "BF16":
        opt, _ = read_safetensors(os.path.join(folder, "optimizer.safetensors"))
        weights, weights_from = {}, "optimizer.safetensors masters"
        for n, t in tensors.items():
            if n + ".master" not in opt:
                raise Mismatch(f"optimizer.safetensors lacks {n}.master (the FP32 master of a BF16 model file)")
            master = opt[n + ".master"]
            if list(master.shape) != list(t.shape):
                raise Mismatch(f"optimizer.safetensors: {n}.master has shape {list(master.shape)}, the model {list(t.shape)}")
            rounded = master.float().to(torch.bfloat16).double()
            if not torch.equal(rounded, t):
                i = int((rounded != t).reshape(-1).nonzero()[0])
                raise Mismatch(f"model.safetensors: {n}[{i}] = {t.reshape(-1)[i].item()!r} is not its master "
                               f"{master.reshape(-1)[i].item()!r} rounded to BF16 ({rounded.reshape(-1)[i].item()!r})")
            weights[n] = master

    ev, tt_folder, cmd = run_tiertrain(args)
    if tt_folder is not None and os.path.realpath(tt_folder) != os.path.realpath(folder):
        raise Mismatch(f"--resume {args.resume}: tiertrain evaluated {tt_folder}, this script resolved {folder}")
    W = ev["windows"]
    T = ev["tokens"] // W if W else 0
    if W * T != ev["tokens"]:
        raise Mismatch(f"tiertrain eval: tokens {ev['tokens']} is not windows {W} x T")
    want_T = args.seq or cfg["max_position_embeddings"]
    if T != want_T:
        raise Mismatch(f"tiertrain eval used T = {T}, expected {want_T} "
                       f"({'--seq' if args.seq else 'config.json max_position_embeddings'})")

    tokens = read_tokens(args.data)
    V = cfg["vocab_size"]
    if tokens.numel() and int(tokens.max()) >= V:
        raise Mismatch(f"{args.data}: token {int(tokens.max())} >= vocab_size {V}")
    win = windows_of(tokens, args.eval_tokens, T)
    if win.shape[0] != W:
        raise Mismatch(f"tiertrain eval used {W} windows, the same split here gives {win.shape[0]}")
    ref = mean_loss(lambda x: logits_of(weights, cfg, x), win, V)
    got = float(ev["loss"])

    rtol = args.rtol or (RTOL_FP32 if args.precision == "fp32" else RTOL_BF16)
    rel = abs(got - ref) / abs(ref)
    print(f"check_export: {folder}: {ntensors} tensors ({file_dtype}) named and shaped as HF Llama expects; "
          f"{W} windows x T {T} of {args.data}; reference weights: {weights_from}")
    print(f"check_export: tiertrain eval --precision {args.precision} loss {got:.9f}, float64 reference "
          f"{ref:.9f}, relative difference {rel:.3e} (tolerance {rtol:g})")
    if not rel <= rtol:
        raise Mismatch(f"loss {got:.9f} from `{cmd}` differs from the float64 reference {ref:.9f} by "
                       f"{rel:.3e} relative (tolerance {rtol:g})")

    try:
        from transformers import LlamaForCausalLM  # optional: not a dependency
    except ImportError:
        print("check_export: transformers is not installed; skipped the LlamaForCausalLM.from_pretrained comparison")
    else:
        try:
            model, loading = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float64,
                                                              attn_implementation="eager", output_loading_info=True)
        except TypeError:  # older transformers: no attn_implementation
            model, loading = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float64,
                                                              output_loading_info=True)
        for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
            if loading.get(k):
                raise Mismatch(f"transformers: LlamaForCausalLM.from_pretrained({folder}) reports {k} {loading[k]}")
        model.eval()
        hf = mean_loss(lambda x: model(input_ids=x).logits, win, V)
        # from_pretrained reads model.safetensors: compare with the reference on those weights
        ref_file = ref if weights is tensors else mean_loss(lambda x: logits_of(tensors, cfg, x), win, V)
        rel_hf = abs(hf - ref_file) / abs(ref_file)
        print(f"check_export: transformers LlamaForCausalLM.from_pretrained loss {hf:.9f}, relative to the float64 "
              f"reference on model.safetensors {rel_hf:.3e} (tolerance {RTOL_HF:g}); to tiertrain {abs(got - hf) / abs(hf):.3e}")
        if not rel_hf <= RTOL_HF:
            raise Mismatch(f"transformers loads {folder} to loss {hf:.9f}, the reference reads {ref_file:.9f} "
                           f"({rel_hf:.3e} relative, tolerance {RTOL_HF:g})")
    print("check_export: ok")


if __name__ == "__main__":
    try:
        main()
    except Mismatch as e:
        print(f"check_export: FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        print(f"check_export: FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
