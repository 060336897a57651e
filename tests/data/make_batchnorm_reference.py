#!/usr/bin/python3
# Writes batchnorm_reference.safetensors: PyTorch's own training of the module
# that loads `mlp:3x8+bn` checkpoints (README), for tests/test_batchnorm.cpp.
# Run with Debian's python3-torch: /usr/bin/python3 tests/data/make_batchnorm_reference.py
# Torch is never a runtime dependency of Shardlab; only this file's output is committed.
import json
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

L, D, B, STEPS, LR = 3, 8, 12, 3, 0.1


class Layer(nn.Linear):
    """One layer of mlp:LxD+bn: Linear(D, D) (names layers.i.weight/.bias, as in
    mlp:LxD) and, on hidden layers, .bn = BatchNorm1d(D) before the GELU."""

    def __init__(self, d, hidden, bn):
        super().__init__(d, d)
        self.hidden = hidden
        if bn and hidden:
            self.bn = nn.BatchNorm1d(d)

    def forward(self, x):
        x = super().forward(x)
        if hasattr(self, "bn"):
            x = self.bn(x)
        return F.gelu(x) if self.hidden else x


class MLP(nn.Module):
    def __init__(self, layers, d, bn):
        super().__init__()
        self.layers = nn.ModuleList([Layer(d, i + 1 < layers, bn) for i in range(layers)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def train(model, x, y, micro_batches):
    """Shardlab's pipeline semantics: each micro-batch is one module call (its own
    BatchNorm statistics and running-stat update); the MSE is over the whole
    batch, so the micro-batches' gradients add up; one SGD step per batch."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    rows = B // micro_batches
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        total = 0.0
        for m in range(micro_batches):
            xs, ys = x[s, m * rows:(m + 1) * rows], y[s, m * rows:(m + 1) * rows]
            loss = ((model(xs) - ys) ** 2).sum() / (B * D)
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    return losses


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


torch.manual_seed(0)
init = MLP(L, D, bn=True)
# Not BatchNorm's own init (weight 1, bias 0), so its gradients are exercised.
with torch.no_grad():
    for i in range(L - 1):
        init.layers[i].bn.weight.uniform_(0.5, 1.5)
        init.layers[i].bn.bias.uniform_(-0.2, 0.2)
x = torch.randn(STEPS, B, D) * 2 + 1
y = torch.tanh(torch.randn(STEPS, B, D))

out = {"x": x, "y": y}
for k, v in init.state_dict().items():
    out["init." + k] = v
for m in (1, 3):
    model = MLP(L, D, bn=True)
    model.load_state_dict(init.state_dict(), strict=True)
    model.train()
    losses = train(model, x, y, m)
    out[f"losses_m{m}"] = torch.tensor(losses, dtype=torch.float32)
    for k, v in model.state_dict().items():
        out[f"final_m{m}.{k}"] = v
save_safetensors(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "batchnorm_reference.safetensors"), out)
print("wrote", len(out), "tensors; torch", torch.__version__)
