// make_dataset(): from the "data" config and the model's inputs to a concrete Dataset, with the checks that
// need both. The datasets themselves are in synthetic.cc and window.cc.
#include "tandem/data/dataset.h"

#include "tandem/core/error.h"
#include "tandem/data/datasets.h"

namespace tandem::data {

Tensor host_tensor(const Shape& shape, DType dtype, Device& device, const char* what) {
  // The datasets write through raw pointers; a device without host-visible memory needs a staging copy,
  // which the Device interface does not offer yet.
  if (device.kind() != DeviceKind::Cpu)
    TANDEM_FAIL("datasets write batches into host memory, but ", device.name(),
                " is not a CPU device: build the batch on a CPU device and copy it over");
  return Tensor::empty(shape, dtype, device, what);
}

std::string group_digits(int64_t n) {
  const uint64_t magnitude = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  const std::string digits = std::to_string(magnitude);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

Tensor document_ids(const Tensor& inputs, int64_t eos_token_id, Device& device) {
  TANDEM_CHECK(inputs.rank() == 2 && inputs.dtype() == DType::I32, "documents of inputs ", shape_str(inputs.shape()));
  const int64_t b = inputs.dim(0), t = inputs.dim(1);
  Tensor docs = host_tensor({b, t}, DType::I32, device, "batch documents");  // (B, T)
  const int32_t* in = inputs.i32();
  int32_t* out = docs.i32();
  for (int64_t r = 0; r < b; ++r) {
    int32_t doc = 0;
    for (int64_t k = 0; k < t; ++k) {
      out[r * t + k] = doc;
      if (in[r * t + k] == eos_token_id) ++doc;
    }
  }
  return docs;
}

std::unique_ptr<Dataset> make_dataset(const spec::DataConfig& data_cfg, const spec::ModelIO& io, uint64_t seed) {
  using spec::DataType;
  if (io.tokens) {
    if (io.seq_len < 1 || io.vocab_size < 1)
      TANDEM_FAIL("a token model needs seq_len >= 1 and vocab_size >= 1, got seq_len ", io.seq_len, ", vocab_size ",
                  io.vocab_size);
    // Token ids become i32 tensors.
    if (io.vocab_size > (int64_t{1} << 31))
      TANDEM_FAIL("model.vocab_size ", io.vocab_size, " exceeds 2^31, the range of the i32 token tensors");
  } else if (io.features < 1 || io.classes < 1) {
    TANDEM_FAIL("a classifier needs features >= 1 and classes >= 1, got ", io.features, " features, ", io.classes,
                " classes");
  }

  if (data_cfg.type == DataType::Synthetic) {
    const int64_t samples = data_cfg.samples;
    if (samples < 1) TANDEM_FAIL("data.samples must be a positive integer, got ", samples);
    if (io.tokens) return make_synthetic_tokens(samples, io.seq_len, io.vocab_size, seed);
    return make_synthetic_classes(samples, io.features, io.classes, seed);
  }
  const std::string type = data_cfg.type == DataType::Text ? "text" : "tokens";
  if (!io.tokens)
    TANDEM_FAIL("data.type '", type,
                "' yields token sequences, but the model takes feature vectors: use data.type \"synthetic\" or a gpt "
                "model");
  if (data_cfg.path.empty()) TANDEM_FAIL("data.type '", type, "' needs data.path, the file to read");

  if (data_cfg.type == DataType::Text) {
    if (io.vocab_size < 256)
      TANDEM_FAIL("data.type 'text' uses the file's bytes as tokens (vocab 256), but model.vocab_size is ",
                  io.vocab_size, ": set model.vocab_size to at least 256");
    return make_window_dataset(type, data_cfg.path, 1, io.seq_len, io.vocab_size, seed);
  }
  if (data_cfg.token_bytes != 2 && data_cfg.token_bytes != 4)
    TANDEM_FAIL("data.dtype of ", data_cfg.token_bytes, " bytes is not supported: use \"uint16\" or \"uint32\"");
  return make_window_dataset(type, data_cfg.path, data_cfg.token_bytes, io.seq_len, io.vocab_size, seed);
}

}  // namespace tandem::data
