// ExpertRoute: the host's plan of one mixture-of-experts layer's exchange under expert parallelism (moe.h). Each slot
// sorts its routed rows by expert, so the rows for slot j's experts are one run; a slot receives from every slot the
// rows of its own experts, slot by slot, and regroups them expert by expert for the experts' products. Legend: P slots,
// E experts, L = E / P each slot's (slot j holds experts [j L, (j + 1) L)), R rows this slot receives.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::nn {

struct ExpertRoute {
  std::vector<int64_t> send;        // (P): rows this slot sends each slot: its tokens' rows for that slot's experts
  std::vector<int64_t> recv;        // (P): rows this slot receives from each slot
  std::vector<int64_t> per_expert;  // (L): rows of each of this slot's experts, from every slot
  // (R): where received row i (slot-major: slot 0's rows for this slot's experts in expert order, then slot 1's, ...)
  // sits in the expert-major order (expert 0's rows from slots 0, 1, ..., then expert 1's, ...).
  std::vector<int32_t> order;
  // (R): the received row that expert-major row j came from (order's inverse).
  std::vector<int32_t> inverse;
  int64_t received() const { return static_cast<int64_t>(order.size()); }  // R
};

// `counts` (P, E): slot s's rows for expert e (every slot's ops::moe_expert_rows). `slot`: this slot.
ExpertRoute plan_expert_route(const std::vector<std::vector<int64_t>>& counts, int slot);

}  // namespace tandem::nn
