#!/usr/bin/python3
"""PyTorch's side of `bench/gpt-vs-pytorch.sh`: the median training-step time of
nanoGPT's GPT (the same module as tests/data/gen_gpt_reference.py: bias=True,
dropout 0, tied lm_head) with AdamW, on the CPU, one thread. Never a runtime
dependency of Shardlab: a yardstick only.

usage: gpt_pytorch.py L C H T B V STEPS   ->  prints "pytorch_step_ms <median>"
"""
import os
import sys
import time

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402,F401  (the model source below uses these names)
from torch.nn import functional as F  # noqa: E402,F401
import math  # noqa: E402,F401
from dataclasses import dataclass  # noqa: E402,F401

# nanoGPT's model, exactly as the reference generator defines it (its module
# body also writes the reference files, so only the class definitions are run).
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                    "gen_gpt_reference.py")
_text = open(_SRC, encoding="utf-8").read()
exec(_text[_text.index("class LayerNorm"):_text.index("# ---- a minimal safetensors writer")])


def main():
    L, C, H, T, B, V, steps = (int(a) for a in sys.argv[1:8])
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = GPT(GPTConfig(block_size=T, vocab_size=V, n_layer=L, n_head=H, n_embd=C,
                                  dropout=0.0, bias=True))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, foreach=False)
    g = torch.Generator().manual_seed(2)
    times = []
    for _ in range(steps):
        xy = torch.randint(0, V, (B, T + 1), generator=g)
        x, y = xy[:, :T].contiguous(), xy[:, 1:].contiguous()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    times = sorted(times[1:])  # step 0 warms caches, as Shardlab's bench leaves it out
    print("pytorch_step_ms %.3f" % times[len(times) // 2])


if __name__ == "__main__":
    main()
