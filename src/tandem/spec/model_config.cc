// Each model family's answers to what the trainer, the data and the planner ask of a model (model_config.h).
#include "tandem/spec/model_config.h"

#include <sstream>

#include "tandem/core/error.h"

namespace tandem::spec {
namespace {

// std::visit over the families with one callable per family.
template <class... F>
struct Cases : F... {
  using F::operator()...;
};
template <class... F>
Cases(F...) -> Cases<F...>;  // spelt out for compilers without C++20's aggregate deduction (clang before 17)

using Stages = std::vector<std::pair<int64_t, int64_t>>;

void check_vocab(int64_t vocab_size, int tp) {
  if (vocab_size % tp != 0)
    TANDEM_FAIL("model.vocab_size ", vocab_size, " is not divisible by parallel.tensor ", tp,
                ": pad the vocabulary to a multiple of ", tp, " (e.g. ", (vocab_size + tp - 1) / tp * tp, ")");
}

// A decoder's pipeline: its `layers` (the config's `layers_key`, called `unit` in messages) with the embedding and
// the head as two more units to cut; a stage map covers the layers in order.
void check_decoder_stages(int64_t layers, const char* layers_key, const char* unit, int pp, int virtual_stages,
                          const Stages& stages) {
  const int chunks = pp * virtual_stages;
  if (stages.empty() && layers + 2 < chunks)
    TANDEM_FAIL(layers_key, " ", layers, " (plus the embedding and the head) cannot fill ", chunks,
                " pipeline stages (pipeline ", pp, " x virtual_stages ", virtual_stages,
                "): use fewer stages or more layers");
  if (stages.empty()) return;
  if (static_cast<int>(stages.size()) != chunks)
    TANDEM_FAIL("parallel.stages lists ", stages.size(), " stages but the layout has ", chunks);
  int64_t next = 0;
  for (const auto& [first, last] : stages) {
    if (first != next || last < first)
      TANDEM_FAIL("parallel.stages must cover ", unit, " 0..", layers - 1,
                  " in order with contiguous, non-empty ranges; the range [", first, ", ", last, "] does not follow ",
                  next - 1);
    next = last + 1;
  }
  if (next != layers)
    TANDEM_FAIL("parallel.stages covers ", unit, " 0..", next - 1, " but the model has ", layers, " ", unit);
}

void check_gpt_layout(const GptConfig& g, int pp, int tp, int virtual_stages, const Stages& stages) {
  if (g.heads % tp != 0)
    TANDEM_FAIL("model.heads ", g.heads, " is not divisible by parallel.tensor ", tp,
                ": each tensor-parallel slot holds whole heads; choose a tensor width that divides ", g.heads);
  check_vocab(g.vocab_size, tp);
  check_decoder_stages(g.layers, "model.layers", "blocks", pp, virtual_stages, stages);
}

void check_llama_layout(const LlamaConfig& c, int pp, int tp, int virtual_stages, const Stages& stages) {
  // validate() made num_key_value_heads divide num_attention_heads, so a divisor of it divides both.
  if (c.num_attention_heads % tp != 0 || c.num_key_value_heads % tp != 0)
    TANDEM_FAIL("model.num_attention_heads ", c.num_attention_heads, " and model.num_key_value_heads ",
                c.num_key_value_heads, " are not both divisible by parallel.tensor ", tp,
                ": each tensor-parallel slot holds whole query and key/value heads; choose a tensor width that "
                "divides ",
                c.num_key_value_heads);
  if (c.intermediate_size % tp != 0)
    TANDEM_FAIL("model.intermediate_size ", c.intermediate_size, " is not divisible by parallel.tensor ", tp,
                ": each tensor-parallel slot holds an equal slice of the MLP; choose a tensor width that divides ",
                c.intermediate_size);
  if (const int64_t fs = c.moe.shared_expert_intermediate_size; fs > 0 && fs % tp != 0)
    TANDEM_FAIL("model.shared_expert_intermediate_size ", fs, " is not divisible by parallel.tensor ", tp,
                ": each tensor-parallel slot holds an equal slice of the shared expert; choose a tensor width that "
                "divides ",
                fs);
  check_vocab(c.vocab_size, tp);
  check_decoder_stages(c.num_hidden_layers, "model.num_hidden_layers", "decoder layers", pp, virtual_stages, stages);
}

void check_mlp_layout(const MlpConfig& m, int pp, int tp, int virtual_stages, const Stages& stages) {
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

// The context split's rule for any decoder: equal chunks of each sequence (nn/context_split.h).
void check_context_chunks(int64_t seq_len, int cp) {
  if (seq_len % (2 * cp) != 0)
    TANDEM_FAIL("model.seq_len ", seq_len, " is not divisible by 2 x parallel.context = ", 2 * cp,
                ": each sequence is cut into that many equal chunks, an early and a late one on each device (which "
                "balances the causal mask); choose a seq_len that is a multiple of ",
                2 * cp);
}

// What attention by heads needs that a tensor-parallel slot's heads do not give (heads_split false), as the words of a
// message.
std::string heads_do_not_split(int64_t heads, int64_t kv_heads, int cp, int tp) {
  std::ostringstream os;
  os << "parallel.context " << cp << " does not split the " << heads << " query heads over " << kv_heads
     << " key/value heads of each of the " << tp << " tensor-parallel slot" << (tp == 1 ? "" : "s");
  return os.str();
}

// The remedies of attention by heads: the context sizes it takes.
std::string heads_remedy(int64_t heads, int64_t kv_heads, int tp) {
  std::ostringstream os;
  os << "choose a context size that divides " << kv_heads << ", or a multiple of " << kv_heads << " that divides "
     << heads << " (each key/value head is then repeated over the devices that share it)"
     << (tp > 1 ? ", or fewer tensor-parallel slots" : "");
  return os.str();
}

// One tensor-parallel slot's query and key/value heads (a gpt's are both its heads); none for an mlp.
std::pair<int64_t, int64_t> slot_heads(const ModelConfig& model, int tp) {
  return std::visit(Cases{[](const MlpConfig&) {
                            return std::pair<int64_t, int64_t>{0, 0};
                          },
                          [&](const GptConfig& g) {
                            return std::pair<int64_t, int64_t>{g.heads / tp, g.heads / tp};
                          },
                          [&](const LlamaConfig& c) {
                            return std::pair<int64_t, int64_t>{c.num_attention_heads / tp, c.num_key_value_heads / tp};
                          }},
                    model);
}

}  // namespace

void check_context(const ModelConfig& model, int cp, int tp, ContextAttention attention) {
  if (cp == 1) return;
  if (std::holds_alternative<MlpConfig>(model))
    TANDEM_FAIL(
        "parallel.context splits token sequences over devices; an mlp model reads feature vectors: remove "
        "parallel.context");
  check_context_chunks(model_io(model).seq_len, cp);
  const auto [heads, kv_heads] = slot_heads(model, tp);
  if (attention == ContextAttention::Heads && !heads_split(heads, kv_heads, cp))
    TANDEM_FAIL(heads_do_not_split(heads, kv_heads, cp, tp),
                ": parallel.context_attention \"heads\" regroups each sequence by heads over the context-parallel "
                "devices (all-to-all), so each needs whole heads; ",
                heads_remedy(heads, kv_heads, tp),
                "; or set parallel.context_attention \"ring\" (or \"auto\"), which passes key/value blocks around "
                "the devices instead and needs no whole heads");
}

ContextAttention context_attention_of(const ModelConfig& model, int cp, int tp, ContextAttention request) {
  if (cp == 1 || std::holds_alternative<MlpConfig>(model)) return ContextAttention::Heads;
  const auto [heads, kv_heads] = slot_heads(model, tp);
  return context_attention_used(request, heads, kv_heads, cp);
}

void check_experts(const ModelConfig& model, int ep) {
  if (ep == 1) return;
  const auto* llama = std::get_if<LlamaConfig>(&model);
  if (!llama || llama->moe.num_experts == 0)
    TANDEM_FAIL("parallel.expert ", ep, " spreads a mixture of experts' experts over ranks; this ", model_type(model),
                " model has none: remove parallel.expert");
  if (llama->moe.num_experts % ep != 0)
    TANDEM_FAIL("parallel.expert ", ep, " does not divide the model's ", llama->moe.num_experts,
                " experts: each expert slot holds an equal share; choose a divisor of ", llama->moe.num_experts);
}

std::string model_type(const ModelConfig& model) {
  return std::visit(Cases{[](const MlpConfig&) { return "mlp"; }, [](const GptConfig&) { return "gpt"; },
                          [](const LlamaConfig&) { return "llama"; }},
                    model);
}

ModelIO model_io(const ModelConfig& model) {
  auto tokens = [](int64_t seq_len, int64_t vocab_size) {  // a decoder: token sequences in, next tokens out
    ModelIO io;
    io.tokens = true;
    io.seq_len = seq_len;
    io.vocab_size = vocab_size;
    return io;
  };
  return std::visit(Cases{[](const MlpConfig& m) {
                            ModelIO io;
                            io.features = m.sizes.empty() ? 0 : m.sizes.front();
                            io.classes = m.sizes.empty() ? 0 : m.sizes.back();
                            return io;
                          },
                          [&](const GptConfig& g) { return tokens(g.seq_len, g.vocab_size); },
                          [&](const LlamaConfig& c) { return tokens(c.seq_len, c.vocab_size); }},
                    model);
}

int64_t rows_per_sample(const ModelConfig& model) {
  return std::visit(Cases{[](const MlpConfig&) { return int64_t{1}; }, [](const GptConfig& g) { return g.seq_len; },
                          [](const LlamaConfig& c) { return c.seq_len; }},
                    model);
}

double extra_flops_per_row(const ModelConfig& model) {
  return std::visit(
      Cases{[](const MlpConfig&) { return 0.0; },
            [](const GptConfig& g) {
              return 12.0 * static_cast<double>(g.layers) * static_cast<double>(g.dim) * static_cast<double>(g.seq_len);
            },
            [](const LlamaConfig& c) {
              int64_t sparse = 0;
              for (int64_t i = 0; i < c.num_hidden_layers; ++i) sparse += sparse_layer(c, i) ? 1 : 0;
              const double idle_experts =
                  static_cast<double>(sparse) * (c.moe.num_experts - c.moe.num_experts_per_tok) * 3.0 *
                  static_cast<double>(c.hidden_size) * static_cast<double>(c.moe.moe_intermediate_size);
              return 12.0 * static_cast<double>(c.num_hidden_layers) *
                         static_cast<double>(c.num_attention_heads * c.head_dim) * static_cast<double>(c.seq_len) -
                     6.0 * idle_experts;
            }},
      model);
}

void check_layout(const ModelConfig& model, int pp, int tp, int virtual_stages,
                  const std::vector<std::pair<int64_t, int64_t>>& stages) {
  std::visit(Cases{[&](const MlpConfig& m) { check_mlp_layout(m, pp, tp, virtual_stages, stages); },
                   [&](const GptConfig& g) { check_gpt_layout(g, pp, tp, virtual_stages, stages); },
                   [&](const LlamaConfig& c) { check_llama_layout(c, pp, tp, virtual_stages, stages); }},
             model);
}

}  // namespace tandem::spec
