// Each model family's answers to what the trainer, the data and the planner ask of a model (model_config.h).
#include "tandem/config/model_config.h"

#include "tandem/core/error.h"

namespace tandem::config {
namespace {

// std::visit over the families with one callable per family.
template <class... F>
struct Cases : F... {
  using F::operator()...;
};

void check_gpt_layout(const GptConfig& g, int pp, int tp, int virtual_stages,
                      const std::vector<std::pair<int64_t, int64_t>>& stages) {
  const int chunks = pp * virtual_stages;
  if (g.heads % tp != 0)
    TANDEM_FAIL("model.heads ", g.heads, " is not divisible by parallel.tensor ", tp,
                ": each tensor-parallel slot holds whole heads; choose a tensor width that divides ", g.heads);
  if (g.vocab_size % tp != 0)
    TANDEM_FAIL("model.vocab_size ", g.vocab_size, " is not divisible by parallel.tensor ", tp,
                ": pad the vocabulary to a multiple of ", tp, " (e.g. ", (g.vocab_size + tp - 1) / tp * tp, ")");
  // The embedding and the head are pipeline units too: layers + 2 units to cut.
  if (stages.empty() && g.layers + 2 < chunks)
    TANDEM_FAIL("model.layers ", g.layers, " (plus the embedding and the head) cannot fill ", chunks,
                " pipeline stages (pipeline ", pp, " x virtual_stages ", virtual_stages,
                "): use fewer stages or more layers");
  if (stages.empty()) return;
  if (static_cast<int>(stages.size()) != chunks)
    TANDEM_FAIL("parallel.stages lists ", stages.size(), " stages but the layout has ", chunks);
  int64_t next = 0;
  for (const auto& [first, last] : stages) {
    if (first != next || last < first)
      TANDEM_FAIL("parallel.stages must cover blocks 0..", g.layers - 1,
                  " in order with contiguous, non-empty ranges; the range [", first, ", ", last, "] does not follow ",
                  next - 1);
    next = last + 1;
  }
  if (next != g.layers)
    TANDEM_FAIL("parallel.stages covers blocks 0..", next - 1, " but the model has ", g.layers, " blocks");
}

void check_mlp_layout(const MlpConfig& m, int pp, int tp, int virtual_stages,
                      const std::vector<std::pair<int64_t, int64_t>>& stages) {
  const std::vector<int64_t>& sizes = m.sizes;
  // Linear i splits its outputs (even i) or its inputs (odd i) over tp; an unpaired last layer is replicated.
  for (size_t i = 0; i + 1 < sizes.size(); i += 2)
    if (i + 2 < sizes.size() && sizes[i + 1] % tp != 0)
      TANDEM_FAIL("mlp width sizes[", i + 1, "] = ", sizes[i + 1], " is not divisible by parallel.tensor ", tp);
  const int64_t linears = static_cast<int64_t>(sizes.size()) - 1;
  const int chunks = pp * virtual_stages;
  if (linears < chunks)
    TANDEM_FAIL("the mlp has ", linears, " layers, too few for ", chunks, " pipeline stages: use fewer stages");
  if (!stages.empty()) TANDEM_FAIL("parallel.stages applies to gpt blocks; mlp stages are balanced");
}

}  // namespace

std::string model_type(const ModelConfig& model) {
  return std::visit(Cases{[](const MlpConfig&) { return "mlp"; }, [](const GptConfig&) { return "gpt"; }}, model);
}

ModelIO model_io(const ModelConfig& model) {
  return std::visit(Cases{[](const MlpConfig& m) {
                            ModelIO io;
                            io.features = m.sizes.empty() ? 0 : m.sizes.front();
                            io.classes = m.sizes.empty() ? 0 : m.sizes.back();
                            return io;
                          },
                          [](const GptConfig& g) {
                            ModelIO io;
                            io.tokens = true;
                            io.seq_len = g.seq_len;
                            io.vocab_size = g.vocab_size;
                            return io;
                          }},
                    model);
}

int64_t rows_per_sample(const ModelConfig& model) {
  return std::visit(Cases{[](const MlpConfig&) { return int64_t{1}; }, [](const GptConfig& g) { return g.seq_len; }},
                    model);
}

double extra_flops_per_row(const ModelConfig& model) {
  return std::visit(Cases{[](const MlpConfig&) { return 0.0; },
                          [](const GptConfig& g) {
                            return 12.0 * static_cast<double>(g.layers) * static_cast<double>(g.dim) *
                                   static_cast<double>(g.seq_len);
                          }},
                    model);
}

void check_layout(const ModelConfig& model, int pp, int tp, int virtual_stages,
                  const std::vector<std::pair<int64_t, int64_t>>& stages) {
  std::visit(Cases{[&](const MlpConfig& m) { check_mlp_layout(m, pp, tp, virtual_stages, stages); },
                   [&](const GptConfig& g) { check_gpt_layout(g, pp, tp, virtual_stages, stages); }},
             model);
}

}  // namespace tandem::config
