// The lengths `tandem plan --max-seq-len` tries: the config's model with its seq_len replaced, validated as the
// config with `--set model.seq_len=T` is (so every rule that depends on the length holds: a llama's
// max_position_embeddings, Mistral's sliding window), and the longest sequence the model itself allows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/plan/planned_model.h"

namespace tandem::plan {

// The longest sequence a search may try, and what sets it, in words ("model.max_position_embeddings",
// "--max-seq-len").
struct SeqLenLimit {
  int64_t tokens = 0;
  std::string what;
  bool asked = false;  // the bound --max-seq-len N gave (a longer one may be asked for), not the model's
};

// The search's bound for a model whose positions do not bound it (a gpt's learned table grows with seq_len; a llama
// config that states no max_position_embeddings takes seq_len for it): 1M tokens. The config takes up to 2^24; past
// 2^20 a llama's rotary tables, made on the host at every build of the model, cost seconds a candidate, so longer
// searches are asked for by name (--max-seq-len N).
constexpr int64_t kDefaultSeqLenBound = int64_t{1} << 20;
// The longest model.seq_len a config takes (config/schema.cc).
constexpr int64_t kLargestSeqLen = int64_t{1} << 24;

class SeqLenModel {
 public:
  // `as_written`: a config object as read, with its overrides applied but not validated, because a key left out there
  // is one the model does not state (a llama without max_position_embeddings gets seq_len for it, so its positions
  // grow with the candidates; a stated one bounds them).
  explicit SeqLenModel(config::Json as_written);
  // The config file with its --set overrides, read as `tandem plan` reads it.
  static SeqLenModel from_file(const std::string& path, const std::vector<std::string>& overrides);

  // The model at `seq_len` tokens as the planner builds it, with the config's LoRA and FP8 settings. Throws Error,
  // with the config's own words, when the config refuses that length.
  PlannedModel at(int64_t seq_len) const;

  // The longest sequence the model allows: a llama's max_position_embeddings where the config (or the Hugging Face
  // folder it is read from) states it, taken as it is: the search assumes no rope scaling beyond what the config
  // has; Mistral's sliding_window (Tandem's attention is full); a Hugging Face gpt's n_positions (its position table
  // has that many rows). Tokens 0 when the model has no limit of its own (the caller's bound, or
  // kDefaultSeqLenBound, applies). Throws Error for a model without a sequence (mlp).
  SeqLenLimit limit() const;

 private:
  config::Json as_written_;
};

}  // namespace tandem::plan
