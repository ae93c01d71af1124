#!/usr/bin/env python3
"""make_seeds.py — regenerates the small seed corpora under tests/fuzz/corpus/<target>/:
a few valid and a few broken inputs per fuzz target, each under 4 KiB. Deterministic:
running it again rewrites the same bytes. Usage: tests/fuzz/make_seeds.py"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    assert len(data) < 4096, (target, name, len(data))
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- json
def json_seeds():
    write("json", "ok_config", json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 768, "intermediate_size": 2048,
        "num_attention_heads": 12, "num_key_value_heads": 4, "num_hidden_layers": 12,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "vocab_size": 50304, "max_position_embeddings": 1024}, indent=2))
    write("json", "ok_state", '{"step": 18446744073709551615, "rng": [9223372036854775807, -9223372036854775808, 0],'
          ' "data": {"train": 123456, "val": 0}, "loss": -1.25e-3, "done": true, "note": null}')
    write("json", "ok_escapes", r'["\"\\\/\b\f\n\r\t", "\u0041\u00e9\u20AC\uD83D\uDE00\udbff\udfff", "a\u0000b", '
          '"\u00e9\u20ac\U0001F600"]'.replace(r"\U0001F600", "\U0001F600"))
    write("json", "ok_nested", "[" * 64 + "]" * 64)
    write("json", "ok_scalars", ' [0, -0, 1E+2, 0.5e-7, true, false, null, "", {}, []] ')
    write("json", "bad_deep", "[" * 65 + "]" * 65)
    write("json", "bad_dup", '{"a": 1, "b": 2, "\\u0061": 3}')
    write("json", "bad_utf8", b'["ok", "\xed\xa0\x80", "\xc0\xaf"]')
    write("json", "bad_surrogate", r'["\ud800x", "\udc00"]')
    write("json", "bad_numbers", "[01, 1., .5, 1e, -, 1e999]")
    write("json", "bad_trailing", '{"a": [1, 2,], }')
    write("json", "bad_truncated", '{"a": {"b": "unterminated')
    write("json", "bad_control", '["tab\there"]')


# ---------------------------------------------------------------- safetensors
def st_file(entries, data, meta=None, pad=True):
    """entries: list of (name, dtype, shape, begin, end); data: bytes of the data section."""
    h = {}
    if meta is not None:
        h["__metadata__"] = meta
    for name, dtype, shape, b, e in entries:
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}
    text = json.dumps(h, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    data = bytes(range(256)) * 2
    ok = [("model.embed_tokens.weight", "F32", [4, 8], 0, 128),
          ("model.layers.0.input_layernorm.weight", "BF16", [8], 128, 144),
          ("model.norm.weight", "F16", [3], 144, 150),
          ("scalar", "F32", [], 150, 154),
          ("empty", "BF16", [0, 5], 154, 154)]
    write("safetensors", "ok_mixed", st_file(ok, data[:154], {"format": "pt", "step": "12"}))
    write("safetensors", "ok_empty", st_file([], b""))
    write("safetensors", "ok_metadata_only", st_file([], b"", {"framework": "pt"}))
    write("safetensors", "ok_unpadded", st_file([("w", "F32", [2, 2], 0, 16)], data[:16], pad=False))
    write("safetensors", "ok_out_of_order", st_file([("b", "F32", [2], 8, 16), ("a", "BF16", [4], 0, 8)], data[:16]))
    write("safetensors", "bad_overlap", st_file([("a", "F32", [4], 0, 16), ("b", "F32", [4], 8, 24)], data[:24]))
    write("safetensors", "bad_hole", st_file([("a", "F32", [2], 0, 8), ("b", "F32", [2], 16, 24)], data[:24]))
    write("safetensors", "bad_dtype", st_file([("a", "I64", [2], 0, 16)], data[:16]))
    write("safetensors", "bad_mismatch", st_file([("x", "F32", [4], 0, 12)], data[:12]))
    write("safetensors", "bad_range", st_file([("x", "F32", [4], 0, 16)], data[:8]))
    good = st_file(ok, data[:154])
    write("safetensors", "bad_truncated", good[:100])
    write("safetensors", "bad_header_len", struct.pack("<Q", 5000) + good[8:200])
    write("safetensors", "bad_json", struct.pack("<Q", 16) + b'{"a":{"dtype":,}' + data[:8])


# ---------------------------------------------------------------- tokens (llm.c .bin)
def bin_file(tokens, magic=20240520, version=1, count=None, extra=b"", width=2):
    header = [0] * 256
    header[0], header[1] = magic, version
    header[2] = len(tokens) if count is None else count
    fmt = "<%d%s" % (len(tokens), "H" if width == 2 else "I")
    return struct.pack("<256i", *header) + struct.pack(fmt, *tokens) + extra


def tokens_seeds():
    text = b"The quick brown fox jumps over the lazy dog. 17+25=42.\n" * 4
    write("tokens", "ok_text", bin_file(list(text)))
    write("tokens", "ok_big_vocab", bin_file([(i * 7919) % 65536 for i in range(300)]))
    write("tokens", "ok_minimum", bin_file(list(range(34))))  # B=2, T=8: 17 to train + 17 held out
    write("tokens", "bad_magic", bin_file(list(text[:100]), magic=20240519))
    write("tokens", "bad_version", bin_file(list(text[:100]), version=2))
    write("tokens", "bad_truncated", bin_file(list(text[:100]), count=200))
    write("tokens", "bad_trailing", bin_file(list(text[:100]), extra=b"\x00"))
    write("tokens", "bad_negative", bin_file([], count=-5))
    write("tokens", "bad_too_few", bin_file(list(range(20))))
    write("tokens", "bad_header_only", bin_file([])[:600])
    # llm.c's Llama 3 format: uint32 tokens, magic 20240801, version 7
    write("tokens", "ok_wide", bin_file(list(text), magic=20240801, version=7, width=4))
    write("tokens", "bad_wide_token", bin_file([70000] + list(text[:60]), magic=20240801, version=7, width=4))
    write("tokens", "bad_wide_version", bin_file(list(text[:100]), magic=20240801, version=1, width=4))
    write("tokens", "bad_wide_halves", bin_file(list(text[:100]), magic=20240801, version=7))


if __name__ == "__main__":
    for t in ("json", "safetensors", "tokens"):
        shutil.rmtree(os.path.join(CORPUS, t), ignore_errors=True)
    json_seeds()
    safetensors_seeds()
    tokens_seeds()
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        print("%s: %d seeds" % (t, len(files)))
