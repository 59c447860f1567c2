#include "tandem/nn/models.h"

#include "tandem/nn/activation.h"
#include "tandem/nn/gpt_layers.h"
#include "tandem/nn/linear.h"

namespace tandem::nn {

Model build_mlp(const MlpConfig& cfg, TpSlot tp) {
  if (cfg.sizes.size() < 2) TANDEM_FAIL("an mlp needs at least two sizes (inputs and classes), got ", cfg.sizes.size());
  const ActivationKind act = activation_from_name(cfg.activation);
  Model model;
  const size_t linears = cfg.sizes.size() - 1;
  for (size_t i = 0; i < linears; ++i) {
    const bool paired = (i % 2 == 0) ? i + 1 < linears : true;
    const Split split = !paired ? Split::None : (i % 2 == 0 ? Split::Column : Split::Row);
    model.emplace<Linear>("layers." + std::to_string(i), cfg.sizes[i], cfg.sizes[i + 1], true, split, tp);
    if (i + 2 < cfg.sizes.size()) model.emplace<Activation>("act." + std::to_string(i), act);
  }
  return model;
}

Model build_gpt(const GptConfig& cfg, TpSlot tp, const LoraTargets* lora, const spec::Fp8Config& fp8) {
  if (cfg.heads <= 0 || cfg.dim % cfg.heads != 0)
    TANDEM_FAIL("gpt dim ", cfg.dim, " must be a multiple of heads ", cfg.heads);
  Model model;
  LoraSites sites(lora);
  model.add(sites.frozen(std::make_unique<GptEmbedding>(cfg.vocab_size, cfg.seq_len, cfg.dim, tp)));
  Model::Fp8Use fp8_use;
  for (int64_t i = 0; i < cfg.layers; ++i) {
    auto block = std::make_unique<GptBlock>(static_cast<int>(i), cfg.dim, cfg.heads, tp);
    fp8_use.fp8 += block->use_fp8(fp8);
    fp8_use.projections += 4;
    model.add(sites.adapted(std::move(block)));
  }
  model.set_fp8_use(fp8_use);
  model.add(sites.frozen(std::make_unique<GptHead>(cfg.dim, cfg.vocab_size, tp, cfg.tie_word_embeddings)));
  model.set_vocab_parallel_logits(tp.active());
  model.set_computes_loss(true);  // the head (head_loss)
  sites.check_all_added();
  return model;
}

int64_t gpt_parameter_count(const GptConfig& c) {
  return (c.tie_word_embeddings ? 1 : 2) * c.vocab_size * c.dim + c.seq_len * c.dim +
         c.layers * (12 * c.dim * c.dim + 13 * c.dim) + 2 * c.dim;
}

}  // namespace tandem::nn
