// Breakdown: device bytes by what they hold, the vocabulary every planner prediction is given in.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace tandem::plan {

enum class Term {
  Parameters,     // fp32 values (stage 0-2: full, padded to a multiple of dp; stage 3: the owned shard), and a
                  // compute-dtype working copy when the compute dtype is narrower than fp32
  Gradients,      // fp32 full gradients (stage 0, 1) and the owned reduced shard (stage 1-3)
  Optimizer,      // AdamW moments, fp32, for the elements this rank updates
  ZeroBuffers,    // ZeRO's transients: a layer's gathered values (stage 3), its full gradient (stage 2, 3)
  Activations,    // what forward keeps for backward (each layer's Saved and the tensors passed between layers)
  Transient,      // alive within one layer's forward or backward only: op scratch, gradients in flight,
                  // recomputed activations, the logits and their gradient
  Communication,  // pipeline receive buffers and sent tensors (the executor holds sends until the step ends)
  Other,          // the data batch and fixed workspaces
};
inline constexpr int kTerms = 8;

const char* term_name(Term t);  // "parameters", "gradients", ...

struct Breakdown {
  std::array<int64_t, kTerms> bytes{};

  int64_t& operator[](Term t) { return bytes[static_cast<int>(t)]; }
  int64_t operator[](Term t) const { return bytes[static_cast<int>(t)]; }
  int64_t total() const {
    int64_t s = 0;
    for (int64_t b : bytes) s += b;
    return s;
  }
  Breakdown& operator+=(const Breakdown& o) {
    for (int i = 0; i < kTerms; ++i) bytes[i] += o.bytes[i];
    return *this;
  }
  Breakdown& operator-=(const Breakdown& o) {
    for (int i = 0; i < kTerms; ++i) bytes[i] -= o.bytes[i];
    return *this;
  }
  friend Breakdown operator+(Breakdown a, const Breakdown& b) { return a += b; }
  friend Breakdown operator-(Breakdown a, const Breakdown& b) { return a -= b; }
  Term largest() const;  // the term holding the most bytes
  // "parameters 1.2 GiB, gradients 1.2 GiB, ..." (terms of zero bytes left out)
  std::string describe() const;
};

}  // namespace tandem::plan
