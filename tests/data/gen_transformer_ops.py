#!/usr/bin/python3
"""Reference values for tests/test_transformer_kernels.cpp, from PyTorch.

Embedding, LayerNorm, nanoGPT's causal self-attention core and cross-entropy
(ignore_index=-1), forward and backward, on fixed inputs. Inputs are drawn in
float32 (so the C++ test can hold them exactly in float or double) and the
reference is computed in float64. The test reads the JSON this prints and
does not need PyTorch. Regenerate with Debian's python3-torch:

    /usr/bin/python3 tests/data/gen_transformer_ops.py > tests/data/transformer_ops.json
"""
import json
import math

import torch
import torch.nn.functional as F

torch.manual_seed(20240613)


def draw(*shape, scale=1.0, offset=0.0):
    """float32 values, returned as a float64 leaf tensor that needs a gradient."""
    t = (torch.randn(*shape, dtype=torch.float32) * scale + offset).to(torch.float64)
    return t.requires_grad_(True)


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def embedding():
    B, T, C, V = 2, 4, 3, 5
    tokens = torch.tensor([[1, 3, 1, 0], [4, 1, 1, 3]])
    wte, wpe = draw(V, C), draw(T + 2, C)  # wpe has more rows than T uses
    dout = draw(B, T, C).detach()
    out = wte[tokens] + wpe[torch.arange(T)]
    out.backward(dout)
    return dict(B=B, T=T, C=C, V=V, tokens=tokens.reshape(-1).tolist(), wte=flat(wte),
                wpe=flat(wpe), dout=flat(dout), out=flat(out), dwte=flat(wte.grad),
                dwpe=flat(wpe.grad))


def layernorm():
    rows, C, eps = 5, 8, 1e-5
    x = draw(rows, C, scale=2.0, offset=3.0)  # a large mean: the two-pass variance matters
    w, b = draw(C, scale=0.5, offset=1.0), draw(C, scale=0.5)
    dout = draw(rows, C).detach()
    out = F.layer_norm(x, (C,), w, b, eps)
    out.backward(dout)
    _, mean, rstd = torch.native_layer_norm(x.detach(), (C,), w.detach(), b.detach(), eps)
    return dict(rows=rows, C=C, eps=eps, x=flat(x), weight=flat(w), bias=flat(b), dout=flat(dout),
                out=flat(out), mean=flat(mean), rstd=flat(rstd), dx=flat(x.grad),
                dweight=flat(w.grad), dbias=flat(b.grad))


def attention():
    # nanoGPT's CausalSelfAttention.forward between c_attn and c_proj (the
    # non-flash path, which PyTorch 1.13 takes).
    B, T, C, H = 2, 5, 8, 2
    qkv = draw(B, T, 3 * C)
    dout = draw(B, T, C).detach()
    q, k, v = qkv.split(C, dim=2)
    k = k.view(B, T, H, C // H).transpose(1, 2)
    q = q.view(B, T, H, C // H).transpose(1, 2)
    v = v.view(B, T, H, C // H).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    bias = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    att = att.masked_fill(bias[:, :, :T, :T] == 0, float('-inf'))
    att = F.softmax(att, dim=-1)
    y = att @ v
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    y.backward(dout)
    return dict(B=B, T=T, C=C, H=H, qkv=flat(qkv), dout=flat(dout), out=flat(y), att=flat(att),
                dqkv=flat(qkv.grad))


def crossentropy():
    rows, V = 6, 7
    logits = draw(rows, V, scale=2.0)
    with torch.no_grad():
        logits[2] += 100.0  # a stable kernel subtracts the row's max
    targets = torch.tensor([3, 0, 6, -1, 2, 3])
    loss = F.cross_entropy(logits, targets, ignore_index=-1)
    loss.backward()
    divisor = int((targets != -1).sum())
    return dict(rows=rows, V=V, divisor=divisor, logits=flat(logits),
                targets=targets.tolist(), loss=float(loss), dlogits=flat(logits.grad))


print(json.dumps(dict(generator='tests/data/gen_transformer_ops.py', torch=torch.__version__,
                      embedding=embedding(), layernorm=layernorm(), attention=attention(),
                      crossentropy=crossentropy()), indent=1))
