// The target id of a loss row that does not count (a masked position of instruction data): -100, PyTorch's
// ignore_index, which Hugging Face labels use for the same. The datasets write it; the cross-entropy ops skip it.
#pragma once

#include <cstdint>

namespace tandem {

inline constexpr int32_t kIgnoreTarget = -100;

}  // namespace tandem
