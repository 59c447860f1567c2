#include "tandem/plan/model_info.h"

#include "tandem/nn/gpt_layers.h"
#include "tandem/train/model_factory.h"

namespace tandem::plan {

namespace {

const nn::Parameter& find_parameter(nn::Layer& layer, const std::string& suffix) {
  for (nn::Parameter* p : layer.parameters())
    if (p->name.size() >= suffix.size() && p->name.compare(p->name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return *p;
  TANDEM_FAIL("planner: layer '", layer.name(), "' has no parameter ending in '", suffix, "'");
}

}  // namespace

Shape ModelInfo::input_shape(int64_t micro) const {
  return type == "gpt" ? Shape{micro, seq_len} : Shape{micro, features};
}

ModelInfo describe_model(const config::Json& m, int tp) {
  ModelInfo info;
  info.type = m.at("type").get<std::string>();
  info.tp = tp;
  // Slot 0 stands for every slot: the layers check divisibility, so every slot holds the same widths. The
  // reducer is never called: nothing runs.
  info.model = train::build_model(m, tp > 1 ? nn::TpSlot{0, tp, nullptr} : nn::TpSlot{});
  if (info.type == "gpt") {
    info.seq_len = m.at("seq_len").get<int64_t>();
    info.vocab = m.at("vocab_size").get<int64_t>();
    info.dim = m.at("dim").get<int64_t>();
    info.blocks = m.at("layers").get<int64_t>();
    info.heads = m.at("heads").get<int64_t>();
  } else {
    const auto sizes = m.at("sizes").get<std::vector<int64_t>>();
    info.features = sizes.front();
    info.classes = sizes.back();
  }
  for (const auto& layer : info.model.layers()) {
    LayerInfo l;
    l.name = layer->name();
    for (nn::Parameter* p : layer->parameters()) {
      l.params += shape_numel(p->shape);
      info.logical_parameters += shape_numel(p->global_shape);
    }
    if (dynamic_cast<nn::GptEmbedding*>(layer.get())) {
      l.kind = LayerKind::Embedding;
      const Shape& wte = find_parameter(*layer, "wte.weight").shape;  // (V / tp, C)
      l.vocab_local = wte[0];
      l.dim = wte[1];
      if (l.name.empty()) l.name = "embedding";
    } else if (dynamic_cast<nn::GptBlock*>(layer.get())) {
      l.kind = LayerKind::Block;
      const Shape& qkv = find_parameter(*layer, "qkv.weight").shape;  // (3C / tp, C)
      l.dim = qkv[1];
      l.dim_local = qkv[0] / 3;
      l.heads = info.heads / tp;
    } else if (dynamic_cast<nn::GptHead*>(layer.get())) {
      l.kind = LayerKind::Head;
      const Shape& head = find_parameter(*layer, "head.weight").shape;  // (V / tp, C)
      l.vocab_local = head[0];
      l.dim = head[1];
      if (l.name.empty()) l.name = "head";
    } else if (auto* lin = dynamic_cast<nn::Linear*>(layer.get())) {
      l.kind = LayerKind::Linear;
      l.in = lin->in_features();
      l.out = lin->out_features();
      // A row-parallel weight is (out, in / tp): its shard splits the innermost dim (inner == 1); a
      // column-parallel one is (out / tp, in), split above the input dim.
      const nn::Parameter& w = find_parameter(*layer, "weight");
      l.sum_forward = w.shard.sharded() && w.shard.inner == 1;
      l.sum_backward = w.shard.sharded() && w.shard.inner > 1;
    } else if (dynamic_cast<nn::Activation*>(layer.get())) {
      l.kind = LayerKind::Activation;
    } else {
      TANDEM_FAIL("planner: layer '", layer->name(), "' is of a kind the memory model does not know");
    }
    info.layers.push_back(std::move(l));
  }
  return info;
}

}  // namespace tandem::plan
