// ops_check: ring attention's block pairs (ops/attention_pair.h) on the GPU against the CPU kernels on the same inputs:
// the forward's partial output and lse for a full pair (every key before every query), a causal pair (the same
// positions) and a pair inside documents (some rows seeing none of the block's keys: y 0, lse -inf on both sides), the
// backward's dq and dk | dv added into accumulators that start from the same values, and the merge (with parts and
// results that saw no key). Key blocks of 37 and 130 rows: one tile of 128 and more than one. Every output is f32; the
// 16-bit rows round the inputs, so both sides read the same values and only the summation orders differ.
#include <cmath>
#include <limits>

#include "ops_check.h"
#include "tandem/ops/attention_pair.h"
#include "tandem/ops/cpu/attention_pair.h"
#include "tandem/ops/cuda/attention_pair.h"

namespace tandem::ops_check {
namespace {

struct PairShape {
  int64_t b, n, h, kv, d;
};

// Documents (B, 2n) i32: a document ending a few rows into the query block, so that its first rows see the key block
// and the later ones do not.
Suite::Pair pair_documents(Suite& s, int64_t b, int64_t n) {
  std::vector<int32_t> v;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < 2 * n; ++i) v.push_back(static_cast<int32_t>(i >= n / 3) + (i >= n + 3 + bi));
  Suite::Pair p{Tensor::empty({b, 2 * n}, DType::I32, s.host(), "cpu documents"),
                Tensor::empty({b, 2 * n}, DType::I32, s.dev(), "gpu documents")};
  std::memcpy(p.cpu.i32(), v.data(), v.size() * sizeof(int32_t));
  p.gpu.copy_from_host(v.data());
  return p;
}

// Values rounded to t on both sides (the CPU side as f32): `cpu_values` of an f32 CPU tensor.
Suite::Pair rounded_pair(Suite& s, const Tensor& cpu_values, DType t) {
  return s.from_values(cpu_values.shape(), t, rounded(cpu_values.to_host_floats(), t));
}

}  // namespace

void check_attention_pair(Suite& s) {
  namespace ops = tandem::ops;
  for (DType t : kFloatTypes)
    for (const PairShape& p : {PairShape{2, 37, 4, 2, 64}, PairShape{1, 130, 6, 2, 128}, PairShape{2, 20, 3, 3, 16}})
      for (const char* kind : {"full", "causal", "documents"}) {
        const std::string shape = dims({p.b, p.n, p.h, p.kv, p.d}) + " " + kind;
        const int heads = static_cast<int>(p.h), kv_heads = static_cast<int>(p.kv);
        const std::string what = std::string(kind);
        s.run("attention_pair " + what, dtype_name(t), shape, [&] {
          auto q = s.make({p.b, p.n, p.h * p.d}, t, 401);
          auto kv = s.make({p.b, p.n, 2 * p.kv * p.d}, t, 402);
          Suite::Pair docs{Tensor(), Tensor()};
          if (what == "documents") docs = pair_documents(s, p.b, p.n);
          // Full and documents: the queries [n, 2n) over the keys [0, n); causal: both at [0, n).
          const int64_t q0 = what == "causal" ? 0 : p.n;
          const ops::PairPlace cpu_place{q0, 0, docs.cpu}, gpu_place{q0, 0, docs.gpu};
          auto y = s.output({p.b, p.n, p.h * p.d}, DType::F32);
          auto lse = s.output({p.b, p.h, p.n}, DType::F32);
          ops::cpu::attention_pair_forward(q.cpu, kv.cpu, heads, kv_heads, cpu_place, y.cpu, lse.cpu);
          ops::cuda::attention_pair_forward(q.gpu, kv.gpu, heads, kv_heads, gpu_place, y.gpu, lse.gpu);
          s.compare("attention_pair_forward y " + what, t, shape, y.gpu, y.cpu);
          // lse: -inf where a row saw none of the keys, on both sides alike; the finite ones compared.
          std::vector<float> got = lse.gpu.to_host_floats(), want = lse.cpu.to_host_floats();
          bool same_empty = true;
          for (size_t i = 0; i < want.size(); ++i) {
            const bool a = std::isinf(got[i]) && got[i] < 0, b = std::isinf(want[i]) && want[i] < 0;
            same_empty = same_empty && a == b;
            if (a || b) got[i] = want[i] = 0.0f;
          }
          s.row("attention_pair_forward lse " + what, dtype_name(t), shape,
                same_empty ? rel_error(got, want) : INFINITY, gpu_check::kOpF32,
                same_empty ? "" : "rows without keys differ");
          // The backward with a final output and lse of this pair alone (what a ring of one block gives), dy random,
          // the accumulators starting from the same values.
          if (what == "documents") return;  // rows without keys have no final lse to recompute from
          auto out = rounded_pair(s, y.cpu, t);
          auto dy = s.make({p.b, p.n, p.h * p.d}, t, 403);
          auto dq = s.make({p.b, p.n, p.h * p.d}, DType::F32, 404);
          auto dkv = s.make({p.b, p.n, 2 * p.kv * p.d}, DType::F32, 405);
          ops::cpu::attention_pair_backward(q.cpu, kv.cpu, heads, kv_heads, cpu_place, out.cpu, lse.cpu, dy.cpu, dq.cpu,
                                            dkv.cpu);
          ops::cuda::attention_pair_backward(q.gpu, kv.gpu, heads, kv_heads, gpu_place, out.gpu, lse.gpu, dy.gpu,
                                             dq.gpu, dkv.gpu);
          s.compare("attention_pair_backward dq " + what, t, shape, dq.gpu, dq.cpu);
          s.compare("attention_pair_backward dkv " + what, t, shape, dkv.gpu, dkv.cpu);
        });
      }
  // The merge: a running result and a part, some rows of each with nothing yet (lse -inf, y 0).
  s.run("attention_merge", "f32", dims({2, 33, 4 * 16}), [&] {
    const int64_t b = 2, n = 33, h = 4, d = 16;
    auto y = s.make({b, n, h * d}, DType::F32, 410);
    auto y_part = s.make({b, n, h * d}, DType::F32, 411);
    std::vector<float> l = normals(b * h * n, 412), lp = normals(b * h * n, 413);
    const float none = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < l.size(); i += 7) l[i] = none;
    for (size_t i = 3; i < lp.size(); i += 5) lp[i] = none;
    auto lse = s.from_values({b, h, n}, DType::F32, l);
    auto lse_part = s.from_values({b, h, n}, DType::F32, lp);
    ops::cpu::attention_merge(y_part.cpu, lse_part.cpu, y.cpu, lse.cpu);
    ops::cuda::attention_merge(y_part.gpu, lse_part.gpu, y.gpu, lse.gpu);
    s.compare("attention_merge y", DType::F32, dims({b, n, h * d}), y.gpu, y.cpu);
    std::vector<float> got = lse.gpu.to_host_floats(), want = lse.cpu.to_host_floats();
    bool same_empty = true;
    for (size_t i = 0; i < want.size(); ++i) {
      const bool a = std::isinf(got[i]), c = std::isinf(want[i]);
      same_empty = same_empty && a == c;
      if (a || c) got[i] = want[i] = 0.0f;
    }
    s.row("attention_merge lse", "f32", dims({b, h, n}), same_empty ? rel_error(got, want) : INFINITY,
          gpu_check::kOpF32, same_empty ? "" : "rows without keys differ");
  });
}

}  // namespace tandem::ops_check
