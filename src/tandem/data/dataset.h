// Training data: the Dataset interface, its batch layout, and the factory from the "data" config.
// It decides which samples a step sees; it does not shard them over ranks (callers pass global indices).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tandem/core/tensor.h"
#include "tandem/spec/model_config.h"
#include "tandem/spec/train.h"

namespace tandem::data {

// inputs: gpt -> (B, T) i32 tokens; mlp -> (B, F) f32 features.
// targets: gpt -> (B*T) i32 next tokens; mlp -> (B) i32 classes. With a loss mask, a target that does not count is
// kIgnoreTarget (core/ignore_target.h).
struct Batch {
  Tensor inputs;
  Tensor targets;
};

// documents (B, T) i32 on `device` (host memory) for token inputs (B, T): each position's document within its window,
// counting the `eos_token_id` tokens before it (a document's end of sequence is its own last token).
Tensor document_ids(const Tensor& inputs, int64_t eos_token_id, Device& device);

class Dataset {
 public:
  virtual ~Dataset() = default;
  // The `count` samples with global indices first .. first+count-1 of step `step`, on `device` (which must
  // be host-visible). Sample (step, i) depends only on (seed, step, i): the same whatever the layout or the
  // micro-batching.
  virtual Batch batch(int64_t step, int64_t first, int64_t count, Device& device) const = 0;
  // One line, e.g. "text 'x.txt': 1.2 MiB, 1,258,291 bytes, vocab 256".
  virtual std::string describe() const = 0;

  // The check made once before training, so bad data fails before step 1 rather than when a batch reaches it:
  // part `part` of `parts` equal parts of the data (each rank scans one) is scanned, returning the index of its
  // first invalid element (a token id >= the vocabulary), or -1. Datasets that make their data return -1.
  virtual int64_t first_invalid(int part, int parts) const { return -1; }
  // What is wrong with element `index` (one that first_invalid returned), as an error message.
  virtual std::string describe_invalid(int64_t index) const { return "element " + std::to_string(index); }
  // Bytes first_invalid scans in all (0: no scan), for the progress line.
  virtual uint64_t scanned_bytes() const { return 0; }

  // With a loss mask: how many targets of samples first .. first+count-1 of step `step` count (the loss's normaliser,
  // known before the step). Without one, nullopt: every target counts.
  virtual std::optional<int64_t> counted_targets(int64_t step, int64_t first, int64_t count) const {
    return std::nullopt;
  }
};

// Builds the dataset the config's "data" describes for a model that consumes `io`
// (spec::model_io, or stated by a model built in code). Throws when the data does not fit the model.
std::unique_ptr<Dataset> make_dataset(const spec::DataConfig& data_cfg, const spec::ModelIO& io, uint64_t seed);

}  // namespace tandem::data
