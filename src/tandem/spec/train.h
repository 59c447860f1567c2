// The typed settings of a training run as plain values, with no JSON and no parsing: what config/ (parse(), config.h)
// makes of a validated config, once, and what the modules below the trainer take as they are (optim the optimizer and
// its schedule, parallel the loss scaling, data its source, layout the parallel request). One struct per concept: no
// module keeps a copy of these fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/spec/context_attention.h"
#include "tandem/spec/schedule.h"

namespace tandem::spec {

enum class OptimizerType { AdamW, Adam };

// optimizer: DeepSpeed's Adam and AdamW (docs/deepspeed.md).
struct OptimizerConfig {
  OptimizerType type = OptimizerType::AdamW;
  double lr = 1e-3;  // optimizer.params.lr; the rate each step uses comes from the schedule
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // on matrices and embeddings only
  bool adam_w_mode = true;  // true: decoupled decay (AdamW; always for type AdamW); false: L2, added to the gradient
};

enum class SchedulerType { Constant, WarmupLR, WarmupDecayLR, WarmupCosineLR };
enum class WarmupType {
  Log,     // log(step + 1) / log(warmup_num_steps), DeepSpeed's default
  Linear,  // step / warmup_num_steps
};

// scheduler: DeepSpeed's learning-rate schedules with their parameters (optim/schedule.h has the formulas).
struct SchedulerConfig {
  SchedulerType type = SchedulerType::Constant;
  double peak_lr = 1e-3;         // scheduler.params.warmup_max_lr when given, else optimizer.params.lr
  int64_t warmup_num_steps = 0;  // 0: no warmup; otherwise at least 2, as DeepSpeed clamps it
  WarmupType warmup_type = WarmupType::Log;
  double warmup_min_lr = 0;     // WarmupLR, WarmupDecayLR: the rate at step 0, and WarmupDecayLR's end
  int64_t total_num_steps = 1;  // WarmupDecayLR, WarmupCosineLR: where the decay ends (the run's steps by default)
  double warmup_min_ratio = 0;  // WarmupCosineLR: the start of the warmup as a fraction of the peak
  double cos_min_ratio = 1e-4;  // WarmupCosineLR: the floor as a fraction of the peak
};

// fp16: 16-bit compute with DeepSpeed's dynamic loss scaling: start at 2^initial_scale_power; on an overflow skip
// the step and (after `hysteresis` overflows) halve the scale, not below min_loss_scale; after loss_scale_window
// steps without overflow double it. A fixed loss_scale > 0 turns the dynamics off.
struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0;  // 0: dynamic
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  double min_loss_scale = 1;
};

enum class DataType {
  Synthetic,  // a fixed random teacher's samples
  Text,       // a file's bytes as tokens (vocab 256)
  Tokens,     // a file of little-endian token ids (raw, or llm.c's format with its header)
};
const char* data_type_name(DataType t);  // "synthetic", "text", "tokens"

// data: where the samples come from (data::make_dataset).
struct DataConfig {
  DataType type = DataType::Synthetic;
  int64_t samples = 65536;  // Synthetic: how many
  std::string path;         // Text, Tokens: the file
  int token_bytes = 2;      // Tokens: data.dtype "uint16" (2) or "uint32" (4)
  // Token data: attention kept inside each document of a window, documents ending with `eos_token_id`.
  bool document_mask = false;
  int64_t eos_token_id = -1;
};

// "parallel" as written, read once: what is absent stays unset, for layout::resolve_parallel to derive from the
// world size. `planned`: "parallel": "auto" (the planner chooses the layout and writes it into the config).
struct ParallelConfig {
  bool planned = false;
  std::optional<int> virtual_gpus, pipeline, tensor, virtual_stages;
  std::optional<int> context;  // context-parallel shards of each sequence (DeepSpeed's sequence_parallel_size)
  // How attention runs over the context shards (parallel.context_attention, spec/context_attention.h).
  ContextAttention context_attention = ContextAttention::Auto;
  std::optional<int> expert;  // expert-parallel slots inside the replicas (DeepSpeed's expert_parallel.autoep_size)
  spec::ScheduleKind schedule = spec::ScheduleKind::OneFOneB;
  bool activation_checkpointing = false;
  // The checkpointed layer inputs wait in host memory (parallel.cpu_checkpointing, or DeepSpeed's
  // activation_checkpointing.cpu_checkpointing); needs activation_checkpointing.
  bool cpu_checkpointing = false;
  // With cpu_checkpointing: how many of each pipeline chunk's first layers send their inputs to host memory, the rest
  // keeping theirs on the device (parallel.cpu_checkpointing_layers); unset: every one that can.
  std::optional<int64_t> cpu_checkpointing_layers;
  // Each block keeps its attention's output and log-sum-exp from the forward, so that checkpointing's second forward
  // does not run attention again (parallel.keep_attention); needs activation_checkpointing.
  bool keep_attention = false;
  std::vector<std::pair<int64_t, int64_t>> stages;  // explicit stage map of blocks (inclusive ranges); empty: balance
  std::optional<double> timeout_s;
  static constexpr double kDefaultTimeoutS = 300;  // the communication watchdog's seconds when timeout_s is absent
};

// "eval": the loss on `steps` global batches of `data` (the same batches each time), no update, every `every` steps
// (0: only after the last) and after the last.
struct EvalConfig {
  bool enabled = false;
  DataConfig data;
  int64_t every = 0;
  int64_t steps = 10;
};

// zero_optimization.offload_optimizer / offload_param: DeepSpeed's ZeRO-Offload and ZeRO-Infinity. What is offloaded
// lives in host memory (cpu) or in files under nvme_path (nvme) instead of on the device (docs/offload.md).
enum class OffloadDevice { None, Cpu, Nvme };
const char* offload_device_name(OffloadDevice d);  // "none", "cpu", "nvme"
// offload_optimizer.update (Tandem's key): whether an offloaded unit's host update may start in the backward, as its
// gradient comes down, when the step needs nothing else first (no clipping, no fp16), or waits for the backward's end.
// The same numbers either way.
enum class OffloadUpdate { InBackward, AfterBackward };

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::None;
  std::string nvme_path;     // nvme: the folder each rank's swap file goes in
  bool pin_memory = false;   // host buffers page-locked: the GPU copies them asynchronously, at full speed
  int64_t buffer_count = 4;  // nvme: host buffers the swap cycles through (one read ahead, the rest written behind)
  double ratio = 1;          // offload_optimizer: the share of the optimizer state offloaded, by parameters in
                             // layer order; the rest stays on the device
  OffloadUpdate update = OffloadUpdate::InBackward;  // offload_optimizer (Tandem's key)
  // offload_optimizer (Tandem's key): the most elements of one piece of a unit's updated values on their way up to
  // the device: 64 Mi, 128 MiB of bf16 values, each piece well past the copy's fixed costs.
  int64_t upload_piece = int64_t{64} << 20;
  bool enabled() const { return device != OffloadDevice::None; }
};

struct CheckpointConfig {
  int64_t every = 0;   // steps between checkpoints; 0 = only at the end
  int64_t keep = 3;    // how many to keep
  bool at_end = true;  // also after the last step (benchmarks of large models turn it off)
  bool async = true;   // copy the state to host memory at the step boundary and write it while training goes on
};

// DeepSpeed's monitors, "tensorboard" and "csv_monitor": {"enabled", "output_path", "job_name"}. Their files go into
// output_path/job_name (output_path empty: the run folder).
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";  // DeepSpeed's default
};

// The three batch keys as the config gives them (config::validate() checked each); the absent ones are derived
// (config::resolve_batch).
struct BatchConfig {
  std::optional<int64_t> global;  // train_batch_size
  std::optional<int64_t> micro;   // train_micro_batch_size_per_gpu
  std::optional<int64_t> accum;   // gradient_accumulation_steps
};

struct BatchSizes {
  int64_t global;  // train_batch_size
  int64_t micro;   // train_micro_batch_size_per_gpu
  int64_t accum;   // gradient_accumulation_steps
};

}  // namespace tandem::spec
