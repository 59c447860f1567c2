// The typed settings of one run, every section of a config as spec's structs side by side, with no JSON and no
// parsing: what config::parse makes of a validated config once (config::TrainConfig keeps the validated JSON beside
// these values, for the checkpoints and the lines it prints), and what the planner's preflight and the trainer read.
// Each field's default is its key's default: the settings table (config/settings_rows.cc) reads it here.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/spec/fp8.h"
#include "tandem/spec/lora.h"
#include "tandem/spec/model_config.h"
#include "tandem/spec/tiles.h"
#include "tandem/spec/train.h"

namespace tandem::spec {

struct TrainConfig {
  BatchConfig batch_config;   // the batch keys as written
  BatchSizes batch{};         // resolved for data_parallel ranks (config::set_data_parallel)
  int64_t data_parallel = 0;  // 0 until the batch is resolved
  int64_t steps = 100;
  uint64_t seed = 1234;
  int64_t steps_per_print = 1;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  double gradient_clipping = 0;  // 0 = off
  int64_t zero_stage = 0;
  OffloadConfig offload_optimizer;  // zero_optimization.offload_optimizer (or the older cpu_offload)
  OffloadConfig offload_param;      // zero_optimization.offload_param (stage 3)
  Fp16Config fp16;
  bool bf16 = false;
  ModelConfig model;
  LoraConfig lora;  // "lora": adapters on the frozen model (enabled false without it)
  Fp8Config fp8;    // "fp8": the blocks' projections in FP8
  Tiles tiles;      // "tiles": the tokens the loss and the MLPs take at once (0: their rules' choice)
  DataConfig data;
  EvalConfig eval;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  MonitorConfig tensorboard;         // "tensorboard": event files for TensorBoard
  MonitorConfig csv_monitor;         // "csv_monitor": DeepSpeed's CSV files
  uint64_t device_memory_bytes = 0;  // 0 = no budget
  uint64_t host_memory_bytes = 0;    // a node's host memory for offloaded state; 0 = what the node has free
  // model.from_pretrained: the Hugging Face folder the weights start from (a run that does not resume), or "".
  std::string pretrained_dir;
};

}  // namespace tandem::spec
