#include "tandem/plan/planned_model.h"

#include "tandem/train/model_factory.h"

namespace tandem::plan {

Shape PlannedModel::input_shape(int64_t micro) const {
  Shape s{micro};
  s.insert(s.end(), sample_shape.begin(), sample_shape.end());
  return s;
}

PlannedModel planned_model(const config::Json& model_cfg) {
  PlannedModel m;
  m.build = [model_cfg](nn::TpSlot tp) { return train::build_model(model_cfg, tp); };
  const data::ModelIO io = train::model_io(model_cfg);
  m.type = model_cfg.at("type").get<std::string>();
  m.rows_per_sample = train::rows_per_sample(model_cfg);
  if (io.tokens) {
    m.sample_shape = {io.seq_len};
    m.input_dtype = DType::I32;
    m.unit = "tok/s";
    if (m.type == "gpt")
      m.extra_flops_per_row = 12.0 * model_cfg.at("layers").get<double>() * model_cfg.at("dim").get<double>() *
                              static_cast<double>(io.seq_len);
  } else {
    m.sample_shape = {io.features};
    m.input_dtype = DType::F32;
  }
  m.validate = [model_cfg](const layout::ParallelPlan& plan, int64_t micro_batches) {
    layout::validate_for_model(plan, model_cfg, micro_batches);
  };
  return m;
}

}  // namespace tandem::plan
