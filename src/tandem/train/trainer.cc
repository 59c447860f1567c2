#include "tandem/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tandem/core/units.h"
#include "tandem/nn/loss.h"
#include "tandem/optim/adamw.h"
#include "tandem/optim/clip.h"
#include "tandem/optim/schedule.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/train_state.h"

namespace tandem::train {

namespace fs = std::filesystem;

namespace {

optim::ScheduleConfig schedule_config(const config::TrainConfig& c) {
  optim::ScheduleConfig s;
  s.type = c.scheduler.type;
  s.lr = c.optimizer.lr;
  s.warmup_steps = c.scheduler.warmup_num_steps;
  s.warmup_min_lr = c.scheduler.warmup_min_lr;
  s.total_steps = c.scheduler.total_num_steps;
  s.warmup_min_ratio = c.scheduler.warmup_min_ratio;
  s.cos_min_ratio = c.scheduler.cos_min_ratio;
  return s;
}

std::vector<optim::Segment> parameter_segments(const nn::Model& model) {
  std::vector<optim::Segment> segs;
  for (nn::Parameter* p : model.parameters())
    segs.push_back({p->name, p->value.view({p->value.numel()}), p->grad.view({p->grad.numel()}), p->decay});
  return segs;
}

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

void print_progress(const StepMetrics& m, int64_t total, double eta_s) {
  std::printf("step %lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | peak %s | ETA %s\n",
              static_cast<long long>(m.step), static_cast<long long>(total), m.loss, m.lr, m.grad_norm, m.tokens_per_s,
              format_bytes(m.peak_bytes).c_str(), format_duration(eta_s).c_str());
  std::fflush(stdout);
}

}  // namespace

Trainer::Trainer(config::TrainConfig cfg, nn::Model model, std::unique_ptr<data::Dataset> dataset, TrainOptions options)
    : cfg_(std::move(cfg)),
      options_(std::move(options)),
      device_(std::make_unique<device::CpuDevice>(cfg_.device_memory_bytes)),
      model_(std::move(model)),
      dataset_(std::move(dataset)),
      rows_per_sample_(cfg_.model.is_object() ? rows_per_sample(cfg_.model) : 1),
      activation_checkpointing_(cfg_.parallel.is_object() && cfg_.parallel.value("activation_checkpointing", false)) {}

Trainer Trainer::from_config(const config::TrainConfig& cfg, TrainOptions options) {
  nn::Model model = build_model(cfg.model);
  auto dataset = data::make_dataset(cfg.data, model_io(cfg.model), cfg.seed);
  return Trainer(cfg, std::move(model), std::move(dataset), std::move(options));
}

std::vector<StepMetrics> Trainer::run() {
  const auto& b = cfg_.batch;
  if (options_.print) {
    std::printf("model: %s, %lld parameters (%s fp32)\n", cfg_.model_type.c_str(),
                static_cast<long long>(model_.num_parameters()),
                format_bytes(static_cast<uint64_t>(model_.num_parameters()) * 4).c_str());
    std::printf("data: %s\n", dataset_->describe().c_str());
    std::printf("batch: %lld = micro %lld x accumulation %lld x data-parallel %lld; %lld steps; device %s%s\n",
                static_cast<long long>(b.global), static_cast<long long>(b.micro), static_cast<long long>(b.accum),
                static_cast<long long>(cfg_.data_parallel), static_cast<long long>(cfg_.steps), device_->name().c_str(),
                cfg_.device_memory_bytes ? (" (budget " + format_bytes(cfg_.device_memory_bytes) + ")").c_str() : "");
    std::fflush(stdout);
  }
  model_.materialize(*device_, cfg_.seed);
  optim::AdamWConfig ac;
  ac.lr = static_cast<float>(cfg_.optimizer.lr);
  ac.beta1 = static_cast<float>(cfg_.optimizer.beta1);
  ac.beta2 = static_cast<float>(cfg_.optimizer.beta2);
  ac.eps = static_cast<float>(cfg_.optimizer.eps);
  ac.weight_decay = static_cast<float>(cfg_.optimizer.weight_decay);
  optimizer_ = std::make_unique<optim::AdamW>(parameter_segments(model_), ac);

  int64_t start = 0;
  if (!options_.resume.empty()) {
    const std::string ckpt = find_checkpoint(options_.resume);
    start = load_checkpoint(ckpt, model_, *optimizer_);
    if (options_.print) std::printf("resumed from %s at step %lld\n", ckpt.c_str(), static_cast<long long>(start));
  }

  std::ofstream metrics;
  const fs::path out(options_.out_dir);
  if (!options_.out_dir.empty()) {
    fs::create_directories(out);
    if (start > 0) truncate_metrics(out / "metrics.jsonl", start);
    metrics.open(out / "metrics.jsonl", start > 0 ? std::ios::app : std::ios::trunc);
    if (!metrics) TANDEM_FAIL("cannot write '", (out / "metrics.jsonl").string(), "'");
  }

  std::vector<StepMetrics> history;
  double elapsed = 0;
  for (int64_t step = start; step < cfg_.steps; ++step) {
    StepMetrics m = train_step(step);
    elapsed += m.step_seconds;
    history.push_back(m);
    const double eta = elapsed / static_cast<double>(history.size()) * static_cast<double>(cfg_.steps - m.step);
    if (options_.print && (m.step % cfg_.steps_per_print == 0 || m.step == cfg_.steps || m.step == start + 1))
      print_progress(m, cfg_.steps, eta);
    if (metrics.is_open()) {
      metrics << config::Json{{"step", m.step},
                              {"loss", m.loss},
                              {"lr", m.lr},
                              {"grad_norm", m.grad_norm},
                              {"step_s", m.step_seconds},
                              {"tokens_per_s", m.tokens_per_s},
                              {"peak_bytes", m.peak_bytes}}
                     .dump()
              << "\n";
      metrics.flush();
    }
    const bool due = cfg_.checkpoint.every > 0 && m.step % cfg_.checkpoint.every == 0;
    if (!options_.out_dir.empty() && (due || m.step == cfg_.steps)) {
      const std::string dir = save_checkpoint((out / "checkpoints").string(), m.step, model_, *optimizer_, cfg_.raw,
                                              static_cast<int>(cfg_.checkpoint.keep));
      if (options_.print) std::printf("saved checkpoint %s\n", dir.c_str());
    }
  }
  if (options_.print)
    std::printf("done: %lld steps; peak memory on %s: %s\n", static_cast<long long>(cfg_.steps),
                device_->name().c_str(), format_bytes(device_->peak_bytes()).c_str());
  return history;
}

StepMetrics Trainer::train_step(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto& b = cfg_.batch;
  const double rows = static_cast<double>(b.global * rows_per_sample_);
  model_.zero_grad();
  double loss_sum = 0;
  for (int64_t micro = 0; micro < b.accum; ++micro) {
    data::Batch batch = dataset_->batch(step, micro * b.micro, b.micro, *device_);
    std::vector<nn::Saved> saved;
    Tensor logits = model_.forward(batch.inputs, saved, activation_checkpointing_);
    loss_sum += nn::cross_entropy_sum_and_grad(logits, batch.targets, rows);
    model_.backward(logits, saved, activation_checkpointing_);
  }
  const double norm = std::sqrt(optim::sum_of_squares({model_.flat_grads()}));
  const double lr = optim::learning_rate(schedule_config(cfg_), step);
  optimizer_->step(static_cast<float>(lr), optim::clip_coefficient(norm, cfg_.gradient_clipping));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  StepMetrics m;
  m.step = step + 1;
  m.loss = loss_sum / rows;
  m.lr = lr;
  m.grad_norm = norm;
  m.step_seconds = seconds;
  m.tokens_per_s = rows / seconds;
  m.peak_bytes = device_->peak_bytes();
  if (!std::isfinite(m.loss))
    TANDEM_FAIL("the loss became ", m.loss, " at step ", m.step,
                ": lower optimizer.params.lr or set gradient_clipping");
  return m;
}

}  // namespace tandem::train
