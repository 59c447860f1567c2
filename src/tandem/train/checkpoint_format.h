// Internal to the checkpoint code of train/: the names and labels a checkpoint folder is made of, shared by its
// writer (checkpoint_writer.cc) and its reader (checkpoint.cc). What goes into the files is decided there.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tandem/config/config.h"
#include "tandem/nn/tensor_parallel.h"

namespace tandem::train::format {

constexpr const char* kFormat = "tandem-checkpoint";
constexpr int kVersion = 2;

std::string step_folder_name(int64_t step);  // step_00000010
std::string rank_file_name(int rank);        // rank_3.safetensors

// The complete checkpoints (folders step_<k> with a manifest) directly under `root`, oldest first.
std::vector<std::filesystem::path> complete_checkpoint_paths(const std::filesystem::path& root);

// A piece's tensor-parallel block: [outer, split, inner, part, parts], then the unequal fused blocks when there are
// any.
config::Json shard_json(const nn::Shard& s);
nn::Shard shard_from_json(const config::Json& j);

}  // namespace tandem::train::format
