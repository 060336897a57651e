// Every GPT-2 op of a DeviceBackend run once on fixed inputs (a small GPT's
// shapes; fused attention apart), and the same ops straight from the fp32 kernel templates: shared
// by tests/test_transformer_kernels.cpp (cpu, guarded) and tests/cuda/ (the GPU).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/device/device.h"
#include "core/rng.h"
#include "kernels/transformer.h"

namespace shardlab::test {

// Device buffers of one backend, filled from and read back into fp32 host vectors.
struct DeviceBuffers {
  DeviceBackend& dev;
  DType dt;
  std::vector<std::pair<void*, size_t>> owned;
  DeviceBuffers(DeviceBackend& d, DType t) : dev(d), dt(t) {}
  ~DeviceBuffers() {
    for (auto& [p, bytes] : owned) dev.raw_free(p, bytes);
  }
  void* alloc(size_t bytes) {
    void* p = dev.raw_alloc(bytes);
    owned.emplace_back(p, bytes);
    return p;
  }
  // A tensor of dt holding `host` (rounded to dt).
  void* put(const std::vector<float>& host) {
    void* p = alloc(host.size() * dtype_size(dt));
    dev.upload(p, dt, host.data(), host.size());
    return p;
  }
  const int32_t* put_ids(const std::vector<int32_t>& ids) {
    void* p = alloc(ids.size() * 4);
    dev.copy(p, ids.data(), ids.size() * 4, CopyKind::host_to_device);
    return static_cast<const int32_t*>(p);
  }
  std::vector<float> get(const void* p, size_t n, DType as) {
    std::vector<float> h(n);
    dev.download(h.data(), p, as, n);
    return h;
  }
  std::vector<float> get(const void* p, size_t n) { return get(p, n, dt); }
};

inline std::vector<float> frandn(size_t n, uint64_t seed, double scale = 1.0, double offset = 0.0) {
  Rng rng(seed);
  std::vector<float> f(n);
  for (float& x : f) x = static_cast<float>(scale * rng.normal() + offset);
  return f;
}

// The values as a tensor of dt holds them (rounded; fp32 unchanged).
inline std::vector<float> rounded(const std::vector<float>& v, DType dt) {
  auto cpu = make_cpu_backend();
  std::vector<uint16_t> tmp(v.size());
  std::vector<float> out(v.size());
  if (dt == DType::f32) return v;
  cpu->cast(tmp.data(), dt, v.data(), DType::f32, v.size());
  cpu->cast(out.data(), DType::f32, tmp.data(), dt, v.size());
  return out;
}

// Everything one run of every GPT op on a backend produces, as fp32 values.
struct OpResults {
  std::vector<std::vector<float>> tensors;
  std::vector<double> losses;
};

// The inputs of one run: a small GPT's shapes, T > 32 so a warp-sized row loops.
struct OpInputs {
  int B = 2, T = 37, C = 24, H = 3, V = 11;
  std::vector<int32_t> tokens, targets;
  std::vector<float> wte, wpe, x, lnw, lnb, dy, qkv, dyc, logits, dwte0, dwpe0, dw0, db0, acc0;
  OpInputs() {
    Rng rng(99);
    for (int i = 0; i < B * T; ++i) tokens.push_back(static_cast<int32_t>(rng.next() % V));
    for (int i = 0; i < B * T; ++i)
      targets.push_back(i % 9 == 4 ? kernels::kIgnoreTarget : static_cast<int32_t>(rng.next() % V));
    const size_t N = static_cast<size_t>(B) * T;
    wte = frandn(V * C, 20);
    wpe = frandn(T * C, 21);
    x = frandn(N * C, 22, 2.0, 1.5);
    lnw = frandn(C, 23, 0.3, 1.0);
    lnb = frandn(C, 24, 0.3);
    dy = frandn(N * C, 25);
    qkv = frandn(N * 3 * C, 26);
    dyc = frandn(N * C, 27);
    logits = frandn(N * V, 28, 3.0);
    dwte0 = frandn(V * C, 29, 0.1);
    dwpe0 = frandn(T * C, 30, 0.1);
    dw0 = frandn(C, 31, 0.1);
    db0 = frandn(C, 32, 0.1);
    acc0 = frandn(N * C, 33, 0.1);
  }
  size_t N() const { return static_cast<size_t>(B) * T; }
};

inline OpResults run_ops(DeviceBackend& backend, DType dt, const OpInputs& in) {
  DeviceBuffers d(backend, dt);
  OpResults r;
  const size_t N = in.N(), C = in.C;
  const int32_t* tokens = d.put_ids(in.tokens);
  const int32_t* targets = d.put_ids(in.targets);

  void* emb = d.alloc(N * C * dtype_size(dt));
  backend.embedding_forward(dt, emb, tokens, d.put(in.wte), d.put(in.wpe), in.B, in.T, in.C, in.V,
                            0, in.V);
  r.tensors.push_back(d.get(emb, N * C));
  void* dwte = d.put(in.dwte0);
  void* dwpe = d.put(in.dwpe0);
  backend.embedding_backward(dt, dwte, dwpe, d.put(in.dy), tokens, in.B, in.T, in.C, in.V, 0, in.V);
  r.tensors.push_back(d.get(dwte, in.dwte0.size()));
  r.tensors.push_back(d.get(dwpe, in.dwpe0.size()));

  void* x = d.put(in.x);
  void* y = d.alloc(N * C * dtype_size(dt));
  float* mean = static_cast<float*>(d.alloc(N * 4));
  float* rstd = static_cast<float*>(d.alloc(N * 4));
  void* w = d.put(in.lnw);
  backend.layernorm_forward(dt, y, mean, rstd, x, w, d.put(in.lnb), in.N(), in.C, 1e-5);
  r.tensors.push_back(d.get(y, N * C));
  r.tensors.push_back(d.get(mean, N, DType::f32));
  r.tensors.push_back(d.get(rstd, N, DType::f32));
  void* dx = d.put(in.acc0);
  void* dw = d.put(in.dw0);
  void* db = d.put(in.db0);
  backend.layernorm_backward(dt, dx, dw, db, d.put(in.dy), x, mean, rstd, w, in.N(), in.C, true);
  r.tensors.push_back(d.get(dx, N * C));
  r.tensors.push_back(d.get(dw, C));
  r.tensors.push_back(d.get(db, C));

  const size_t TT = static_cast<size_t>(in.B) * in.H * in.T * in.T;
  void* qkv = d.put(in.qkv);
  void* att = d.alloc(TT * dtype_size(dt));
  void* ya = d.alloc(N * C * dtype_size(dt));
  auto* scratch = static_cast<float*>(d.alloc(TT * 4));
  backend.attention_forward(dt, ya, att, qkv, scratch, in.B, in.T, in.C, in.H);
  r.tensors.push_back(d.get(ya, N * C));
  r.tensors.push_back(d.get(att, TT));
  void* dqkv = d.alloc(N * 3 * C * dtype_size(dt));
  backend.attention_backward(dt, dqkv, att, scratch, d.put(in.dyc), qkv, in.B, in.T, in.C, in.H);
  r.tensors.push_back(d.get(dqkv, N * 3 * C));

  void* logits = d.put(in.logits);
  void* dlogits = d.alloc(in.logits.size() * dtype_size(dt));
  size_t counted = 0;
  for (int32_t t : in.targets) counted += t != kernels::kIgnoreTarget;
  r.losses.push_back(
      backend.crossentropy_forward_backward(dt, dlogits, logits, targets, in.N(), in.V, counted));
  r.tensors.push_back(d.get(dlogits, in.logits.size()));
  // In place, and without a gradient.
  r.losses.push_back(
      backend.crossentropy_forward_backward(dt, nullptr, logits, targets, in.N(), in.V, counted));
  r.losses.push_back(
      backend.crossentropy_forward_backward(dt, logits, logits, targets, in.N(), in.V, counted));
  r.tensors.push_back(d.get(logits, in.logits.size()));

  void* sum = d.alloc(N * C * dtype_size(dt));
  backend.residual_forward(dt, sum, x, d.put(in.dy), N * C);
  r.tensors.push_back(d.get(sum, N * C));
  return r;
}

// The same ops straight from the kernel templates in fp32, on the inputs as dt
// rounds them: for every op but attention, dt's results are exactly these
// rounded to dt once (same fp32 math, one rounding of each output).
inline OpResults run_templates_f32(const OpInputs& raw, DType dt) {
  OpInputs in = raw;
  for (auto* v : {&in.wte, &in.wpe, &in.x, &in.lnw, &in.lnb, &in.dy, &in.qkv, &in.dyc, &in.logits,
                  &in.dwte0, &in.dwpe0, &in.dw0, &in.db0, &in.acc0})
    *v = rounded(*v, dt);
  OpResults r;
  const size_t N = in.N(), C = in.C;
  std::vector<float> emb(N * C);
  kernels::embedding_forward(emb.data(), in.tokens.data(), in.wte.data(), in.wpe.data(), in.B, in.T,
                             in.C, in.V);
  r.tensors.push_back(emb);
  auto dwte = in.dwte0, dwpe = in.dwpe0;
  kernels::embedding_backward(dwte.data(), dwpe.data(), in.dy.data(), in.tokens.data(), in.B, in.T,
                              in.C, in.V);
  r.tensors.push_back(dwte);
  r.tensors.push_back(dwpe);
  std::vector<float> y(N * C), mean(N), rstd(N);
  kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), in.x.data(), in.lnw.data(),
                             in.lnb.data(), in.N(), in.C, 1e-5);
  r.tensors.push_back(y);
  r.tensors.push_back(mean);
  r.tensors.push_back(rstd);
  auto dx = in.acc0, dw = in.dw0, db = in.db0;
  kernels::layernorm_backward(dx.data(), dw.data(), db.data(), in.dy.data(), in.x.data(),
                              mean.data(), rstd.data(), in.lnw.data(), in.N(), in.C, true);
  r.tensors.push_back(dx);
  r.tensors.push_back(dw);
  r.tensors.push_back(db);
  const size_t TT = static_cast<size_t>(in.B) * in.H * in.T * in.T;
  std::vector<float> ya(N * C), att(TT), dqkv(N * 3 * C), scratch(TT);
  kernels::attention_forward<float>(ya.data(), att.data(), in.qkv.data(), nullptr, in.B, in.T, in.C,
                                    in.H);
  r.tensors.push_back(ya);
  r.tensors.push_back(att);
  kernels::attention_backward<float>(dqkv.data(), att.data(), scratch.data(), in.dyc.data(),
                                     in.qkv.data(), in.B, in.T, in.C, in.H);
  r.tensors.push_back(dqkv);
  size_t counted = 0;
  for (int32_t t : in.targets) counted += t != kernels::kIgnoreTarget;
  std::vector<float> dl(in.logits.size());
  r.losses.push_back(kernels::crossentropy_forward_backward(
      dl.data(), in.logits.data(), in.targets.data(), in.N(), in.V, counted));
  r.tensors.push_back(dl);
  r.losses.push_back(r.losses.back());
  r.losses.push_back(r.losses.back());
  r.tensors.push_back(dl);
  std::vector<float> sum(N * C);
  kernels::residual_forward(sum.data(), in.x.data(), in.dy.data(), N * C);
  r.tensors.push_back(sum);
  return r;
}

// Fused attention (--attention flash) on a backend, on run_ops' attention inputs:
// forward's y and lse, then backward's dqkv and delta (rowsum(dy ⊙ y)).
inline OpResults run_flash_ops(DeviceBackend& backend, DType dt, const OpInputs& in) {
  DeviceBuffers d(backend, dt);
  OpResults r;
  const size_t N = in.N(), C = in.C, rows = static_cast<size_t>(in.B) * in.H * in.T;
  void* qkv = d.put(in.qkv);
  void* y = d.alloc(N * C * dtype_size(dt));
  auto* lse = static_cast<float*>(d.alloc(rows * 4));
  backend.flash_attention_forward(dt, y, lse, qkv, in.B, in.T, in.C, in.H);
  r.tensors.push_back(d.get(y, N * C));
  r.tensors.push_back(d.get(lse, rows, DType::f32));
  void* dqkv = d.alloc(N * 3 * C * dtype_size(dt));
  auto* delta = static_cast<float*>(d.alloc(rows * 4));
  backend.flash_attention_backward(dt, dqkv, delta, d.put(in.dyc), qkv, y, lse, in.B, in.T, in.C,
                                   in.H);
  r.tensors.push_back(d.get(dqkv, N * 3 * C));
  r.tensors.push_back(d.get(delta, rows, DType::f32));
  return r;
}
inline const char* const kFlashTensorNames[] = {"flash out", "flash lse", "flash dqkv",
                                                "flash delta"};

inline const char* const kTensorNames[] = {"embedding out",
                                           "dwte",
                                           "dwpe",
                                           "layernorm out",
                                           "mean",
                                           "rstd",
                                           "layernorm dx",
                                           "layernorm dweight",
                                           "layernorm dbias",
                                           "attention out",
                                           "att",
                                           "dqkv",
                                           "dlogits",
                                           "dlogits in place",
                                           "residual out"};
inline constexpr size_t kAttentionFirst = 9, kAttentionLast = 11;

}  // namespace shardlab::test
