// The checks before step 1 (run_checks.h): the options, the run folder and checkpoint, the data, the disk.
#include "tandem/train/run_checks.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "tandem/checkpoint/disk_space.h"
#include "tandem/core/units.h"
#include "tandem/ops/cuda/scratch_sizes.h"
#include "tandem/train/agreed_error.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/compute_dtype.h"
#include "tandem/train/run_folder.h"

namespace tandem::train {

namespace fs = std::filesystem;

RunChecks::RunChecks(const config::TrainConfig& cfg, const TrainOptions& options, layout::Groups& groups, bool print)
    : cfg_(cfg), options_(options), groups_(groups), print_(print) {}

void RunChecks::options() const {
  if (!options_.resume.empty() && !options_.init.empty())
    TANDEM_FAIL("--resume and --init both given: --resume continues a run (weights and optimizer state), ",
                "--init starts a new one from weights; choose one");
  if ((cfg_.data.document_mask || (cfg_.eval.enabled && cfg_.eval.data.document_mask)) && options_.device &&
      options_.device->kind() == DeviceKind::Cuda) {
    // The CUDA backend keeps attention inside documents with its flash kernels (ops/cuda/attention_flash.h), which
    // take 16-bit data and a head dim of 64 or 128.
    const DType compute = compute_dtype(cfg_);
    int64_t head_dim = 0;
    if (const auto* g = std::get_if<spec::GptConfig>(&cfg_.model)) head_dim = g->heads ? g->dim / g->heads : 0;
    if (const auto* l = std::get_if<spec::LlamaConfig>(&cfg_.model))
      head_dim = l->head_dim ? l->head_dim : l->num_attention_heads ? l->hidden_size / l->num_attention_heads : 0;
    if (!ops::cuda::flash_attention_shape(compute, head_dim))
      TANDEM_FAIL(
          "data.document_mask on the CUDA backend keeps attention inside documents in bf16 or fp16 compute "
          "with a head dim of 64 or 128; this run computes in ",
          dtype_name(compute), " with head dim ", head_dim,
          ": set \"bf16\": {\"enabled\": true}, remove \"document_mask\", or train on the CPU (--device cpu)");
  }
  if (cfg_.lora.enabled && !options_.init.empty())
    TANDEM_FAIL("--init with \"lora\": a LoRA run's checkpoints hold the adapters alone, and resuming or exporting ",
                "one reads its frozen base again from the config; name the base as model.from_pretrained instead of ",
                "--init");
}

int64_t RunChecks::start(const std::string& checkpoint, RunFolderLock& lock) const {
  // The run folder first, before anything is allocated or written. Rank 0 looks and says; every rank agrees, so
  // no rank can see a file another has just created.
  std::string refusal;
  if (!options_.out_dir.empty() && groups_.rank == 0) {
    try {
      if (!options_.out_dir_locked && !lock.held()) lock = RunFolderLock::acquire(options_.out_dir);
      check_run_folder(options_.out_dir, checkpoint);
    } catch (const Error& e) {
      refusal = e.what();
    }
  }
  if (groups_.world->all_reduce_scalar(refusal.empty() ? 0.0 : 1.0, comm::ReduceOp::Max) > 0)
    throw AgreedError(refusal.empty() ? "rank 0 refused the run folder '" + options_.out_dir + "'" : refusal);
  if (checkpoint.empty()) return 0;
  const CheckpointSummary saved = read_checkpoint_summary(checkpoint);
  if (saved.step > cfg_.steps)
    TANDEM_FAIL("the checkpoint '", checkpoint, "' is at step ", saved.step, ", past this run's steps (", cfg_.steps,
                "): raise steps (e.g. --set steps=", 2 * saved.step, ") to train on from it");
  const int64_t saved_batch = saved.config.value("train_batch_size", int64_t{0});
  if (saved_batch > 0 && saved_batch != cfg_.batch.global && print_)
    std::printf(
        "warning: resuming with train_batch_size %lld where the checkpoint was trained with %lld: from step "
        "%lld on each step takes %lld samples, so the samples seen differ from an uninterrupted run's\n",
        static_cast<long long>(cfg_.batch.global), static_cast<long long>(saved_batch),
        static_cast<long long>(saved.step + 1), static_cast<long long>(cfg_.batch.global));
  return saved.step;
}

void RunChecks::data(const data::Dataset& dataset, const char* what) const {
  // Each rank scans its part of the data once; the first bad element of all is reported by every rank.
  const uint64_t bytes = dataset.scanned_bytes();
  if (bytes == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t mine = dataset.first_invalid(groups_.rank, groups_.layout.world());
  // -1 (none) becomes the lowest value under Max; indices below 2^53 are exact in a double.
  const double first =
      -groups_.world->all_reduce_scalar(mine < 0 ? -1e300 : -static_cast<double>(mine), comm::ReduceOp::Max);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (first < 1e300) TANDEM_FAIL(dataset.describe_invalid(static_cast<int64_t>(first)));
  if (print_)
    std::printf("%s: token ids checked against the vocabulary: %s in %.2f s (%s/s)\n", what,
                format_bytes(bytes).c_str(), seconds,
                format_bytes(static_cast<uint64_t>(static_cast<double>(bytes) / std::max(seconds, 1e-9))).c_str());
}

void RunChecks::disk(CheckpointWriter& writer, int64_t start) const {
  const uint64_t one = writer.checkpoint_bytes();
  // The most checkpoints this run holds there at once: checkpoint.keep complete ones and the one being written, or
  // fewer when it writes fewer (the due ones, and one at the end), beside the complete ones already there.
  const auto& c = cfg_.checkpoint;
  const fs::path root = fs::path(options_.out_dir) / "checkpoints";
  const int64_t writes = (c.every > 0 ? (cfg_.steps - start) / c.every : 0) + (c.at_end ? 1 : 0);
  // A run that plans no checkpoint reserves no space: one at a stop signal is written if it fits, and a write that
  // does not fit ends the job as any failed write does.
  if (writes == 0) return;
  const auto existing = static_cast<int64_t>(complete_checkpoints(root.string()).size());
  const int64_t copies = std::max<int64_t>(1, std::min(c.keep + 1, existing + writes) - existing);
  checkpoint::SpaceNeed need;
  need.bytes = static_cast<uint64_t>(copies) * one;
  need.what = std::to_string(copies) + " checkpoint" + (copies > 1 ? "s" : "") + " of " + format_bytes(one) +
              (copies == c.keep + 1 ? " (checkpoint.keep " + std::to_string(c.keep) + ", and 1 being written)"
                                    : " (the most this run holds at once)");
  const std::string where = root.string();
  const uint64_t free = checkpoint::free_bytes(where);
  const int64_t fit = static_cast<int64_t>(free / std::max<uint64_t>(one, 1));
  need.advice = (fit >= 2 ? "set checkpoint.keep to " + std::to_string(fit - 1) +
                                " or less (--set checkpoint.keep=" + std::to_string(fit - 1) + "), "
                          : std::string()) +
                "write the run elsewhere with --out DIR, or free space there";
  const std::string mine = checkpoint::space_refusal(where, need, free);
  // Each rank looks at the file system it writes through; every rank agrees, so all stop or none.
  if (groups_.world->all_reduce_scalar(mine.empty() ? 0.0 : 1.0, comm::ReduceOp::Max) > 0) {
    const int first = static_cast<int>(-groups_.world->all_reduce_scalar(
        mine.empty() ? -static_cast<double>(groups_.layout.world()) : -groups_.rank, comm::ReduceOp::Max));
    if (first != 0 && groups_.rank == first) {
      std::fprintf(stderr, "error on rank %d: %s\n", groups_.rank, mine.c_str());
      std::fflush(stderr);
    }
    groups_.world->barrier();
    throw AgreedError(groups_.rank == 0 && !mine.empty()
                          ? mine
                          : "rank " + std::to_string(first) + " has not enough disk space for the checkpoints in '" +
                                where + "': its message is above");
  }
}

}  // namespace tandem::train
