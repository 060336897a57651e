#!/usr/bin/env python3
"""PyTorch's side of `bench/gpu-vs-pytorch.sh`: the median training-step time,
in eager mode on one GPU, of the same model and step Shardlab's `bench gpu` runs.
A yardstick only, never a dependency of Shardlab.

  mlp:LxD   L nn.Linear(D, D) with bias, exact GELU between (none after the last),
            MSE against y = tanh(x @ T), x ~ randn(batch, D), T ~ randn(D, D)/sqrt(D)
            fixed; x and y are made on the GPU inside every timed step, as Shardlab
            makes its batch there every step.
  gpt:LxCxH nanoGPT's GPT (tests/data/gen_gpt_reference.py: bias, dropout 0, tied
            lm_head), on a batch of random token ids made on the GPU every step;
            attention materialised (nanoGPT's manual path) or F.scaled_dot_product_attention.
AdamW(lr=1e-3) (PyTorch's default implementation, or fused=True); fp32 with TF32 off,
or bf16 under torch.autocast. 3 untimed warm-up steps, then --steps timed ones, each
between two torch.cuda.synchronize().

usage: gpu_pytorch.py --model mlp:8x4096 --batch 1024 [--precision fp32|bf16]
                      [--seq T --vocab V --attention manual|sdpa] [--fused] [--steps 20]
prints the median step in ms, alone on a line.
"""
import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass  # noqa: F401  (the model source below uses it)

try:
    import torch
    import torch.nn as nn
    from torch.nn import functional as F
except ImportError:
    sys.exit("gpu_pytorch.py: PyTorch is not installed for %s (pip install torch)" % sys.executable)


def load_nanogpt():
    """nanoGPT's classes, exactly as the reference generator defines them (its
    module body also writes reference files, so only the classes are run)."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                       "gen_gpt_reference.py")
    text = open(src, encoding="utf-8").read()
    scope = dict(globals())  # torch, nn, F, math, dataclass, as that file imports them
    exec(text[text.index("class LayerNorm"):text.index("# ---- a minimal safetensors writer")],
         scope)
    return scope


def sdpa_forward(self, x):
    """CausalSelfAttention.forward with PyTorch's fused attention (never materialises T x T)."""
    B, T, C = x.size()
    q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
    q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, L, D):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(D, D) for _ in range(L)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = F.gelu(x)  # approximate='none': the exact erf form
        return x


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=0)
    p.add_argument("--attention", choices=["manual", "sdpa"], default="manual")
    p.add_argument("--fused", action="store_true")
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_pytorch.py: torch %s sees no CUDA GPU (torch.cuda.is_available() is False)"
                 % torch.__version__)
    family, _, dims = a.model.partition(":")
    if family not in ("mlp", "gpt"):
        sys.exit("gpu_pytorch.py: --model %s is invalid (valid: mlp:LxD, gpt:LxCxH)" % a.model)
    if family == "gpt" and a.vocab < 1:
        sys.exit("gpu_pytorch.py: a gpt needs --vocab V (the corpus's distinct characters)")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 is exact fp32, as Shardlab's
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    torch.manual_seed(1)

    if family == "mlp":
        L, D = (int(n) for n in dims.split("x"))
        model = MLP(L, D).to(dev)
        target = torch.randn(D, D, device=dev) / math.sqrt(D)  # fixed, made once

        def loss_of_batch():
            x = torch.randn(a.batch, D, device=dev)
            y = torch.tanh(x @ target)  # fp32, outside autocast, as Shardlab's targets
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                return F.mse_loss(model(x), y)
    else:
        L, C, H = (int(n) for n in dims.split("x"))
        g = load_nanogpt()
        if a.attention == "sdpa":
            g["CausalSelfAttention"].forward = sdpa_forward
        model = g["GPT"](g["GPTConfig"](block_size=a.seq, vocab_size=a.vocab, n_layer=L,
                                        n_head=H, n_embd=C, dropout=0.0, bias=True)).to(dev)

        def loss_of_batch():
            xy = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                # contiguous: nanoGPT's loss views the targets flat
                return model(xy[:, :-1].contiguous(), xy[:, 1:].contiguous())[1]

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True if a.fused else None)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_of_batch().backward()
        opt.step()

    for _ in range(3):
        step()
    times = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    print("%.4f" % statistics.median(times))


if __name__ == "__main__":
    main()
