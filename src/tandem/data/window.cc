// Datasets of token windows cut from one memory-mapped file: raw bytes ("text") or little-endian uint16 /
// uint32 token ids ("tokens"). Tokenisation is not done here; a tokens file is already tokenised.
#include "tandem/core/units.h"
#include "tandem/data/datasets.h"
#include "tandem/data/mapped_file.h"
#include "tandem/data/sampler.h"

namespace tandem::data {
namespace {

class WindowDataset final : public Dataset {
 public:
  WindowDataset(const std::string& kind, const std::string& path, int element_size, int64_t seq_len, int64_t vocab,
                uint64_t seed)
      : kind_(kind),
        what_(kind == "text" ? "text file" : "token file"),
        path_(path),
        file_(path, what_),
        element_size_(element_size),
        seq_len_(seq_len),
        vocab_(vocab),
        seed_(seed) {
    const size_t bytes = file_.size();
    if (bytes == 0) TANDEM_FAIL(what_, " '", path_, "' is empty: data.path must name a file with training data");
    if (bytes % static_cast<size_t>(element_size_) != 0)
      TANDEM_FAIL(what_, " '", path_, "' has ", group_digits(static_cast<int64_t>(bytes)), " bytes, not a multiple of ",
                  element_size_, " (data.dtype ", dtype_text(),
                  "): check data.dtype, or whether the file is truncated");
    tokens_ = static_cast<int64_t>(bytes / static_cast<size_t>(element_size_));
    if (tokens_ < seq_len_ + 1)
      TANDEM_FAIL(what_, " '", path_, "' holds ", group_digits(tokens_), " tokens (",
                  group_digits(static_cast<int64_t>(bytes)), " bytes), fewer than seq_len + 1 = ", seq_len_ + 1,
                  " needed for one window: use a longer file or a smaller model.seq_len");
  }

  Batch batch(int64_t step, int64_t first, int64_t count, Device& device) const override {
    TANDEM_CHECK(first >= 0 && count >= 0, "samples [", first, ", ", first + count, ")");
    Batch b{host_tensor({count, seq_len_}, DType::I32, device, "batch inputs"),
            host_tensor({count * seq_len_}, DType::I32, device, "batch targets")};
    int32_t* in = b.inputs.i32();
    int32_t* out = b.targets.i32();
    const int64_t starts = tokens_ - seq_len_;  // windows of seq_len + 1 tokens
    for (int64_t r = 0; r < count; ++r) {
      const int64_t start = window_start(seed_, step, first + r, starts);
      for (int64_t k = 0; k <= seq_len_; ++k) {
        const int32_t t = token(start + k);
        if (k < seq_len_) in[r * seq_len_ + k] = t;
        if (k > 0) out[r * seq_len_ + k - 1] = t;
      }
    }
    return b;
  }

  std::string describe() const override {
    const int64_t bytes = static_cast<int64_t>(file_.size());
    if (kind_ == "text")
      return "text '" + path_ + "': " + format_bytes(file_.size()) + ", " + group_digits(bytes) + " bytes, vocab 256";
    return "tokens '" + path_ + "': " + format_bytes(file_.size()) + ", " + group_digits(tokens_) + " " + dtype_text() +
           " tokens, vocab " + group_digits(vocab_);
  }

 private:
  std::string dtype_text() const { return element_size_ == 1 ? "uint8" : element_size_ == 2 ? "uint16" : "uint32"; }

  // Token `index`, read little-endian whatever the host; ids are checked here, lazily, so a huge file is
  // never scanned whole.
  int32_t token(int64_t index) const {
    const uint8_t* p = file_.data() + index * element_size_;
    uint32_t id = p[0];
    if (element_size_ >= 2) id |= static_cast<uint32_t>(p[1]) << 8;
    if (element_size_ == 4) id |= static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
    if (static_cast<int64_t>(id) >= vocab_)
      TANDEM_FAIL(what_, " '", path_, "': token id ", id, " at index ", group_digits(index), " (byte offset ",
                  group_digits(index * element_size_), ") is >= model.vocab_size ", vocab_,
                  ": raise model.vocab_size or check data.dtype and the tokenizer that wrote the file");
    return static_cast<int32_t>(id);
  }

  std::string kind_;
  std::string what_;
  std::string path_;
  MappedFile file_;
  int element_size_;
  int64_t seq_len_;
  int64_t vocab_;
  uint64_t seed_;
  int64_t tokens_ = 0;
};

}  // namespace

std::unique_ptr<Dataset> make_window_dataset(const std::string& kind, const std::string& path, int element_size,
                                             int64_t seq_len, int64_t vocab, uint64_t seed) {
  return std::make_unique<WindowDataset>(kind, path, element_size, seq_len, vocab, seed);
}

}  // namespace tandem::data
