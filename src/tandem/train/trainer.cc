#include "tandem/train/trainer.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tandem/core/units.h"
#include "tandem/ops/profile.h"
#include "tandem/optim/schedule.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/compute_dtype.h"
#include "tandem/train/evaluate.h"
#include "tandem/train/lora_weights.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/run_checks.h"
#include "tandem/train/stop_signal.h"

namespace tandem::train {

namespace fs = std::filesystem;

namespace {

// Keeps the lines of an earlier metrics.jsonl up to `last_step`, so a resumed run continues the same file.
void truncate_metrics(const fs::path& path, int64_t last_step) {
  std::vector<std::string> kept;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    try {
      if (config::Json::parse(line).at("step").get<int64_t>() <= last_step) kept.push_back(line);
    } catch (const std::exception&) {
      // A torn last line from a killed run: drop it.
    }
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : kept) out << l << "\n";
}

void print_progress(const StepMetrics& m, int64_t total, double eta_s, const char* unit) {
  char val[48] = "";
  if (m.evaluated) std::snprintf(val, sizeof val, " | val_loss %.4f", m.val_loss);
  std::printf("step %lld/%lld | loss %.4f%s | lr %.2e | grad norm %.3f | %.0f %s/s | peak %s | ETA %s\n",
              static_cast<long long>(m.step), static_cast<long long>(total), m.loss, val, m.lr, m.grad_norm,
              m.tokens_per_s, unit, format_bytes(m.peak_bytes).c_str(), format_duration(eta_s).c_str());
  std::fflush(stdout);
}

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
                   plan_.layout.cp == groups_->layout.cp && plan_.layout.tp == groups_->layout.tp,
               "groups built for ", groups_->layout.str(), ", the plan is for ", plan_.layout.str());
  layout::validate_for_model(plan_, cfg_.model, cfg_.batch.accum);
  // FP8 takes its scales over whole activations, which a context shard does not see.
  if (plan_.layout.cp > 1 && cfg_.fp8.enabled)
    TANDEM_FAIL("\"fp8\" with parallel.context ", plan_.layout.cp,
                ": FP8's scales are taken over whole activations, which context parallelism splits over devices, and "
                "that reduction is not built yet; remove one of them");
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
  if (is_printer()) {
    std::printf("data: %s\n", dataset_->describe().c_str());
    if (eval_dataset_)
      std::printf("eval: %s; %lld batches every %s\n", eval_dataset_->describe().c_str(),
                  static_cast<long long>(cfg_.eval.steps),
                  cfg_.eval.every > 0 ? (std::to_string(cfg_.eval.every) + " steps and after the last").c_str()
                                      : "run, after the last step");
    std::printf("batch: %lld = micro %lld x accumulation %lld x virtual GPUs %lld; %lld steps\n",
                static_cast<long long>(b.global), static_cast<long long>(b.micro), static_cast<long long>(b.accum),
                static_cast<long long>(l.dp), static_cast<long long>(cfg_.steps));
    std::fflush(stdout);
  }
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
  const data::Batch probe = dataset_->batch(0, 0, b.micro, host_);
  engine_ = std::make_unique<parallel::Engine>(build_, ec, *groups_, *device_, probe.inputs.shape());
  // The device's peak says in which action it came (report(): "rank 0 at its peak").
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
  if (is_printer()) {
    std::printf("model: %s; layout %s (%d device%s as %d virtual GPU%s of %d), ZeRO stage %lld, %s compute%s\n",
                spec::model_type(cfg_.model).c_str(), l.str().c_str(), l.world(), l.world() == 1 ? "" : "s", l.dp,
                l.dp == 1 ? "" : "s", l.vgpu_size(), static_cast<long long>(cfg_.zero_stage),
                dtype_name(ec.compute).c_str(),
                !plan_.activation_checkpointing ? ""
                : plan_.cpu_checkpointing       ? ", activation checkpointing (the inputs in host memory)"
                                                : ", activation checkpointing");
    if (cfg_.offload_optimizer.enabled()) {
      const bool gpu = device_->kind() == DeviceKind::Cuda;  // a CPU device's host memory is plain either way
      const auto where = [gpu](const spec::OffloadConfig& o) {
        return o.device == spec::OffloadDevice::Cpu
                   ? std::string(o.pin_memory && gpu ? "page-locked host memory" : "host memory")
                   : "swap files in " + o.nvme_path;
      };
      std::printf("offload: the optimizer state%s and its AdamW in %s",
                  cfg_.offload_optimizer.ratio < 1 ? " (part)" : "", where(cfg_.offload_optimizer).c_str());
      if (cfg_.offload_param.enabled()) std::printf("; the parameters in %s", where(cfg_.offload_param).c_str());
      std::printf("\n");
    }
    std::printf("%s", layout::describe_rank_map(l, device_->kind() == DeviceKind::Cpu ? "cpu:" : "cuda:").c_str());
    std::printf("%s", engine_->describe_stages().c_str());
    if (cfg_.lora.enabled) std::printf("%s", describe_lora().c_str());
    if (cfg_.fp8.enabled) std::printf("%s", describe_fp8().c_str());
    if (l.pp > 1)
      std::printf("  schedule: %s, %lld micro-batches per step\n", spec::schedule_name(plan_.schedule).c_str(),
                  static_cast<long long>(b.accum));
    if (monitor_) std::printf("%s", monitor_->describe().c_str());
    if (ops::profile::enabled())
      std::printf(
          "op profile on (TANDEM_PROFILE): every op is timed, the table follows the run; the timing slows "
          "the steps, so take speeds from a run without it\n");
    std::fflush(stdout);
  }
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
  std::ofstream metrics;
  const fs::path out(options_.out_dir);
  if (!options_.out_dir.empty() && groups_->rank == 0) {
    fs::create_directories(out);
    if (start > 0) truncate_metrics(out / "metrics.jsonl", start);
    metrics.open(out / "metrics.jsonl", start > 0 ? std::ios::app : std::ios::trunc);
    if (!metrics) TANDEM_FAIL("cannot write '", (out / "metrics.jsonl").string(), "'");
  }

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
    write_timeline(m.step == cfg_.steps);
    const double eta = elapsed / static_cast<double>(history.size()) * static_cast<double>(cfg_.steps - m.step);
    if (is_printer() && m.skipped)
      std::printf("step %lld/%lld | fp16 overflow (grad norm %g): update skipped, loss scale now %g\n",
                  static_cast<long long>(m.step), static_cast<long long>(cfg_.steps), m.grad_norm, m.loss_scale);
    else if (is_printer() &&
             (m.step % cfg_.steps_per_print == 0 || m.step == cfg_.steps || m.step == start + 1 || m.evaluated))
      print_progress(m, cfg_.steps, eta, spec::model_io(cfg_.model).tokens ? "tok" : "samples");
    // A stop signal on any rank stops every rank after this step.
    const bool stop = groups_->world->all_reduce_scalar(stop_requested() ? 1.0 : 0.0, comm::ReduceOp::Max) > 0;
    const bool due = cfg_.checkpoint.every > 0 && m.step % cfg_.checkpoint.every == 0;
    if (writer_ && (due || (m.step == cfg_.steps && cfg_.checkpoint.at_end) || stop)) {
      m.checkpoint_s = writer_->save(m.step);
      if (stop) m.checkpoint_s += writer_->finish();  // the job ends with its checkpoint complete
    }
    if (monitor_) monitor_->write(monitor_events(m), m.step * cfg_.batch.global);
    if (metrics.is_open()) {
      config::Json line = {{"step", m.step},
                           {"loss", m.loss},
                           {"lr", m.lr},
                           {"grad_norm", m.grad_norm},
                           {"step_s", m.step_seconds},
                           {"tokens_per_s", m.tokens_per_s},
                           {"peak_bytes", m.peak_bytes},
                           {"loss_scale", m.loss_scale},
                           {"skipped", m.skipped}};
      if (options_.predicted_peak_bytes > 0) line["predicted_peak_bytes"] = options_.predicted_peak_bytes;
      if (m.evaluated) line["val_loss"] = m.val_loss;
      if (m.checkpoint_s > 0) line["checkpoint_s"] = m.checkpoint_s;
      if (m.checkpoint_writing) line["checkpoint_writing"] = true;
      if (m.moe) line.update({{"moe_balance_loss", m.moe_balance_loss}, {"moe_max_load", m.moe_max_load}});
      metrics << line.dump() << "\n";
      metrics.flush();
    }
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
  report(history.empty() ? start : history.back().step);
  return history;
}

std::vector<MonitorEvent> Trainer::monitor_events(const StepMetrics& m) const {
  // DeepSpeed's tags where it has them (train_loss, lr, loss_scale with fp16), then Tandem's under the same prefix.
  std::vector<MonitorEvent> e = {{"Train/Samples/train_loss", m.loss}, {"Train/Samples/lr", m.lr}};
  if (cfg_.fp16.enabled) e.push_back({"Train/Samples/loss_scale", m.loss_scale});
  e.push_back({"Train/Samples/grad_norm", m.grad_norm});
  if (m.evaluated) e.push_back({"Train/Samples/val_loss", m.val_loss});
  e.push_back({spec::model_io(cfg_.model).tokens ? "Train/Samples/tokens_per_s" : "Train/Samples/samples_per_s",
               m.tokens_per_s});
  e.push_back({"Train/Samples/peak_memory_bytes", static_cast<double>(m.peak_bytes)});
  if (m.moe)
    e.insert(e.end(),
             {{"Train/Samples/moe_balance_loss", m.moe_balance_loss}, {"Train/Samples/moe_max_load", m.moe_max_load}});
  return e;
}

void Trainer::report(int64_t last_step) {
  const layout::Layout& l = groups_->layout;
  // Each device's peak, gathered to rank 0 one rank at a time (a handful of scalars).
  std::vector<double> peaks, host_peaks;
  for (int r = 0; r < l.world(); ++r)
    peaks.push_back(groups_->world->all_reduce_scalar(
        r == groups_->rank ? static_cast<double>(device_->peak_bytes()) : 0.0, comm::ReduceOp::Sum));
  if (const device::AccountedDevice* host = engine_->host_memory())
    for (int r = 0; r < l.world(); ++r)
      host_peaks.push_back(groups_->world->all_reduce_scalar(
          r == groups_->rank ? static_cast<double>(host->peak_bytes()) : 0.0, comm::ReduceOp::Sum));
  if (!is_printer()) return;
  std::printf("done: %lld steps. Peak memory per device:", static_cast<long long>(last_step));
  for (int r = 0; r < l.world(); ++r)
    std::printf(" %s%d %s%s", device_->kind() == DeviceKind::Cpu ? "cpu:" : "rank ", r,
                format_bytes(static_cast<uint64_t>(peaks[r])).c_str(), r + 1 < l.world() ? "," : "");
  if (cfg_.device_memory_bytes) std::printf(" (budget %s each)", format_bytes(cfg_.device_memory_bytes).c_str());
  std::printf("\n");
  if (!host_peaks.empty()) {
    const bool inputs = plan_.activation_checkpointing && plan_.cpu_checkpointing;
    const bool state = cfg_.offload_optimizer.enabled();
    std::printf("%s in host memory, peak per rank:", !inputs ? "offloaded state"
                                                     : state ? "offloaded state and checkpointed layer inputs"
                                                             : "checkpointed layer inputs");
    for (int r = 0; r < l.world(); ++r)
      std::printf(" %d %s%s", r, format_bytes(static_cast<uint64_t>(host_peaks[r])).c_str(),
                  r + 1 < l.world() ? "," : "");
    std::printf("\n");
  }
  // What rank 0 held at its peak and when, in the planner's terms (`tandem plan --explain` gives the prediction).
  std::printf("rank 0 at its peak (%s): %s\n", device_->peak_label().empty() ? "setup" : device_->peak_label().c_str(),
              device_->at_peak().describe().c_str());
  if (ops::profile::enabled()) std::printf("%s", ops::profile::table(ops::profile::summary(), "rank 0").c_str());
  std::fflush(stdout);
}

void Trainer::write_timeline(bool at_end) {
  std::unique_ptr<parallel::Timeline> t = engine_->take_timeline(at_end);
  if (!t) return;
  const fs::path dir = options_.out_dir.empty() ? fs::path(".") : fs::path(options_.out_dir);
  const fs::path file = dir / ("timeline_rank" + std::to_string(groups_->rank) + ".json");
  std::ofstream(file) << t->chrome_trace(groups_->rank);
  if (is_printer())
    std::printf("offload timeline of step %lld (rank 0, %s; chrome://tracing reads it): %s\n",
                static_cast<long long>(options_.diagnostics.timeline_step), file.string().c_str(),
                t->summary().c_str());
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
