// The longest-sequence search (`tandem plan --max-seq-len`) on a small llama whose answers the layout search itself
// can check:
//   - the answer fits (a candidate's peak is within the budget) and one step more does not;
//   - the limit stops it: the option's bound, or the model's max_position_embeddings (and Mistral's window);
//   - options that make no sense are refused before any length is tried, saying what to change;
//   - the yes/no search the lengths use stops at its first candidate that fits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "tandem/config/config.h"
#include "tandem/core/error.h"
#include "tandem/plan/max_seq_len.h"
#include "tandem/plan/search.h"
#include "tandem/plan/seq_len_model.h"

namespace tandem {
namespace {

using config::Json;

// 4 layers of 64, 4 query and 2 key/value heads, a vocabulary of 512; 4 sequences a step. `model` adds or replaces
// model keys.
Json small_llama(const Json& model = Json::object()) {
  Json m = {{"type", "llama"},          {"vocab_size", 512},       {"seq_len", 64},
            {"hidden_size", 64},        {"intermediate_size", 96}, {"num_hidden_layers", 4},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
  m.update(model);
  return {{"model", m}, {"train_batch_size", 4}};
}

// Two CPU devices of `memory` bytes, without offload: what fits is the devices' own answer.
plan::SearchOptions options(uint64_t memory) {
  plan::SearchOptions o;
  o.devices = 2;
  o.device_memory = memory;
  o.rates = plan::builtin_rates("cpu");
  o.cpu_threads = 1;
  o.global_batch = 4;
  o.offload = false;
  return o;
}

constexpr int64_t kStep = 64;

plan::SeqLenOptions seq_options(int64_t limit, const std::string& what = "--max-seq-len", bool asked = true) {
  plan::SeqLenOptions s;
  s.step = kStep;
  s.limit = {limit, what, asked};
  s.progress = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
  return s;
}

TEST(MaxSeqLen, TheAnswerFitsAndOneStepMoreDoesNot) {
  const plan::SeqLenModel model(small_llama());
  // A budget that the smallest candidate at 20 steps (1280 tokens) just meets: the answer is at least that, and the
  // lengths past it grow every candidate's activations and attention scratch until none fits.
  const plan::SearchResult at_1280 = plan::search_layouts(model.at(20 * kStep), options(0));
  int64_t least = at_1280.fit.front().memory.peak();
  for (const plan::Candidate& c : at_1280.fit) least = std::min(least, c.memory.peak());
  const plan::SearchOptions opt = options(static_cast<uint64_t>(least));

  const plan::SeqLenResult r = plan::search_max_seq_len(
      [&](int64_t t) { return model.at(t); }, opt, seq_options(plan::kDefaultSeqLenBound, "the default bound", false));
  std::printf("%s\n", plan::format_max_seq_len(r, opt).c_str());
  EXPECT_GE(r.longest, 20 * kStep);
  EXPECT_EQ(r.longest % kStep, 0);
  ASSERT_EQ(r.next, r.longest + kStep);

  // Checked by the search itself, every candidate at each length: the answer's fastest fits, nothing one step on does.
  const plan::SearchResult at = plan::search_layouts(model.at(r.longest), opt);
  ASSERT_FALSE(at.fit.empty());
  EXPECT_LE(at.fit.front().memory.peak(), least);
  EXPECT_EQ(r.at_longest.fit.front().name(), at.fit.front().name());
  const plan::SearchResult past = plan::search_layouts(model.at(r.next), opt);
  EXPECT_TRUE(past.fit.empty());
  EXPECT_GT(past.no_fit.front().memory.peak(), least);
  EXPECT_FALSE(r.at_next.no_fit.empty());

  // Doubling then bisection: a few lengths for 16,384 multiples of the step, not hundreds.
  const double doublings = std::log2(static_cast<double>(r.next) / kStep);
  EXPECT_LE(static_cast<double>(r.probes.size()), 2 * std::ceil(doublings) + 1);
  const std::string text = plan::format_max_seq_len(r, opt);
  EXPECT_NE(text.find("Longest seq_len that fits: " + std::to_string(r.longest)), std::string::npos) << text;
  EXPECT_NE(text.find("What stops seq_len " + std::to_string(r.next)), std::string::npos) << text;
  EXPECT_NE(text.find("on stage "), std::string::npos) << text;  // the device the closest candidate is over on
  EXPECT_NE(text.find("push it"), std::string::npos) << text;    // and the term that pushes it over
}

TEST(MaxSeqLen, TheOptionsBoundStopsTheSearch) {
  const plan::SeqLenModel model(small_llama());
  const plan::SearchOptions opt = options(uint64_t{64} << 30);  // room for every length up to the bound
  // 700 is not a multiple of the step: the longest length tried is 640.
  const plan::SeqLenResult r =
      plan::search_max_seq_len([&](int64_t t) { return model.at(t); }, opt, seq_options(700, "--max-seq-len 700"));
  EXPECT_EQ(r.last, 640);
  EXPECT_EQ(r.longest, 640);
  EXPECT_EQ(r.next, 0);
  const std::string text = plan::format_max_seq_len(r, opt);
  std::printf("%s\n", text.c_str());
  EXPECT_NE(text.find("--max-seq-len 700"), std::string::npos) << text;
  EXPECT_NE(text.find("rounded down"), std::string::npos) << text;
}

TEST(MaxSeqLen, MaxPositionEmbeddingsBoundsTheModel) {
  // Stated, it is the model's limit; a longer length is refused in the config's own words.
  const plan::SeqLenModel stated(small_llama({{"max_position_embeddings", 512}}));
  EXPECT_EQ(stated.limit().tokens, 512);
  EXPECT_EQ(stated.limit().what, "model.max_position_embeddings");
  EXPECT_EQ(stated.at(512).sample_shape, (Shape{512}));
  EXPECT_THROW(stated.at(576), Error);
  const plan::SearchOptions opt = options(uint64_t{64} << 30);
  const plan::SeqLenResult r =
      plan::search_max_seq_len([&](int64_t t) { return stated.at(t); }, opt, seq_options(512, stated.limit().what));
  EXPECT_EQ(r.longest, 512);
  EXPECT_EQ(r.next, 0);
  const std::string text = plan::format_max_seq_len(r, opt);
  std::printf("%s\n", text.c_str());
  EXPECT_NE(text.find("model.max_position_embeddings"), std::string::npos) << text;
  EXPECT_NE(text.find("no positions past it"), std::string::npos) << text;

  // Left out, it is seq_len's: it grows with the lengths tried, and the model sets no limit.
  const plan::SeqLenModel unstated(small_llama());
  EXPECT_EQ(unstated.limit().tokens, 0);
  EXPECT_EQ(unstated.at(4096).sample_shape, (Shape{4096}));

  // Mistral attends within its window, Tandem's attention is full: the window bounds the length too.
  const plan::SeqLenModel mistral(
      small_llama({{"family", "mistral"}, {"max_position_embeddings", 4096}, {"sliding_window", 256}}));
  EXPECT_EQ(mistral.limit().tokens, 256);
  EXPECT_NE(mistral.limit().what.find("sliding_window"), std::string::npos);
}

TEST(MaxSeqLen, NonsenseIsRefusedBeforeAnyLengthIsTried) {
  const plan::SeqLenModel model(small_llama());
  int built = 0;
  auto model_at = [&](int64_t t) {
    ++built;
    return model.at(t);
  };
  auto refused = [&](const plan::SearchOptions& opt, const plan::SeqLenOptions& s, const std::string& says) {
    try {
      plan::search_max_seq_len(model_at, opt, s);
      ADD_FAILURE() << "not refused; expected a message with " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  const plan::SearchOptions opt = options(uint64_t{1} << 30);
  refused(opt, seq_options(32), "--seq-len-step 32 or less, or --max-seq-len 64 or more");  // a bound below the step
  plan::SeqLenOptions zero = seq_options(4096);
  zero.step = 0;
  refused(opt, zero, "give a positive number of tokens");
  refused(options(0), seq_options(4096), "--device-memory");  // no budget: every length would fit
  EXPECT_EQ(built, 0);
  // A model of feature vectors has no length to search.
  const plan::SeqLenModel mlp(Json{{"model", {{"type", "mlp"}, {"sizes", {8, 4}}}}, {"train_batch_size", 4}});
  EXPECT_THROW(mlp.limit(), Error);
}

TEST(MaxSeqLen, NothingFitsAtTheFirstStepSaysWhatStopsIt) {
  const plan::SeqLenModel model(small_llama());
  const plan::SearchOptions opt = options(uint64_t{1} << 20);  // 1 MiB: the training state alone is more
  const plan::SeqLenResult r =
      plan::search_max_seq_len([&](int64_t t) { return model.at(t); }, opt, seq_options(4096, "--max-seq-len 4096"));
  EXPECT_EQ(r.longest, 0);
  EXPECT_EQ(r.next, kStep);
  EXPECT_EQ(r.probes.size(), 1u);
  const std::string text = plan::format_max_seq_len(r, opt);
  std::printf("%s\n", text.c_str());
  EXPECT_NE(text.find("Nothing fits even at seq_len 64"), std::string::npos) << text;
  EXPECT_NE(text.find("resident state alone"), std::string::npos) << text;
}

TEST(MaxSeqLen, TheYesNoSearchStopsAtTheFirstCandidateThatFits) {
  const plan::SeqLenModel model(small_llama());
  plan::SearchOptions opt = options(uint64_t{64} << 30);
  const plan::SearchResult all = plan::search_layouts(model.at(256), opt);
  opt.first_fit_only = true;
  const plan::SearchResult first = plan::search_layouts(model.at(256), opt);
  ASSERT_EQ(first.fit.size(), 1u);
  EXPECT_TRUE(first.no_fit.empty());  // with room for all, the first candidate tried fits
  EXPECT_GT(all.fit.size(), 1u);
}

}  // namespace
}  // namespace tandem
