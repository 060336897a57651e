#!/usr/bin/python3
"""Loads a Shardlab gpt checkpoint into nanoGPT's GPT (model.py) and prints its
loss on windows of a text, and a sample: the README's recipe, run for real.

usage: scripts/load-into-nanogpt.py CHECKPOINT [TEXT] [--model-py PATH] [--sample N] [--seed S]

Without --model-py, nanoGPT's classes are taken from tests/data/gen_gpt_reference.py
(a verbatim copy of model.py's, bias=True). Needs python3-torch; reads the
safetensors file with a few lines of its own (no `safetensors` package needed).
"""
import argparse
import json
import os
import struct
import sys

import torch
import torch.nn as nn  # noqa: F401  (the model source uses these names)
from torch.nn import functional as F  # noqa: F401
import math  # noqa: F401
from dataclasses import dataclass  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": torch.float32, "I64": torch.int64}
    tensors = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=dtypes[h["dtype"]])
        tensors[name] = t.reshape(h["shape"])
    return tensors, meta


def sample(model, idx, n, block_size, generator):
    """n characters after idx, each drawn from the model's softmax (temperature 1):
    nanoGPT's generate(), written out, since the reference copy of model.py has
    only the layers."""
    for _ in range(n):
        logits, _ = model(idx[:, -block_size:])
        probs = F.softmax(logits[:, -1, :], dim=-1)
        idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return idx


def main():
    ap = argparse.ArgumentParser(
        description="Load a Shardlab gpt checkpoint into nanoGPT's GPT: loss on a text, and a sample.")
    ap.add_argument("checkpoint", help="a gpt checkpoint (.safetensors) Shardlab wrote")
    ap.add_argument("text", nargs="?", help="the text to measure the loss on (default: assets/corpus.txt)")
    ap.add_argument("--model-py", metavar="PATH",
                    help="nanoGPT's model.py (default: the copy in tests/data/gen_gpt_reference.py)")
    ap.add_argument("--sample", type=int, default=200, metavar="N",
                    help="characters to sample after a newline (default 200; 0: none)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the windows and the sample (default 0)")
    a = ap.parse_args()
    if a.sample < 0:
        ap.error("--sample %d is negative (valid: 0 or more characters)" % a.sample)
    model_py = a.model_py
    src = model_py or os.path.join(HERE, "..", "tests", "data", "gen_gpt_reference.py")
    text = open(src, encoding="utf-8").read()
    if model_py is None:
        text = text[text.index("class LayerNorm"):text.index("# ---- a minimal safetensors writer")]
    exec(text, globals())
    args = [a.checkpoint] + ([a.text] if a.text else [])

    sd, meta = read_safetensors(args[0])
    L, C, H = (int(v) for v in meta["model"].split(":")[1].split("x"))
    vocab = meta["vocabulary"]
    T = int(meta["seq"])
    model = GPT(GPTConfig(block_size=T, vocab_size=len(vocab), n_layer=L, n_head=H, n_embd=C,
                          dropout=0.0, bias=True))
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # tied: Shardlab stores it once
    missing, unexpected = model.load_state_dict(sd, strict=False)
    # torch < 2.0: nanoGPT's causal-mask buffers (.attn.bias) are constants, not weights.
    assert all(k.endswith(".attn.bias") for k in missing), missing
    assert not unexpected, unexpected
    print("loaded %s into nanoGPT's GPT: %d parameters (missing only the causal-mask buffers: %d)"
          % (args[0], sum(p.numel() for p in model.parameters()), len(missing)))

    corpus = open(args[1] if len(args) > 1 else os.path.join(HERE, "..", "assets", "corpus.txt"),
                  encoding="utf-8").read()
    ids = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([ids[c] for c in corpus if c in ids])
    g = torch.Generator().manual_seed(a.seed)
    starts = torch.randint(0, len(data) - T - 1, (32,), generator=g)
    x = torch.stack([data[s:s + T] for s in starts])
    y = torch.stack([data[s + 1:s + T + 1] for s in starts])
    model.eval()
    with torch.no_grad():
        _, loss = model(x, y)
        print("loss on 32 windows of the text: %.4f" % loss.item())
        if a.sample > 0:
            out = sample(model, torch.tensor([[ids.get("\n", 0)]]), a.sample, T, g)
            print("sample (%d characters, seed %d):" % (a.sample, a.seed))
            print("".join(vocab[i] for i in out[0].tolist()))


if __name__ == "__main__":
    main()
