// Layout-free checkpoints. Every rank writes the optimizer-state pieces it owns (fp32 weights and AdamW
// moments of its ZeRO shard of its tensor-parallel slot) to rank_<r>.safetensors, each piece described by
// its parameter's logical name, global shape, tensor-parallel block and offset; rank 0 then writes
// manifest.json (config, step, data position, seed, the layout that saved it, checksums) and renames the
// folder into place. Loading assembles each parameter's logical tensor from whatever pieces exist and takes
// the slice this rank's layout needs, so dp, pp, tp and the ZeRO stage may all differ from the saving run.
// A folder without a manifest is not a checkpoint.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/layout/groups.h"
#include "tandem/parallel/engine.h"
#include "tandem/train/checkpoint_writer.h"  // async_checkpoint_host_bytes: the host bytes of a background checkpoint

namespace tandem::train {

// Collective. Writes <root>/step_<step> (temporary name, fsync, rename) and keeps the newest `keep`, on the spot
// (CheckpointWriter, checkpoint_writer.h, writes in the background; the trainer uses it).
std::string save_checkpoint(const std::string& root, int64_t step, parallel::Engine& engine, const config::Json& cfg,
                            int keep, layout::Groups& groups);

// `path` is a checkpoint folder or a run folder (its newest complete checkpoint under checkpoints/).
std::string find_checkpoint(const std::string& path);

// The complete checkpoints (folders step_<k> with a manifest) directly under `root`, oldest first.
std::vector<std::string> complete_checkpoints(const std::string& root);

// What a checkpoint's manifest says about the run that saved it, read before anything is built.
struct CheckpointSummary {
  int64_t step = 0;
  config::Json config;  // the whole validated config of the saving run
};
CheckpointSummary read_checkpoint_summary(const std::string& folder);

// Collective. Verifies the manifest, the checksums of the files it reads and that the checkpoint holds
// exactly this model's parameters, then loads weights and moments. Returns the step it was saved at.
// Nothing is modified when it throws.
// `pace`: how often rank 0 reports the reading (checkpoint/progress.h).
int64_t load_checkpoint(const std::string& folder, parallel::Engine& engine, layout::Groups& groups,
                        const checkpoint::ProgressOptions& pace = {});

// Loads initial weights from one consolidated safetensors file (tandem export, or written by PyTorch with
// the same names), or from a Hugging Face model folder of `model`'s family (interchange/weight_source.h):
// every parameter of the base model must be present with its logical shape, and nothing else; F32, BF16 or F16.
// Frozen parameters (the base under LoRA) are loaded too; LoRA adapters are not base parameters. Each rank reads only
// the elements it owns. `print`: this rank reports the reading as it goes (checkpoint/progress.h).
void load_initial_weights(const std::string& path, const spec::ModelConfig& model, parallel::Engine& engine,
                          bool print = false, const checkpoint::ProgressOptions& pace = {});

// The consolidated weights of a checkpoint: each parameter's logical tensor (for tandem export).
struct LogicalTensor {
  Shape shape;
  std::vector<float> values;
};
// `print`: report the reading as it goes.
std::map<std::string, LogicalTensor> read_checkpoint_weights(const std::string& folder, bool print = false,
                                                             const checkpoint::ProgressOptions& pace = {});
// The fp32 bytes of a checkpoint's weights (its manifest's parameter count), before anything is read.
uint64_t checkpoint_weight_bytes(const std::string& folder);

}  // namespace tandem::train
