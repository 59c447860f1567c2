// Fuzz target for the token-file dataset: make_dataset() on a "tokens" file holding the input's bytes, then
// a couple of batches. The first byte picks the dtype (even: uint16, odd: uint32); the rest is the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness.h"
#include "tandem/core/error.h"
#include "tandem/data/dataset.h"
#include "tandem/device/cpu_device.h"

namespace {

// Small on purpose: short files already make full windows, and most random ids fall outside the vocab.
constexpr int64_t kSeqLen = 8;
constexpr int64_t kVocab = 1000;
constexpr int64_t kCount = 2;

// A batch's inputs and targets are the same windows shifted by one token, with every id in the vocab.
void check_batch(const tandem::data::Batch& b, int64_t step) {
  const std::string at = "step " + std::to_string(step) + ": ";
  if (b.inputs.shape() != tandem::Shape{kCount, kSeqLen} || b.targets.shape() != tandem::Shape{kCount * kSeqLen})
    tandem::fuzz::violated(at + "batch shapes " + tandem::shape_str(b.inputs.shape()) + " and " +
                           tandem::shape_str(b.targets.shape()));
  const int32_t* in = b.inputs.i32();
  const int32_t* out = b.targets.i32();
  for (int64_t i = 0; i < kCount * kSeqLen; ++i)
    if (in[i] < 0 || in[i] >= kVocab || out[i] < 0 || out[i] >= kVocab)
      tandem::fuzz::violated(at + "token id outside [0, " + std::to_string(kVocab) + ") at " + std::to_string(i));
  for (int64_t r = 0; r < kCount; ++r)
    for (int64_t k = 0; k + 1 < kSeqLen; ++k)
      if (in[r * kSeqLen + k + 1] != out[r * kSeqLen + k])
        tandem::fuzz::violated(at + "targets are not the inputs shifted by one in row " + std::to_string(r));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const tandem::fuzz::ScratchFile file("tokens");
  static tandem::device::CpuDevice cpu;
  file.write(data + 1, size - 1);

  tandem::spec::DataConfig cfg;
  cfg.type = tandem::spec::DataType::Tokens;
  cfg.path = file.path();
  cfg.token_bytes = data[0] % 2 == 0 ? 2 : 4;
  const tandem::spec::ModelIO io{/*tokens=*/true, kSeqLen, kVocab, /*features=*/0, /*classes=*/0};
  // Bad files (empty, odd length, too short, ids past the vocab) are tandem::Errors; anything else escapes.
  try {
    const auto dataset = tandem::data::make_dataset(cfg, io, /*seed=*/1234);
    (void)dataset->describe();
    for (int64_t step = 0; step < 2; ++step) check_batch(dataset->batch(step, 0, kCount, cpu), step);
  } catch (const tandem::Error&) {
  }
  return 0;
}
