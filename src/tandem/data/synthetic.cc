// Synthetic datasets that need no file: labelled Gaussian features (mlp) and rule-following token
// sequences (gpt). Each sample is recomputed from Philox when asked for; nothing per sample is stored.
#include <numeric>
#include <vector>

#include "tandem/core/random_fill.h"
#include "tandem/data/datasets.h"
#include "tandem/data/sampler.h"

namespace tandem::data {
namespace {

// Labels come from a fixed random linear teacher, label = argmax_c (W x)_c, so a model can learn the
// mapping and its loss falls; W is the only stored state (classes x features).
class SyntheticClasses final : public Dataset {
 public:
  SyntheticClasses(int64_t samples, int64_t features, int64_t classes, uint64_t seed)
      : samples_(samples),
        features_(features),
        classes_(classes),
        seed_(seed),
        feature_stream_(hash_name("synthetic")),
        teacher_(static_cast<size_t>(classes * features)) {
    const uint64_t teacher_stream = hash_name("synthetic.teacher");
    for (size_t k = 0; k < teacher_.size(); ++k) teacher_[k] = normal_at(seed, teacher_stream, k);
  }

  Batch batch(int64_t step, int64_t first, int64_t count, Device& device) const override {
    TANDEM_CHECK(first >= 0 && count >= 0, "samples [", first, ", ", first + count, ")");
    Batch b{host_tensor({count, features_}, DType::F32, device, "batch inputs"),
            host_tensor({count}, DType::I32, device, "batch targets")};
    float* x = b.inputs.f32();
    int32_t* y = b.targets.i32();
    for (int64_t r = 0; r < count; ++r) {
      const uint64_t s = static_cast<uint64_t>(sample_index(seed_, step, first + r, samples_));
      float* row = x + r * features_;
      for (int64_t j = 0; j < features_; ++j)
        row[j] = normal_at(seed_, feature_stream_, s * static_cast<uint64_t>(features_) + static_cast<uint64_t>(j));
      int32_t best = 0;
      double best_score = 0;
      for (int64_t c = 0; c < classes_; ++c) {
        const float* w = teacher_.data() + c * features_;
        double score = 0;  // double, so the label does not hinge on summation order
        for (int64_t j = 0; j < features_; ++j) score += static_cast<double>(w[j]) * row[j];
        if (c == 0 || score > best_score) best = static_cast<int32_t>(c), best_score = score;
      }
      y[r] = best;
    }
    return b;
  }

  std::string describe() const override {
    return "synthetic classification: " + group_digits(samples_) + " samples, " + group_digits(features_) +
           " features, " + group_digits(classes_) + " classes (fixed random linear teacher)";
  }

 private:
  int64_t samples_, features_, classes_;
  uint64_t seed_;
  uint64_t feature_stream_;
  std::vector<float> teacher_;
};

// Sequence s starts at a random token and follows next = (a * t + c) mod vocab with a coprime to vocab:
// a bigram rule a model can learn, with every token reachable.
class SyntheticTokens final : public Dataset {
 public:
  SyntheticTokens(int64_t samples, int64_t seq_len, int64_t vocab, uint64_t seed)
      : samples_(samples), seq_len_(seq_len), vocab_(static_cast<uint64_t>(vocab)), seed_(seed) {
    const uint64_t rule_stream = hash_name("synthetic.tokens.rule");
    mult_ = 1;
    for (uint64_t k = 0; k < 64 && vocab_ > 2; ++k) {
      const uint64_t m = bits64_at(seed, rule_stream, k) % vocab_;
      if (m > 1 && std::gcd(m, vocab_) == 1) {
        mult_ = m;
        break;
      }
    }
    add_ = bits64_at(seed, rule_stream, 64) % vocab_;
  }

  Batch batch(int64_t step, int64_t first, int64_t count, Device& device) const override {
    TANDEM_CHECK(first >= 0 && count >= 0, "samples [", first, ", ", first + count, ")");
    Batch b{host_tensor({count, seq_len_}, DType::I32, device, "batch inputs"),
            host_tensor({count * seq_len_}, DType::I32, device, "batch targets")};
    int32_t* in = b.inputs.i32();
    int32_t* out = b.targets.i32();
    const uint64_t start_stream = hash_name("synthetic.tokens");
    for (int64_t r = 0; r < count; ++r) {
      const uint64_t s = static_cast<uint64_t>(sample_index(seed_, step, first + r, samples_));
      uint64_t t = bits64_at(seed_, start_stream, s) % vocab_;
      for (int64_t k = 0; k < seq_len_; ++k) {
        in[r * seq_len_ + k] = static_cast<int32_t>(t);
        t = (mult_ * t + add_) % vocab_;
        out[r * seq_len_ + k] = static_cast<int32_t>(t);
      }
    }
    return b;
  }

  std::string describe() const override {
    return "synthetic tokens: " + group_digits(samples_) + " sequences of " + group_digits(seq_len_ + 1) +
           " tokens, vocab " + group_digits(static_cast<int64_t>(vocab_)) + " (fixed random bigram rule)";
  }

 private:
  int64_t samples_, seq_len_;
  uint64_t vocab_;
  uint64_t seed_;
  uint64_t mult_ = 1, add_ = 0;
};

}  // namespace

std::unique_ptr<Dataset> make_synthetic_classes(int64_t samples, int64_t features, int64_t classes, uint64_t seed) {
  return std::make_unique<SyntheticClasses>(samples, features, classes, seed);
}

std::unique_ptr<Dataset> make_synthetic_tokens(int64_t samples, int64_t seq_len, int64_t vocab, uint64_t seed) {
  return std::make_unique<SyntheticTokens>(samples, seq_len, vocab, seed);
}

}  // namespace tandem::data
