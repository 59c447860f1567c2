// Datasets of token windows cut from one memory-mapped file: raw bytes ("text") or little-endian uint16 /
// uint32 token ids ("tokens"), either raw or in llm.c's format (a header of 256 int32: magic, version, token count;
// 20240520 / 1 for uint16 GPT-2 tokens, 20240801 / 7 for uint32 Llama 3 tokens). Tokenisation is not done here
// (tools/prepare_data.py writes such files).
// A loss mask beside a token file (PATH minus ".bin" plus ".mask.bin": the same header with magic 20240522, version 1
// and the token count, then one byte per token): byte i is 1 when token i, as a target, counts. A window of tokens
// [s, s + T] predicts tokens s+1 .. s+T, so target k counts when byte s+k+1 is 1; the others become kIgnoreTarget.
#include <algorithm>
#include <filesystem>
#include <memory>

#include "tandem/core/ignore_target.h"
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
    if (kind_ == "tokens") read_llmc_header();
    const size_t bytes = file_.size() - header_bytes_;
    if (file_.size() == 0) TANDEM_FAIL(what_, " '", path_, "' is empty: data.path must name a file with training data");
    if (bytes % static_cast<size_t>(element_size_) != 0)
      TANDEM_FAIL(what_, " '", path_, "' has ", group_digits(static_cast<int64_t>(bytes)), " bytes, not a multiple of ",
                  element_size_, " (data.dtype ", dtype_text(),
                  "): check data.dtype, or whether the file is truncated");
    tokens_ = static_cast<int64_t>(bytes / static_cast<size_t>(element_size_));
    if (tokens_ < seq_len_ + 1)
      TANDEM_FAIL(what_, " '", path_, "' holds ", group_digits(tokens_), " tokens (",
                  group_digits(static_cast<int64_t>(bytes)), " bytes), fewer than seq_len + 1 = ", seq_len_ + 1,
                  " needed for one window: use a longer file or a smaller model.seq_len");
    if (kind_ == "tokens") open_mask();
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
        if (k > 0) out[r * seq_len_ + k - 1] = counts(start + k) ? t : kIgnoreTarget;
      }
    }
    return b;
  }

  std::optional<int64_t> counted_targets(int64_t step, int64_t first, int64_t count) const override {
    if (!mask_) return std::nullopt;
    const int64_t starts = tokens_ - seq_len_;
    int64_t n = 0;
    for (int64_t r = 0; r < count; ++r) {
      const uint8_t* m = mask_bytes() + window_start(seed_, step, first + r, starts) + 1;  // targets s+1 .. s+T
      for (int64_t k = 0; k < seq_len_; ++k) n += m[k] != 0;
    }
    return n;
  }

  int64_t first_invalid(int part, int parts) const override {
    const int64_t begin = tokens_ * part / parts, end = tokens_ * (part + 1) / parts;
    // A mask byte other than 0 or 1 is reported as element tokens_ + its index, after every token.
    if (mask_)
      for (int64_t i = begin; i < end; ++i)
        if (mask_bytes()[i] > 1) return tokens_ + i;
    if (element_size_ == 1 && vocab_ >= 256) return -1;  // every byte is a valid id
    // Blocks of 1 Mi tokens: the maximum of each (a loop the compiler vectorises), then the exact position in the
    // first block whose maximum is out of range. Threads split the blocks; the lowest bad block wins.
    constexpr int64_t kBlock = int64_t{1} << 20;
    const int64_t blocks = (end - begin + kBlock - 1) / kBlock;
    int64_t first_bad_block = blocks;
    file_.advise_sequential(true);
#pragma omp parallel for schedule(dynamic, 16) reduction(min : first_bad_block)
    for (int64_t b = 0; b < blocks; ++b) {
      if (b >= first_bad_block) continue;
      const int64_t lo = begin + b * kBlock, hi = std::min(end, lo + kBlock);
      if (static_cast<int64_t>(block_max(lo, hi)) >= vocab_) first_bad_block = b;
    }
    file_.advise_sequential(false);
    if (first_bad_block == blocks) return -1;
    const int64_t lo = begin + first_bad_block * kBlock, hi = std::min(end, lo + kBlock);
    for (int64_t i = lo; i < hi; ++i)
      if (static_cast<int64_t>(raw_token(i)) >= vocab_) return i;
    return -1;  // not reached: the block's maximum was out of range
  }

  std::string describe_invalid(int64_t index) const override {
    if (index >= tokens_)
      return "loss mask '" + mask_path_ + "': byte " + std::to_string(mask_bytes()[index - tokens_]) + " at token " +
             group_digits(index - tokens_) + " (byte offset " + group_digits(kMaskHeaderBytes + index - tokens_) +
             ") is neither 0 nor 1: write it again with tools/prepare_data.py";
    return what_ + " '" + path_ + "': token id " + std::to_string(raw_token(index)) + " at index " +
           group_digits(index) + " (byte offset " +
           group_digits(static_cast<int64_t>(header_bytes_) + index * element_size_) + ") is >= model.vocab_size " +
           std::to_string(vocab_) +
           ": raise model.vocab_size or check data.dtype and the tokenizer that wrote the file";
  }

  uint64_t scanned_bytes() const override {
    const uint64_t mask = mask_ ? static_cast<uint64_t>(tokens_) : 0;
    return (element_size_ == 1 && vocab_ >= 256 ? 0 : static_cast<uint64_t>(tokens_) * element_size_) + mask;
  }

  std::string describe() const override {
    const int64_t bytes = static_cast<int64_t>(file_.size());
    if (kind_ == "text")
      return "text '" + path_ + "': " + format_bytes(file_.size()) + ", " + group_digits(bytes) + " bytes, vocab 256";
    return "tokens '" + path_ + "': " + format_bytes(file_.size()) + ", " + group_digits(tokens_) + " " + dtype_text() +
           " tokens" + (header_bytes_ ? " (llm.c format)" : "") + ", vocab " + group_digits(vocab_) +
           (mask_ ? "; loss mask '" + mask_path_ + "': " + group_digits(counted_targets_in_file()) +
                        " of its tokens count as targets"
                  : "");
  }

 private:
  std::string dtype_text() const { return element_size_ == 1 ? "uint8" : element_size_ == 2 ? "uint16" : "uint32"; }

  // An llm.c header, when the file starts with one: its magic and version give the token width, its count must
  // match the file's size. A raw file that happened to begin with a known magic would also have to carry the
  // right version and count, which is as good as impossible.
  void read_llmc_header() {
    constexpr size_t kHeaderBytes = 256 * 4;
    if (file_.size() < kHeaderBytes) return;
    int32_t h[3];
    for (int i = 0; i < 3; ++i) {
      const uint8_t* p = file_.data() + 4 * i;
      h[i] = static_cast<int32_t>(p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24);
    }
    int width = 0;
    if (h[0] == 20240520) width = 2;  // GPT-2 tokens, uint16
    if (h[0] == 20240801) width = 4;  // Llama 3 tokens, uint32
    if (width == 0) return;
    const int want_version = width == 2 ? 1 : 7;
    if (h[1] != want_version)
      TANDEM_FAIL(what_, " '", path_, "' has llm.c's magic ", h[0], " but version ", h[1], ", not the version ",
                  want_version,
                  " this magic comes with: the file is of a format Tandem does not "
                  "read; write it again with tools/prepare_data.py");
    const int64_t count = h[2];
    const int64_t expected = static_cast<int64_t>(kHeaderBytes) + count * width;
    if (count < 0 || expected != static_cast<int64_t>(file_.size()))
      TANDEM_FAIL(what_, " '", path_, "' (llm.c format) says it holds ", group_digits(count), " tokens (",
                  group_digits(expected), " bytes with its header) but has ",
                  group_digits(static_cast<int64_t>(file_.size())),
                  " bytes: the file is truncated or was written by another tool");
    header_bytes_ = kHeaderBytes;
    element_size_ = width;
  }

  // Token `index`, read little-endian whatever the host.
  uint32_t raw_token(int64_t index) const {
    const uint8_t* p = file_.data() + header_bytes_ + index * element_size_;
    uint32_t id = p[0];
    if (element_size_ >= 2) id |= static_cast<uint32_t>(p[1]) << 8;
    if (element_size_ == 4) id |= static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
    return id;
  }

  // The largest id among tokens [lo, hi).
  uint32_t block_max(int64_t lo, int64_t hi) const {
    const uint8_t* p = file_.data() + header_bytes_;
    if (element_size_ == 1) return *std::max_element(p + lo, p + hi);
    if (element_size_ == 2 && little_endian()) {
      uint16_t m = 0;
      const auto* t = reinterpret_cast<const uint16_t*>(p);  // page-aligned map, 1024-byte header: aligned
      for (int64_t i = lo; i < hi; ++i) m = std::max(m, t[i]);
      return m;
    }
    if (element_size_ == 4 && little_endian()) {
      uint32_t m = 0;
      const auto* t = reinterpret_cast<const uint32_t*>(p);
      for (int64_t i = lo; i < hi; ++i) m = std::max(m, t[i]);
      return m;
    }
    uint32_t m = 0;
    for (int64_t i = lo; i < hi; ++i) m = std::max(m, raw_token(i));
    return m;
  }

  static bool little_endian() {
    const uint16_t one = 1;
    return *reinterpret_cast<const uint8_t*>(&one) == 1;
  }

  // Token `index` as a model input; ids were checked once before training (first_invalid), and are checked
  // again here so a batch can never carry an id out of range.
  int32_t token(int64_t index) const {
    const uint32_t id = raw_token(index);
    if (static_cast<int64_t>(id) >= vocab_) TANDEM_FAIL(describe_invalid(index));
    return static_cast<int32_t>(id);
  }

  static constexpr int64_t kMaskHeaderBytes = 256 * 4;
  static constexpr int32_t kMaskMagic = 20240522;

  // The loss mask beside a token file, when there is one: its header checked against the tokens.
  void open_mask() {
    namespace fs = std::filesystem;
    const fs::path p(path_);
    if (p.extension() != ".bin") return;
    const fs::path mask = fs::path(p).replace_extension(".mask.bin");
    if (!fs::exists(mask)) return;
    mask_path_ = mask.string();
    mask_ = std::make_unique<MappedFile>(mask_path_, "loss mask");
    int32_t h[3] = {0, 0, 0};
    if (mask_->size() >= static_cast<size_t>(kMaskHeaderBytes))
      for (int i = 0; i < 3; ++i) {
        const uint8_t* b = mask_->data() + 4 * i;
        h[i] = static_cast<int32_t>(b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24);
      }
    if (h[0] != kMaskMagic || h[1] != 1)
      TANDEM_FAIL("loss mask '", mask_path_, "' beside '", path_, "' does not start with the mask header (magic ",
                  kMaskMagic, ", version 1): write both files again with tools/prepare_data.py, or remove the mask");
    if (h[2] != tokens_ || static_cast<int64_t>(mask_->size()) != kMaskHeaderBytes + tokens_)
      TANDEM_FAIL("loss mask '", mask_path_, "' says it holds ", group_digits(h[2]), " bytes (",
                  group_digits(static_cast<int64_t>(mask_->size()) - kMaskHeaderBytes), " after its header) but '",
                  path_, "' holds ", group_digits(tokens_),
                  " tokens: the two files are not a pair; write both again with "
                  "tools/prepare_data.py");
  }
  const uint8_t* mask_bytes() const { return mask_->data() + kMaskHeaderBytes; }
  int64_t counted_targets_in_file() const {
    int64_t n = 0;
    for (int64_t i = 0; i < tokens_; ++i) n += mask_bytes()[i] == 1;
    return n;
  }
  bool counts(int64_t index) const { return !mask_ || mask_bytes()[index] != 0; }

  std::string kind_;
  std::string what_;
  std::string path_;
  MappedFile file_;
  int element_size_;
  int64_t seq_len_;
  int64_t vocab_;
  uint64_t seed_;
  int64_t tokens_ = 0;
  size_t header_bytes_ = 0;  // 1024 for an llm.c file, else 0
  std::string mask_path_;
  std::unique_ptr<MappedFile> mask_;  // the loss mask beside a token file, or null
};

}  // namespace

std::unique_ptr<Dataset> make_window_dataset(const std::string& kind, const std::string& path, int element_size,
                                             int64_t seq_len, int64_t vocab, uint64_t seed) {
  return std::make_unique<WindowDataset>(kind, path, element_size, seq_len, vocab, seed);
}

}  // namespace tandem::data
