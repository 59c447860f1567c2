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

std::unique_ptr<Dataset> make_dataset(const config::Json& data_cfg, const config::ModelIO& io, uint64_t seed) {
  // Accept the object before validation too, using the schema's defaults.
  const std::string type = data_cfg.value("type", std::string("synthetic"));
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

  if (type == "synthetic") {
    const int64_t samples = data_cfg.value("samples", int64_t{65536});
    if (samples < 1) TANDEM_FAIL("data.samples must be a positive integer, got ", samples);
    if (io.tokens) return make_synthetic_tokens(samples, io.seq_len, io.vocab_size, seed);
    return make_synthetic_classes(samples, io.features, io.classes, seed);
  }
  if (type != "text" && type != "tokens")
    TANDEM_FAIL("data.type '", type, "' is not known: use \"synthetic\", \"text\" or \"tokens\"");
  if (!io.tokens)
    TANDEM_FAIL("data.type '", type,
                "' yields token sequences, but the model takes feature vectors: use data.type \"synthetic\" or a gpt "
                "model");
  if (!data_cfg.contains("path") || !data_cfg.at("path").is_string())
    TANDEM_FAIL("data.type '", type, "' needs data.path, the file to read");
  const std::string path = data_cfg.at("path").get<std::string>();

  if (type == "text") {
    if (io.vocab_size < 256)
      TANDEM_FAIL("data.type 'text' uses the file's bytes as tokens (vocab 256), but model.vocab_size is ",
                  io.vocab_size, ": set model.vocab_size to at least 256");
    return make_window_dataset(type, path, 1, io.seq_len, io.vocab_size, seed);
  }
  const std::string dtype = data_cfg.value("dtype", std::string("uint16"));
  if (dtype != "uint16" && dtype != "uint32")
    TANDEM_FAIL("data.dtype '", dtype, "' is not supported: use \"uint16\" or \"uint32\"");
  return make_window_dataset(type, path, dtype == "uint16" ? 2 : 4, io.seq_len, io.vocab_size, seed);
}

}  // namespace tandem::data
