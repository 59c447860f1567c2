#include "tandem/train/model_factory.h"

#include "tandem/nn/models.h"

namespace tandem::train {

namespace {
nn::GptConfig gpt_config(const config::Json& m) {
  nn::GptConfig g;
  g.vocab_size = m.at("vocab_size").get<int64_t>();
  g.seq_len = m.at("seq_len").get<int64_t>();
  g.dim = m.at("dim").get<int64_t>();
  g.layers = m.at("layers").get<int64_t>();
  g.heads = m.at("heads").get<int>();
  g.tie_word_embeddings = m.value("tie_word_embeddings", false);
  return g;
}
}  // namespace

nn::Model build_model(const config::Json& m, nn::TpSlot tp) {
  const std::string type = m.at("type").get<std::string>();
  if (type == "gpt") return nn::build_gpt(gpt_config(m), tp);
  if (type == "mlp") {
    nn::MlpConfig c;
    c.sizes = m.at("sizes").get<std::vector<int64_t>>();
    c.activation = m.value("activation", "relu");
    return nn::build_mlp(c, tp);
  }
  TANDEM_FAIL("unknown model type '", type, "': use \"mlp\" or \"gpt\"");
}

data::ModelIO model_io(const config::Json& m) {
  data::ModelIO io{};
  if (m.at("type") == "gpt") {
    io.tokens = true;
    io.seq_len = m.at("seq_len").get<int64_t>();
    io.vocab_size = m.at("vocab_size").get<int64_t>();
  } else {
    const auto sizes = m.at("sizes").get<std::vector<int64_t>>();
    io.tokens = false;
    io.features = sizes.front();
    io.classes = sizes.back();
  }
  return io;
}

int64_t rows_per_sample(const config::Json& m) { return m.at("type") == "gpt" ? m.at("seq_len").get<int64_t>() : 1; }

}  // namespace tandem::train
