// Where each position's document begins, for the CPU attention kernels that keep attention inside documents
// (attention_gqa.cc, attention_pair.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/tensor.h"

namespace tandem::ops::cpu {

// starts (B, T): the first position of each position's document (documents (B, T), non-decreasing in T), or all 0
// without documents. Checked here, before the kernels' parallel regions (an exception must not leave one).
inline std::vector<int64_t> document_starts(const Tensor& documents, int64_t b, int64_t t) {
  std::vector<int64_t> starts(static_cast<size_t>(b * t), 0);
  if (!documents.defined()) return starts;
  const int32_t* ids = documents.i32();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 1; i < t; ++i) {
      const int32_t prev = ids[bi * t + i - 1], cur = ids[bi * t + i];
      if (cur < prev)
        TANDEM_FAIL("attention with documents: document id ", cur, " at position ", i, " of sequence ", bi, " follows ",
                    prev, ": ids must not decrease along a sequence (documents are packed in order)");
      starts[static_cast<size_t>(bi * t + i)] = cur == prev ? starts[static_cast<size_t>(bi * t + i - 1)] : i;
    }
  return starts;
}

}  // namespace tandem::ops::cpu
