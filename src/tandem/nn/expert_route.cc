#include "tandem/nn/expert_route.h"

#include "tandem/core/error.h"

namespace tandem::nn {

ExpertRoute plan_expert_route(const std::vector<std::vector<int64_t>>& counts, int slot) {
  const auto P = counts.size();
  TANDEM_CHECK(P > 0 && slot >= 0 && static_cast<size_t>(slot) < P, "expert slot ", slot, " of ", P);
  const size_t E = counts[0].size(), L = E / P, first = static_cast<size_t>(slot) * L;
  TANDEM_CHECK(E % P == 0, E, " experts over ", P, " expert slots");
  ExpertRoute r;
  r.send.assign(P, 0);
  r.recv.assign(P, 0);
  r.per_expert.assign(L, 0);
  for (size_t s = 0; s < P; ++s) {
    TANDEM_CHECK(counts[s].size() == E, "slot ", s, " counted ", counts[s].size(), " experts, not ", E);
    for (size_t e = 0; e < L; ++e) {
      r.recv[s] += counts[s][first + e];
      r.per_expert[e] += counts[s][first + e];
    }
  }
  const std::vector<int64_t>& mine = counts[static_cast<size_t>(slot)];
  for (size_t j = 0; j < P; ++j)
    for (size_t e = 0; e < L; ++e) r.send[j] += mine[j * L + e];
  // Expert e's rows start at the sum of the experts before it; inside them, slot s's follow the slots before it.
  std::vector<int64_t> next(L, 0);
  for (size_t e = 1; e < L; ++e) next[e] = next[e - 1] + r.per_expert[e - 1];
  int64_t total = 0;
  for (const int64_t n : r.per_expert) total += n;
  r.order.resize(static_cast<size_t>(total));
  r.inverse.resize(static_cast<size_t>(total));
  size_t i = 0;
  for (size_t s = 0; s < P; ++s)
    for (size_t e = 0; e < L; ++e)
      for (int64_t n = 0; n < counts[s][first + e]; ++n, ++i) {
        const auto j = static_cast<int32_t>(next[e]++);
        r.order[i] = j;
        r.inverse[static_cast<size_t>(j)] = static_cast<int32_t>(i);
      }
  return r;
}

}  // namespace tandem::nn
