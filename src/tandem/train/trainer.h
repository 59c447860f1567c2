// Trainer: the training loop on one device. Config -> model -> data -> steps of gradient accumulation,
// clipping, AdamW, a progress line, metrics.jsonl and checkpoints. Parallel layouts wrap this later.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/data/dataset.h"
#include "tandem/device/cpu_device.h"
#include "tandem/nn/model.h"
#include "tandem/optim/adamw.h"

namespace tandem::train {

struct TrainOptions {
  std::string out_dir;  // metrics.jsonl and checkpoints/ go here; empty: nothing is written
  std::string resume;   // a checkpoint or run folder to continue from; empty: start fresh
  bool print = true;    // progress lines on stdout
};

struct StepMetrics {
  int64_t step = 0;  // 1-based: the number of updates done
  double loss = 0;   // mean over the global batch
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double step_seconds = 0;
  double tokens_per_s = 0;  // tokens (gpt) or samples (mlp) per second
  uint64_t peak_bytes = 0;
};

class Trainer {
 public:
  // `model` is built but not materialised; the trainer puts it on its device.
  Trainer(config::TrainConfig cfg, nn::Model model, std::unique_ptr<data::Dataset> dataset, TrainOptions options);
  // Builds model and dataset from the config's "model" and "data" objects.
  static Trainer from_config(const config::TrainConfig& cfg, TrainOptions options);

  // Trains until cfg.steps; returns the metrics of the steps run by this call.
  std::vector<StepMetrics> run();

  nn::Model& model() { return model_; }
  device::CpuDevice& device() { return *device_; }

 private:
  StepMetrics train_step(int64_t step);

  config::TrainConfig cfg_;
  TrainOptions options_;
  std::unique_ptr<device::CpuDevice> device_;
  nn::Model model_;
  std::unique_ptr<data::Dataset> dataset_;
  int64_t rows_per_sample_;
  bool activation_checkpointing_ = false;
  std::unique_ptr<optim::AdamW> optimizer_;
};

}  // namespace tandem::train
