#include "tandem/plan/seq_len_model.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "tandem/config/hf_config.h"
#include "tandem/core/error.h"

namespace tandem::plan {

namespace {

// The config at `seq_len` tokens, validated and typed as `tandem plan --set model.seq_len=T` reads it.
config::TrainConfig config_at(const config::Json& as_written, int64_t seq_len) {
  config::Json cfg = as_written;
  config::apply_override(cfg, "model.seq_len=" + std::to_string(seq_len));
  try {
    return config::parse(config::validate(std::move(cfg)));
  } catch (const Error& e) {
    TANDEM_FAIL("the config with model.seq_len ", seq_len, ": ", e.what());
  }
}

}  // namespace

SeqLenModel::SeqLenModel(config::Json as_written) : as_written_(std::move(as_written)) {
  if (!as_written_.is_object() || !as_written_.contains("model") || !as_written_.at("model").is_object())
    TANDEM_FAIL("--max-seq-len: the config has no \"model\" object whose seq_len to search");
}

SeqLenModel SeqLenModel::from_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TANDEM_FAIL("cannot open config file '", path, "': check the path (", std::strerror(errno), ")");
  std::ostringstream text;
  text << in.rdbuf();
  config::Json cfg = config::parse_config_text(text.str(), "config file '" + path + "'");
  for (const std::string& o : overrides) config::apply_override(cfg, o);
  return SeqLenModel(std::move(cfg));
}

PlannedModel SeqLenModel::at(int64_t seq_len) const {
  const config::TrainConfig tc = config_at(as_written_, seq_len);
  return planned_model(tc.model, tc.lora, tc.fp8);
}

SeqLenLimit SeqLenModel::limit() const {
  const config::Json& written = as_written_.at("model");
  // Validated at its own seq_len: the Hugging Face folder of from_pretrained read, every default filled.
  const config::TrainConfig tc = config::parse(config::validate(as_written_));
  const bool pretrained = written.contains("from_pretrained");
  const std::string folder = pretrained ? written.at("from_pretrained").get<std::string>() : "";
  SeqLenLimit limit;  // none of its own
  if (std::holds_alternative<spec::MlpConfig>(tc.model))
    TANDEM_FAIL("--max-seq-len: model.type \"mlp\" reads feature vectors, not sequences: it has no seq_len to search");
  if (std::holds_alternative<spec::GptConfig>(tc.model) && pretrained) {
    // The folder's position table has n_positions rows (transformers' default 1024); Tandem's gpt holds seq_len rows
    // and reads them from it, so no longer sequence has weights to start from.
    const config::Json hf = config::read_hf_config(folder);
    const int64_t rows = hf.contains("n_positions") ? hf.at("n_positions").get<int64_t>() : 1024;
    limit = {rows, "n_positions of " + folder + "/config.json (the rows of its position table)"};
  }
  if (const auto* llama = std::get_if<spec::LlamaConfig>(&tc.model)) {
    if (pretrained)
      limit = {llama->max_position_embeddings, "max_position_embeddings of " + folder + "/config.json"};
    else if (written.contains("max_position_embeddings"))
      limit = {llama->max_position_embeddings, "model.max_position_embeddings"};
    if (llama->family == spec::LlamaFamily::Mistral && llama->sliding_window &&
        (limit.tokens == 0 || *llama->sliding_window < limit.tokens))
      limit = {*llama->sliding_window,
               "model.sliding_window (Mistral attends within it, and Tandem's attention is full)"};
  }
  return limit;
}

}  // namespace tandem::plan
