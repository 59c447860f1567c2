// Internal to tandem_data: the concrete datasets behind make_dataset() and helpers they share.
// The public interface is dataset.h.
#pragma once

#include <memory>
#include <string>

#include "tandem/data/dataset.h"

namespace tandem::data {

// Synthetic classification: N(0,1) features labelled by a fixed random linear teacher.
std::unique_ptr<Dataset> make_synthetic_classes(int64_t samples, int64_t features, int64_t classes, uint64_t seed);
// Synthetic token sequences that follow a fixed random bigram rule, for gpt models without a data file.
std::unique_ptr<Dataset> make_synthetic_tokens(int64_t samples, int64_t seq_len, int64_t vocab, uint64_t seed);
// Windows of seq_len+1 tokens from a file: bytes ("text", element_size 1) or little-endian ids ("tokens").
std::unique_ptr<Dataset> make_window_dataset(const std::string& kind, const std::string& path, int element_size,
                                             int64_t seq_len, int64_t vocab, uint64_t seed);

// Batch tensors live on `device`, which the datasets write directly, so it must be host memory.
Tensor host_tensor(const Shape& shape, DType dtype, Device& device, const char* what);

// 1258291 -> "1,258,291".
std::string group_digits(int64_t n);

}  // namespace tandem::data
