// The Trainer (trainer.h): its construction, then run(): the checks, setup, restore and the loop of steps.
#include "tandem/train/trainer.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "tandem/core/units.h"
#include "tandem/nn/linear.h"
#include "tandem/ops/profile.h"
#include "tandem/optim/schedule.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/compute_dtype.h"
#include "tandem/train/evaluate.h"
#include "tandem/train/lora_weights.h"
#include "tandem/train/metrics_file.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/run_checks.h"
#include "tandem/train/run_description.h"
#include "tandem/train/run_report.h"
#include "tandem/train/step_report.h"
#include "tandem/train/stop_signal.h"
#include "tandem/train/timeline_file.h"

namespace tandem::train {

namespace fs = std::filesystem;

namespace {

ModelBuilder single_use_builder(std::shared_ptr<nn::Model> model) {
  return [model](nn::TpSlot tp) {
    if (tp.active())
      TANDEM_FAIL("a model passed as an object cannot be split over tensor-parallel slots: give the trainer a ",
                  "ModelBuilder that builds it for a TpSlot, or set parallel.tensor to 1");
    TANDEM_CHECK(model->layers().size() > 0, "the model was already used");
    return std::move(*model);
  };
}

// Fault injection for the fault tests (core/diagnostics.h): at the start of step `step` (1-based).
void inject_fault(const FaultInjection& f, int rank, int64_t step) {
  if (f.rank != rank || f.step != step || f.kind == "kill_in_write") return;
  const long long s = f.step;
  const char* kind = f.kind.c_str();
  std::fprintf(stderr, "[fault injection] rank %d at step %lld: %s\n", rank, s, kind);
  std::fflush(stderr);
  if (std::string(kind) == "kill") raise(SIGKILL);
  if (std::string(kind) == "exit") std::_Exit(9);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // hang
}

}  // namespace

Trainer::Trainer(config::TrainConfig cfg, layout::ParallelPlan plan, ModelBuilder build,
                 std::unique_ptr<data::Dataset> dataset, TrainOptions options, layout::Groups* groups)
    : cfg_(std::move(cfg)),
      build_(std::move(build)),
      dataset_(std::move(dataset)),
      options_(std::move(options)),
      groups_(groups),
      plan_(std::move(plan)),
      rows_per_sample_(spec::rows_per_sample(cfg_.model)) {
  if (!groups_) {
    own_groups_ = layout::make_single_process_groups();
    groups_ = &own_groups_;
  }
  TANDEM_CHECK(plan_.layout.dp == groups_->layout.dp && plan_.layout.pp == groups_->layout.pp &&
                   plan_.layout.cp == groups_->layout.cp && plan_.layout.tp == groups_->layout.tp &&
                   plan_.layout.ep == groups_->layout.ep,
               "groups built for ", groups_->layout.str(), ", the plan is for ", plan_.layout.str());
  layout::validate_for_model(plan_, cfg_.model, cfg_.batch.accum);
  // FP8's scales of a shard's tokens are those of one device's where its tiles of tokens fit the split.
  nn::check_fp8_context(cfg_.fp8, cfg_.batch.micro, spec::model_io(cfg_.model).seq_len, plan_.layout.cp);
  // Held-out data, drawn with the run's seed: synthetic data keeps its teacher (the function it learns), and a token
  // file's batch k is what training would draw at step k (the same file gives training's own first batches).
  if (cfg_.eval.enabled) eval_dataset_ = data::make_dataset(cfg_.eval.data, spec::model_io(cfg_.model), cfg_.seed);
}

Trainer::Trainer(config::TrainConfig cfg, layout::ParallelPlan plan, nn::Model model,
                 std::unique_ptr<data::Dataset> dataset, TrainOptions options, layout::Groups* groups)
    : Trainer(std::move(cfg), std::move(plan), single_use_builder(std::make_shared<nn::Model>(std::move(model))),
              std::move(dataset), std::move(options), groups) {}

Trainer Trainer::from_config(const config::TrainConfig& cfg, const layout::ParallelPlan& plan, TrainOptions options,
                             layout::Groups* groups) {
  auto dataset = data::make_dataset(cfg.data, spec::model_io(cfg.model), cfg.seed);
  auto build = [model = cfg.model, lora = cfg.lora, fp8 = cfg.fp8](nn::TpSlot tp) {
    return build_model(model, tp, lora, fp8);
  };
  return Trainer(cfg, plan, std::move(build), std::move(dataset), std::move(options), groups);
}

std::vector<StepMetrics> Trainer::run() {
  const RunChecks checks(cfg_, options_, *groups_, is_printer());
  checks.options();
  const std::string checkpoint = options_.resume.empty() ? "" : find_checkpoint(options_.resume);
  const int64_t start = checks.start(checkpoint, lock_);
  if (start >= cfg_.steps) {
    if (is_printer())
      std::printf("the checkpoint is at step %lld of %lld: nothing to train\n", static_cast<long long>(start),
                  static_cast<long long>(cfg_.steps));
    return {};
  }
  checks.data(*dataset_, "data");
  if (eval_dataset_) checks.data(*eval_dataset_, "eval data");
  setup();
  if (writer_) checks.disk(*writer_, start);
  restore(checkpoint);
  install_stop_handlers();
  std::vector<StepMetrics> history = loop(start);
  lock_ = RunFolderLock();
  return history;
}

void Trainer::setup() {
  const auto& b = cfg_.batch;
  const layout::Layout& l = groups_->layout;
  if (options_.diagnostics.profile) ops::profile::set_enabled(true);
  if (is_printer()) print_data(cfg_, *dataset_, eval_dataset_.get(), l);
  if (options_.device) {
    device_ = options_.device;
    if (cfg_.device_memory_bytes) device_->set_budget(cfg_.device_memory_bytes);
  } else {
    own_device_ = std::make_unique<device::CpuDevice>(cfg_.device_memory_bytes, groups_->rank);
    device_ = own_device_.get();
  }
  batches_ = std::make_unique<BatchMaker>(*device_, host_);

  parallel::EngineConfig ec;
  ec.plan = plan_;
  ec.zero_stage = static_cast<int>(cfg_.zero_stage);
  ec.seed = cfg_.seed;
  ec.optimizer = cfg_.optimizer;
  ec.micro_batch = b.micro;
  ec.micro_batches = b.accum;
  ec.gradient_clipping = cfg_.gradient_clipping;
  ec.compute = compute_dtype(cfg_);
  ec.tiles = cfg_.tiles;
  ec.fp16 = cfg_.fp16;
  ec.offload_optimizer = cfg_.offload_optimizer;
  ec.offload_param = cfg_.offload_param;
  ec.offload_run.update_thread = !ops::profile::enabled();  // the op profile times on one thread
  const data::Batch probe = dataset_->batch(0, 0, b.micro, host_);
  engine_ = std::make_unique<parallel::Engine>(build_, ec, *groups_, *device_, probe.inputs.shape());
  // The device's peak says in which action it came (report_run(): "rank 0 at its peak").
  parallel::pipeline::PipelineExecutor& executor = engine_->executor();
  executor.observe(std::make_unique<parallel::pipeline::ActionLabels>(*device_, executor.virtual_stages()));
  if (!options_.out_dir.empty()) {
    CheckpointWriterOptions w;
    w.root = (fs::path(options_.out_dir) / "checkpoints").string();
    w.keep = cfg_.checkpoint.keep;
    w.async = cfg_.checkpoint.async;
    w.print = is_printer();
    w.config = cfg_.raw;
    w.progress = checkpoint::ProgressOptions::from(options_.diagnostics);
    const FaultInjection& fault = options_.diagnostics.fault;
    if (fault.kind == "kill_in_write" && fault.rank == groups_->rank) w.kill_in_write_step = fault.step;
    writer_ = std::make_unique<CheckpointWriter>(*engine_, *groups_, w);
  }
  if (groups_->rank == 0 && (cfg_.tensorboard.enabled || cfg_.csv_monitor.enabled))
    monitor_ = std::make_unique<Monitor>(cfg_.tensorboard, cfg_.csv_monitor, options_.out_dir);
  if (is_printer()) print_setup(cfg_, plan_, l, *engine_, device_->kind(), monitor_.get());
}

void Trainer::restore(const std::string& checkpoint) {
  const checkpoint::ProgressOptions progress = checkpoint::ProgressOptions::from(options_.diagnostics);
  if (!checkpoint.empty()) {
    const int64_t step = load_checkpoint(checkpoint, *engine_, *groups_, progress);
    if (is_printer()) std::printf("resumed from %s at step %lld\n", checkpoint.c_str(), static_cast<long long>(step));
  }
  // --init, else model.from_pretrained for a run that does not resume (a checkpoint holds its own weights). Under
  // LoRA the checkpoint holds the adapters alone: the frozen base comes from model.from_pretrained again.
  const bool base_again = checkpoint.empty() || cfg_.lora.enabled;
  const std::string init = !options_.init.empty() ? options_.init : base_again ? cfg_.pretrained_dir : "";
  if (!init.empty()) {
    load_initial_weights(init, cfg_.model, *engine_, is_printer(), progress);
    if (is_printer()) std::printf("%s weights from %s\n", cfg_.lora.enabled ? "frozen base" : "initial", init.c_str());
  }
  if (cfg_.lora.enabled && checkpoint.empty() && !cfg_.lora.from_pretrained.empty()) {
    load_peft_adapter(cfg_.lora.from_pretrained, cfg_.model, cfg_.lora, *engine_);
    if (is_printer()) std::printf("LoRA adapters from %s\n", cfg_.lora.from_pretrained.c_str());
  }
}

std::vector<StepMetrics> Trainer::loop(int64_t start) {
  MetricsFile metrics = !options_.out_dir.empty() && groups_->rank == 0
                            ? MetricsFile(options_.out_dir, start, options_.predicted_peak_bytes)
                            : MetricsFile();
  const bool tokens = spec::model_io(cfg_.model).tokens;

  std::vector<StepMetrics> history;
  double elapsed = 0;
  for (int64_t step = start; step < cfg_.steps; ++step) {
    const bool writing = writer_ && writer_->writing();
    StepMetrics m = train_step(step, step == start);
    m.checkpoint_writing = writing;
    if (writer_) writer_->poll();  // a background write done on every rank becomes a complete checkpoint
    elapsed += m.step_seconds;
    if (eval_dataset_ && ((cfg_.eval.every > 0 && m.step % cfg_.eval.every == 0) || m.step == cfg_.steps)) {
      m.val_loss = evaluate(*engine_, cfg_.eval, *eval_dataset_, *batches_, cfg_.batch.global, rows_per_sample_);
      m.evaluated = true;
    }
    history.push_back(m);
    write_timeline(*engine_, m.step == cfg_.steps, options_.out_dir, groups_->rank, options_.diagnostics.timeline_step,
                   is_printer());
    const double eta = elapsed / static_cast<double>(history.size()) * static_cast<double>(cfg_.steps - m.step);
    if (is_printer() && m.skipped)
      print_skipped(m, cfg_.steps);
    else if (is_printer() &&
             (m.step % cfg_.steps_per_print == 0 || m.step == cfg_.steps || m.step == start + 1 || m.evaluated))
      print_progress(m, cfg_.steps, eta, tokens ? "tok" : "samples");
    // A stop signal on any rank stops every rank after this step.
    const bool stop = groups_->world->all_reduce_scalar(stop_requested() ? 1.0 : 0.0, comm::ReduceOp::Max) > 0;
    const bool due = cfg_.checkpoint.every > 0 && m.step % cfg_.checkpoint.every == 0;
    if (writer_ && (due || (m.step == cfg_.steps && cfg_.checkpoint.at_end) || stop)) {
      m.checkpoint_s = writer_->save(m.step);
      if (stop) m.checkpoint_s += writer_->finish();  // the job ends with its checkpoint complete
    }
    if (monitor_) monitor_->write(monitor_events(m, cfg_.fp16.enabled, tokens), m.step * cfg_.batch.global);
    metrics.write(m);
    if (stop) {
      if (is_printer()) std::printf("stopped by a signal after step %lld\n", static_cast<long long>(m.step));
      break;
    }
  }
  if (writer_) {
    const double waited = writer_->finish();
    if (is_printer() && waited > 0.05)
      std::printf("waited %s for the last checkpoint's background write\n", format_duration(waited).c_str());
  }
  report_run(history.empty() ? start : history.back().step, cfg_, plan_, *engine_, *device_, *groups_, is_printer());
  return history;
}

StepMetrics Trainer::train_step(int64_t step, bool first_of_run) {
  inject_fault(options_.diagnostics.fault, groups_->rank, step + 1);
  if (step + 1 == options_.diagnostics.timeline_step && (engine_->store().offloaded() || plan_.cpu_checkpointing))
    engine_->record_timeline();
  const auto t0 = std::chrono::steady_clock::now();
  const auto& b = cfg_.batch;
  const double rows = static_cast<double>(b.global * rows_per_sample_);
  // The loss is the mean over the targets that count in the whole global batch (every target without a loss mask),
  // so every layout divides by the same number; a batch in which none counts contributes nothing.
  const double counted =
      std::max(1.0, static_cast<double>(dataset_->counted_targets(step, 0, b.global).value_or(rows)));
  const double lr = optim::learning_rate(cfg_.scheduler, step);
  const parallel::StepResult r = engine_->step(
      [&](int64_t first, int64_t count) { return batches_->make(*dataset_, cfg_.data, step, first, count); },
      static_cast<float>(lr), counted, step);
  // The profile waits here for the step's queued op timings, so this step's time includes its last kernels.
  if (ops::profile::enabled()) ops::profile::end_step(t0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  StepMetrics m;
  m.step = step + 1;
  m.loss = r.loss_sum / counted;
  m.lr = lr;
  m.grad_norm = r.grad_norm;
  m.moe = r.moe;
  m.moe_balance_loss = r.moe_balance_loss;
  m.moe_max_load = r.moe_max_load;
  m.moe_layer_max_load = r.moe_layer_max_load;
  m.moe_layers = r.moe_layers;
  m.skipped = r.skipped;
  m.loss_scale = engine_->loss_scale();
  m.step_seconds = groups_->world->all_reduce_scalar(seconds, comm::ReduceOp::Max);
  m.tokens_per_s = rows / m.step_seconds;
  m.peak_bytes = static_cast<uint64_t>(
      groups_->world->all_reduce_scalar(static_cast<double>(device_->peak_bytes()), comm::ReduceOp::Max));
  if (!std::isfinite(m.loss) && first_of_run)
    TANDEM_FAIL("the loss is ", m.loss, " at step ", m.step,
                ", the first of this run, before any update: the weights it ", "started from (",
                !options_.init.empty()         ? "the --init file"
                : !options_.resume.empty()     ? "the checkpoint"
                : !cfg_.pretrained_dir.empty() ? "model.from_pretrained"
                                               : "initialised",
                ") or the data give non-finite values");
  if (!std::isfinite(m.loss))
    TANDEM_FAIL("the loss became ", m.loss, " at step ", m.step,
                ": lower optimizer.params.lr or set gradient_clipping");
  return m;
}

}  // namespace tandem::train
