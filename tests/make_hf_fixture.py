#!/usr/bin/env python3
"""make_hf_fixture.py — writes tests/fixtures/hf_tiny/, a tiny Hugging Face Llama folder for
the --init-from tests (test_hf.c), in plain Python (no numpy, no torch).

  config.json                        LlamaConfig: L 2, hidden 32, 4 heads, 2 KV heads (GQA),
                                     intermediate 48, vocab 256 (bytes), untied, BF16
  model-00001-of-00002.safetensors   the embedding and layer 0
  model-00002-of-00002.safetensors   layer 1, the final norm and lm_head
  model.safetensors.index.json       "weight_map": tensor name -> file, as transformers writes it

The weights are BF16 (rounded to nearest even from a seeded xorshift's uniform values: the
linear layers in ±0.15, the norm scales 1 ± 0.1), so the same script always writes the same
bytes. Like transformers' writer the files carry no checksums: loading them takes the
"foreign folder" path. Usage: python3 tests/make_hf_fixture.py [OUT_DIR]
"""
import json
import os
import struct
import sys

L, C, NH, NKV, F, V, MAXPOS = 2, 32, 4, 2, 48, 256, 64
HS = C // NH


class Rng:
    def __init__(self, seed):
        self.s = seed & 0xFFFFFFFFFFFFFFFF

    def uniform(self):  # xorshift64*, the top 24 bits as a float in [0, 1)
        s = self.s
        s ^= s >> 12
        s ^= (s << 25) & 0xFFFFFFFFFFFFFFFF
        s ^= s >> 27
        self.s = s
        return (((s * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF) >> 40) / float(1 << 24)


def bf16(x):
    """The BF16 bits of float x, rounded to nearest even."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def tensors():
    """(name, shape, values) in the order transformers lists a LlamaForCausalLM."""
    rng = Rng(20261201)
    out = []

    def linear(name, rows, cols):
        out.append((name, [rows, cols], [(rng.uniform() * 2 - 1) * 0.15 for _ in range(rows * cols)]))

    def norm(name):
        out.append((name, [C], [1 + (rng.uniform() * 2 - 1) * 0.1 for _ in range(C)]))

    linear("model.embed_tokens.weight", V, C)
    for l in range(L):
        p = "model.layers.%d." % l
        norm(p + "input_layernorm.weight")
        linear(p + "self_attn.q_proj.weight", NH * HS, C)
        linear(p + "self_attn.k_proj.weight", NKV * HS, C)
        linear(p + "self_attn.v_proj.weight", NKV * HS, C)
        linear(p + "self_attn.o_proj.weight", C, NH * HS)
        norm(p + "post_attention_layernorm.weight")
        linear(p + "mlp.gate_proj.weight", F, C)
        linear(p + "mlp.up_proj.weight", F, C)
        linear(p + "mlp.down_proj.weight", C, F)
    norm("model.norm.weight")
    linear("lm_head.weight", V, C)
    return out


def write_safetensors(path, items):
    header, data, off = {"__metadata__": {"format": "pt"}}, bytearray(), 0
    for name, shape, values in items:
        raw = struct.pack("<%dH" % len(values), *[bf16(v) for v in values])
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(data))
    return off


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                               "fixtures", "hf_tiny")
    os.makedirs(out, exist_ok=True)
    items = tensors()
    split = 1 + 9  # the embedding and layer 0's nine tensors
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    total = write_safetensors(os.path.join(out, files[0]), items[:split])
    total += write_safetensors(os.path.join(out, files[1]), items[split:])
    weight_map = {name: files[0 if i < split else 1] for i, (name, _, _) in enumerate(items)}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": NH,
        "num_key_value_heads": NKV, "head_dim": HS, "vocab_size": V, "max_position_embeddings": MAXPOS,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16", "bos_token_id": 1,
        "eos_token_id": 2, "initializer_range": 0.02, "pretraining_tp": 1, "use_cache": True,
        "transformers_version": "4.45.0",
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
