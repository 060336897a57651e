#!/usr/bin/python3
"""Reference numbers for Shardlab's `gpt:2x64x4` (issue 13), from PyTorch.

What this writes (both files committed; the C++ tests read them and never need
PyTorch):

  tests/data/gpt_2x64x4_reference.safetensors
      initial weights, one batch, forward / loss / gradients, and a 10-step
      AdamW trajectory (layout below);
  tests/data/gpt_2x64x4_state_dict.txt
      the names, dtypes and shapes of nanoGPT's `GPT.state_dict()` for the same
      configuration, one `name dtype shape` line each.

Regenerate (Debian's python3-torch, 1.13; the pyenv `python3` has no torch):

    /usr/bin/python3 tests/data/gen_gpt_reference.py

The output is byte-for-byte reproducible on one machine (one intra-op thread,
fixed seeds, a fixed header order); a different torch or BLAS may change the
last bits of the float64 numbers, far below any test tolerance.

The model
---------
`GPT` below is nanoGPT's model.py (github.com/karpathy/nanoGPT), written out
here from the published file rather than imported or copied: the version of
model.py since the early-2023 change that added the `bias` flag, the
flash-attention branch and the GPT-2 initialisation in `_init_weights` (no
commit hash is pinned; that part of the file has been stable since). Used with
bias=True and dropout=0.0, which is GPT-2's architecture:

  - LayerNorm(ndim, bias): weight ones, bias zeros, eps 1e-5;
  - CausalSelfAttention: c_attn Linear(C, 3C), split into q, k, v, heads
    (B, nh, T, hs), att = q k^T / sqrt(hs), causal mask from the `bias`
    buffer (tril of ones, [1, 1, block_size, block_size]), softmax, att v,
    heads re-joined, c_proj Linear(C, C);
  - MLP: c_fc Linear(C, 4C), GELU (exact erf form), c_proj Linear(4C, C);
  - Block: x + attn(ln_1(x)), then x + mlp(ln_2(x));
  - GPT: transformer = ModuleDict(wte, wpe, drop, h, ln_f); lm_head
    Linear(C, V, bias=False) with `transformer.wte.weight = lm_head.weight`;
    `_init_weights`: normal(0, 0.02) for every Linear and Embedding weight,
    zero Linear biases; then every `*c_proj.weight` again normal(0,
    0.02/sqrt(2 n_layer)); loss = cross_entropy(logits.view(-1, V),
    targets.view(-1), ignore_index=-1).

nanoGPT takes the flash path (F.scaled_dot_product_attention, PyTorch >= 2.0)
when it exists and registers the `bias` mask buffer only when it does not.
This script always takes the manual path and always registers the buffer,
which is exactly what nanoGPT does on PyTorch 1.13; the numbers are the same
either way up to rounding.

Configuration: n_layer 2, n_embd 64, n_head 4, block_size = T = 32,
vocab_size V = 65 (shakespeare_char's size), batch B = 4, bias=True,
dropout 0. torch.manual_seed(1337) is set before GPT(config) is built in
float32; the float64 model is a deep copy converted with .double(), so both
start from the same (float32-representable) weights.

The safetensors file
--------------------
Written by the small writer in this script: 8-byte little-endian header
length, a JSON header (dtype, shape, data_offsets per tensor, plus
"__metadata__" strings), spaces to an 8-byte boundary, then the tensors in
header order tiling the data section exactly. Only F32 and I64 are used
(what core/io/safetensors.cpp reads); float64 results are stored rounded to
F32, and where the exact double matters it is also in __metadata__ as a
"%.17g" string.

  x, y                     I64 [B, T]   the batch: tokens and next tokens
  <name>                   F32          initial weights, nanoGPT state_dict
                                        names, parameters only; the tied tensor
                                        once, as transformer.wte.weight (no
                                        lm_head.weight, no .attn.bias buffers)
  logits.row0              F32 [T, V]   float64 model's logits for batch row 0
  loss.fp64                F32 [1]      float64 model's loss (exact in metadata)
  loss.fp32                F32 [1]      float32 model's loss
  grad.<name>              F32          float64 model's gradient of every
                                        parameter; grad.transformer.wte.weight
                                        is the sum of the embedding's and the
                                        lm_head's contributions
  steps.x, steps.y         I64 [10, B, T]  the trajectory's 10 batches
  steps.loss               F32 [10]     float64 loss at each step (before its
                                        update; exact values in metadata)
  steps.final.<name>       F32          float64 weights after the 10 steps

Metadata (all strings): see `meta[...]` below; among them loss.fp64 (17
digits), grad.max_rel_diff_fp32 (the largest, over tensors, of
max|g32 - g64| / max|g64|: what a float32 implementation should expect),
steps.sumsq.<name> (sum of squares of each final float64 weight, 17 digits)
and steps.optimizer (the exact optimizer settings).

Batches: every batch row is T+1 tokens drawn by torch.randint(0, V, ...,
generator=g) from a torch.Generator seeded 1337 (the reference batch) or
1338 (the 10 trajectory batches, drawn as one [10, B, T+1] tensor); x is
the first T tokens of each row and y the last T. The batches are stored, so
C++ does not need to reproduce torch's generator.

Trajectory: torch.optim.AdamW over model.parameters() (the tied tensor is
one parameter, stepped once) with Shardlab's defaults from core/config.h:
lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01 applied to EVERY
tensor (Shardlab's Optimizer has one set of hyper-parameters for all
ranges: biases, LayerNorm and embeddings are decayed too; nanoGPT's
configure_optimizers would decay only the 2-D tensors). foreach=False (the
single-tensor path Shardlab's kernels follow). The hyper-parameters are
the Python doubles 1e-3 etc., not their float32 roundings: a relative
difference of ~5e-8 in lr, far below float32 training noise.

Loading a Shardlab checkpoint into nanoGPT
------------------------------------------
A Shardlab checkpoint holds every parameter once under nanoGPT's names: the
tied tensor only as transformer.wte.weight (the safetensors convention for
shared tensors), and no .attn.bias buffers (they are constants, not
parameters). nanoGPT's state_dict() lists lm_head.weight too (same tensor),
and on PyTorch < 2.0 also transformer.h.{i}.attn.bias. So load non-strictly
and check that only those are missing:

    import torch
    from safetensors.torch import load_file      # or any safetensors reader
    from model import GPT, GPTConfig              # nanoGPT's model.py
    sd = load_file("checkpoint.safetensors")
    model = GPT(GPTConfig(block_size=32, vocab_size=65, n_layer=2, n_head=4,
                          n_embd=64, dropout=0.0, bias=True))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected
    assert all(k == "lm_head.weight" or k.endswith(".attn.bias") for k in missing)
    # lm_head.weight IS transformer.wte.weight, so it is loaded; the masks keep
    # the values GPT() built.

or fill in the tied name first (sd["lm_head.weight"] = sd["transformer.wte.weight"]),
which makes strict=True work on PyTorch >= 2.0 (no mask buffers there).
block_size must be Shardlab's --seq T (wpe has T rows) and vocab_size the
tokenizer's V. The other way, a nanoGPT state_dict into Shardlab: strip a
"_orig_mod." prefix (torch.compile), drop lm_head.weight (equal to
transformer.wte.weight) and every .attn.bias.
"""
import copy
import hashlib
import json
import math
import os
import struct
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

torch.set_num_threads(1)  # one summation order: reproducible bits

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_ST = os.path.join(HERE, "gpt_2x64x4_reference.safetensors")
OUT_SD = os.path.join(HERE, "gpt_2x64x4_state_dict.txt")

N_LAYER, N_EMBD, N_HEAD, T, V, B = 2, 64, 4, 32, 65, 4
STEPS = 10
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)  # core/config.h


# ---- nanoGPT's model.py (bias=True, dropout=0.0, manual attention) ----------

class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT's; F.layer_norm, eps 1e-5)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        # nanoGPT: flash = hasattr(F, 'scaled_dot_product_attention'), and the
        # mask buffer only when not flash. Here always the PyTorch 1.13 path.
        self.flash = False
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                             .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()  # approximate='none': the exact erf form
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss


# ---- a minimal safetensors writer ------------------------------------------

def save_safetensors(path, tensors, metadata):
    """tensors: list of (name, tensor) in file order; F32 and I64 only."""
    header, blobs, offset = {"__metadata__": dict(metadata)}, [], 0
    for name, t in tensors:
        assert name != "__metadata__" and name not in header, name
        t = t.detach().contiguous()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        data = t.numpy().tobytes()  # little-endian on every host this runs on
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    assert all(isinstance(v, str) for v in header["__metadata__"].values())
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def g17(v):
    return "%.17g" % v


def f32(t):
    return t.detach().to(torch.float32)


def draw_batches(seed, *lead):
    """Rows of T+1 tokens from a seeded generator: x = first T, y = last T."""
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, V, (*lead, T + 1), generator=g, dtype=torch.int64)
    return seq[..., :T].contiguous(), seq[..., 1:].contiguous()


# ---- build, forward, backward ---------------------------------------------

config = GPTConfig(block_size=T, vocab_size=V, n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD,
                   dropout=0.0, bias=True)
torch.manual_seed(1337)
model32 = GPT(config)
model64 = copy.deepcopy(model32).double()
for m in (model32, model64):
    assert m.lm_head.weight is m.transformer.wte.weight
init = [(n, p.detach().clone()) for n, p in model32.named_parameters()]  # tied tensor once
names = [n for n, _ in init]
assert names[0] == "transformer.wte.weight" and "lm_head.weight" not in names

x, y = draw_batches(1337, B)
logits32, loss32 = model32(x, y)
loss32.backward()
logits64, loss64 = model64(x, y)
loss64.backward()

grads64 = {n: p.grad.detach().clone() for n, p in model64.named_parameters()}
grads32 = {n: p.grad.detach().clone() for n, p in model32.named_parameters()}
# Per tensor max|g32 - g64| / max|g64|, and the largest over tensors.
normwise = {n: ((grads32[n].double() - grads64[n]).abs().max() / grads64[n].abs().max()).item()
            for n in names}
max_rel = max(normwise.values())
worst = max(normwise, key=normwise.get)
logits_diff = (logits32.double() - logits64).abs().max().item()


# ---- 10 AdamW steps --------------------------------------------------------

steps_x, steps_y = draw_batches(1338, STEPS, B)


def train(model):
    model = copy.deepcopy(model)
    model.zero_grad(set_to_none=True)
    opt = torch.optim.AdamW(model.parameters(), foreach=False, **ADAMW)
    losses = []
    for s in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = model(steps_x[s], steps_y[s])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


traj64, losses64 = train(model64)
traj32, losses32 = train(model32)
final64 = dict(traj64.named_parameters())
final32 = dict(traj32.named_parameters())
sumsq = {n: (final64[n].detach() ** 2).sum().item() for n in names}
sumsq32 = {n: (final32[n].detach().double() ** 2).sum().item() for n in names}
sumsq_rel = max(abs(sumsq32[n] - sumsq[n]) / sumsq[n] for n in names)
final_diff = max((final32[n].detach().double() - final64[n].detach()).abs().max().item()
                 for n in names)
step_loss_diff = max(abs(a - b) for a, b in zip(losses32, losses64))


# ---- write -----------------------------------------------------------------

meta = {
    "generator": "tests/data/gen_gpt_reference.py",
    "torch": torch.__version__,
    "model": "gpt:%dx%dx%d" % (N_LAYER, N_EMBD, N_HEAD),
    "config": json.dumps(dict(block_size=T, vocab_size=V, n_layer=N_LAYER, n_head=N_HEAD,
                              n_embd=N_EMBD, dropout=0.0, bias=True)),
    "batch": str(B),
    "seq": str(T),
    "init": "torch.manual_seed(1337); GPT(config) in float32 (nanoGPT's _init_weights); "
            "the float64 model is a deep copy .double()",
    "tied": "lm_head.weight is the same tensor as transformer.wte.weight (nanoGPT's weight "
            "tying); stored once, as transformer.wte.weight; grad.transformer.wte.weight is "
            "the sum of the embedding's and the lm_head's gradients",
    "buffers": "nanoGPT on PyTorch < 2.0 also has transformer.h.{i}.attn.bias (the causal mask, "
               "a persistent buffer) in its state_dict; not stored here: a constant",
    "batches": "torch.randint(0, V, (..., T+1), generator=torch.Generator().manual_seed(seed)); "
               "x = first T, y = last T; seed 1337 for x/y [B,T], 1338 for steps.x/steps.y "
               "[10,B,T] (one draw)",
    "logits.row0": "float64 model's logits for batch row 0, rounded to F32; float32 model "
                   "differs by at most " + "%.3e" % logits_diff,
    "loss.fp64": g17(loss64.item()),
    "loss.fp32": g17(loss32.item()),
    "grad.max_rel_diff_fp32": "%.3e" % max_rel,
    "grad.max_rel_diff_fp32.definition":
        "max over tensors of max|g_fp32 - g_fp64| / max|g_fp64| (PyTorch float32 vs float64, "
        "same weights and batch); largest for " + worst,
    "steps.optimizer": "torch.optim.AdamW(model.parameters(), lr=0.001, betas=(0.9, 0.999), "
                       "eps=1e-08, weight_decay=0.01, foreach=False): one group, every tensor "
                       "decayed (Shardlab's defaults, core/config.h); the tied tensor is one "
                       "parameter",
    "steps.count": str(STEPS),
    "steps.loss.fp64": ",".join(g17(v) for v in losses64),
    "steps.loss.fp32_max_abs_diff": "%.3e" % step_loss_diff,
    "steps.final.fp32_max_abs_diff": "%.3e" % final_diff,
    "steps.sumsq.fp32_max_rel_diff": "%.3e" % sumsq_rel,
}
for n in names:
    meta["steps.sumsq." + n] = g17(sumsq[n])

tensors = [("x", x), ("y", y)]
tensors += init
tensors += [("logits.row0", f32(logits64[0])),
            ("loss.fp64", f32(loss64.reshape(1))),
            ("loss.fp32", f32(loss32.reshape(1)))]
tensors += [("grad." + n, f32(grads64[n])) for n in names]
tensors += [("steps.x", steps_x), ("steps.y", steps_y),
            ("steps.loss", torch.tensor(losses64, dtype=torch.float64).to(torch.float32))]
tensors += [("steps.final." + n, f32(final64[n])) for n in names]
save_safetensors(OUT_ST, tensors, meta)

# nanoGPT's state_dict() for this configuration, as nanoGPT builds it on
# PyTorch 1.13 (model32 is that module: buffers included, lm_head listed).
lines = [
    "# nanoGPT GPT.state_dict() for gpt:%dx%dx%d: GPTConfig(block_size=%d, vocab_size=%d, "
    "n_layer=%d, n_head=%d, n_embd=%d, dropout=0.0, bias=True)" % (
        N_LAYER, N_EMBD, N_HEAD, T, V, N_LAYER, N_HEAD, N_EMBD),
    "# Written by tests/data/gen_gpt_reference.py (torch %s). One entry per line:" % torch.__version__,
    "# `name dtype shape`, in state_dict() order; lines starting with # are comments.",
    "# transformer.h.{i}.attn.bias: the causal mask, tril(ones(T, T)) viewed [1, 1, T, T], a",
    "#   persistent buffer that nanoGPT registers only when F.scaled_dot_product_attention is",
    "#   missing (PyTorch < 2.0, as here); on PyTorch >= 2.0 these lines are absent. Not a",
    "#   parameter: Shardlab does not save it, and a loader of nanoGPT checkpoints must accept",
    "#   and ignore it. nanoGPT's own from_pretrained() drops '.attn.bias' keys; its train.py",
    "#   (resume) and sample.py call load_state_dict() strictly (after stripping '_orig_mod.'),",
    "#   so a nanoGPT checkpoint only loads into a nanoGPT built on the same side of 2.0.",
    "#   (As the published train.py/sample.py read; not run here: no nanoGPT checkout.)",
    "# lm_head.weight: the same tensor as transformer.wte.weight (weight tying). state_dict()",
    "#   lists both names; Shardlab stores it once, as transformer.wte.weight.",
]
sd = model32.state_dict()
for name, t in sd.items():
    if name == "lm_head.weight":
        assert t.data_ptr() == sd["transformer.wte.weight"].data_ptr()
        lines.append("# tied: lm_head.weight is transformer.wte.weight")
    lines.append("%s %s [%s]" % (name, str(t.dtype).replace("torch.", ""),
                                 ", ".join(str(d) for d in t.shape)))
with open(OUT_SD, "w") as f:
    f.write("\n".join(lines) + "\n")

with open(OUT_ST, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
print("wrote %s (%d bytes, sha256 %s)" % (os.path.relpath(OUT_ST), os.path.getsize(OUT_ST), digest))
print("wrote %s (%d entries)" % (os.path.relpath(OUT_SD), len(sd)))
print("loss fp64 %s  fp32 %s" % (meta["loss.fp64"], meta["loss.fp32"]))
print("grad max rel diff fp32 vs fp64 %s (%s)" % (meta["grad.max_rel_diff_fp32"], worst))
print("logits max abs diff fp32 vs fp64 %.3e" % logits_diff)
print("steps loss fp64", meta["steps.loss.fp64"])
print("steps: loss fp32 max abs diff %s, final weights max abs diff %s, sumsq max rel diff %s" % (
    meta["steps.loss.fp32_max_abs_diff"], meta["steps.final.fp32_max_abs_diff"],
    meta["steps.sumsq.fp32_max_rel_diff"]))
