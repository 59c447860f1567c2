// What the equivalence tests (test_equivalence.cc, test_context_parallel.cc, test_host_checkpoints.cc) run and compare:
// one training run of a config, in a layout of this process's groups or on one device, and a layout's run against the
// one device's within equivalence_bounds.h's bounds.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "equivalence_bounds.h"
#include "tandem/config/config.h"
#include "tandem/layout/groups.h"
#include "tandem/train/trainer.h"

namespace tandem {

struct Result {
  std::vector<double> losses, grad_norms;
  // A mixture of experts' metrics, each step's: moe_balance_loss, moe_max_load and moe_layer_max_load.
  std::vector<double> balance_losses, max_loads;
  std::vector<std::vector<double>> layer_max_loads;
  double val_loss = 0;  // "eval" after the last step
  std::map<std::string, std::vector<float>> params;
  uint64_t peak_bytes = 0;
};

// Trains cfg_json in the layout of `groups` (null: one device) and returns each step's figures and the final
// parameters (whole, on rank 0).
inline Result run_training(const config::Json& cfg_json, layout::Groups* groups) {
  const config::TrainConfig cfg = config::parse(config::validate(cfg_json), groups ? groups->layout.dp : 1);
  train::TrainOptions opt;
  opt.print = false;
  train::Trainer trainer = train::Trainer::from_config(
      cfg, layout::resolve_parallel(cfg.parallel, groups ? groups->layout.world() : 1), opt, groups);
  Result r;
  for (const auto& m : trainer.run()) {
    r.losses.push_back(m.loss);
    r.grad_norms.push_back(m.grad_norm);
    r.balance_losses.push_back(m.moe_balance_loss);
    r.max_loads.push_back(m.moe_max_load);
    r.layer_max_loads.push_back(m.moe_layer_max_load);
    r.peak_bytes = m.peak_bytes;
    if (m.evaluated) r.val_loss = m.val_loss;
  }
  r.params = trainer.engine().collect_parameters();
  return r;
}

// Counts which of two runs' losses, gradient norms, held-out loss and final parameters differ in any bit, with the
// test's failures for each (two runs that must compute the same: a setting that moves work, not what it computes).
inline int bit_differences(const Result& a, const Result& b) {
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.grad_norms, b.grad_norms);
  EXPECT_EQ(a.val_loss, b.val_loss);
  EXPECT_EQ(a.params, b.params);
  return (a.losses != b.losses) + (a.grad_norms != b.grad_norms) + (a.val_loss != b.val_loss) + (a.params != b.params);
}

// Trains cfg_json twice in the layout of `groups` and returns how many of the two runs' losses, gradient norms and
// final parameters differ (compared on rank 0, with gtest expectations there), the same number on every rank.
inline int runs_differ(const config::Json& cfg_json, layout::Groups& groups) {
  const Result first = run_training(cfg_json, &groups), second = run_training(cfg_json, &groups);
  int differ = 0;
  if (groups.world->rank() == 0) differ = bit_differences(first, second);
  return static_cast<int>(groups.world->all_reduce_scalar(differ));
}

// |a - b| / |b| over the two vectors.
inline double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// How far a run is from the one device's, relative, and how many of the bounds it passed.
struct Distance {
  double first_loss = 1, first_grad_norm = 1, worst_loss = 0, worst_tensor = 0, all = 0;
  int failures = 0;
};

// Checks `got` against the one device's `want` (gtest expectations naming what differs): the first step's loss and
// gradient norm, every step's loss, the held-out loss after the last step within val_bound, each parameter tensor and
// all parameters as one vector (each tensor too, so a wrong small tensor cannot hide in the whole: LayerNorm biases
// start at zero, so rounding weighs more in their own norm).
inline Distance compare_to_one_device(const Result& got, const Result& want, const Bounds& b, double val_bound) {
  Distance d;
  EXPECT_EQ(got.losses.size(), want.losses.size());
  if (!got.losses.empty() && !want.losses.empty()) {
    d.first_loss = std::fabs(got.losses[0] - want.losses[0]) / std::fabs(want.losses[0]);
    d.first_grad_norm = std::fabs(got.grad_norms[0] - want.grad_norms[0]) / std::fabs(want.grad_norms[0]);
  }
  EXPECT_LE(d.first_loss, b.first_loss) << "step 1 (the initial weights): loss";
  EXPECT_LE(d.first_grad_norm, b.first_grad_norm) << "step 1 (the initial weights): gradient norm";
  d.failures += (d.first_loss > b.first_loss) + (d.first_grad_norm > b.first_grad_norm);
  for (size_t i = 0; i < std::min(got.losses.size(), want.losses.size()); ++i) {
    const double r = std::fabs(got.losses[i] - want.losses[i]) / std::fabs(want.losses[i]);
    EXPECT_LE(r, b.loss) << "step " << i + 1 << ": " << got.losses[i] << " vs one device " << want.losses[i];
    d.failures += r > b.loss;
    d.worst_loss = std::max(d.worst_loss, r);
  }
  EXPECT_GT(want.val_loss, 0);
  const double val = std::fabs(got.val_loss - want.val_loss) / std::max(want.val_loss, 1e-30);
  EXPECT_LE(val, val_bound) << "eval after the last step: " << got.val_loss << " vs one device " << want.val_loss;
  d.failures += (val > val_bound) + (want.val_loss <= 0);
  EXPECT_EQ(got.params.size(), want.params.size());
  d.failures += got.params.size() != want.params.size();
  std::vector<float> all_got, all_want;
  for (const auto& [name, values] : want.params) {
    const auto it = got.params.find(name);
    EXPECT_NE(it, got.params.end()) << name;
    if (it == got.params.end()) {
      ++d.failures;
      continue;
    }
    const double r = rel(it->second, values);
    EXPECT_LE(r, b.tensor) << name;
    d.failures += r > b.tensor;
    d.worst_tensor = std::max(d.worst_tensor, r);
    all_got.insert(all_got.end(), it->second.begin(), it->second.end());
    all_want.insert(all_want.end(), values.begin(), values.end());
  }
  d.all = rel(all_got, all_want);
  EXPECT_LE(d.all, b.all) << "all parameters";
  d.failures += d.all > b.all;
  return d;
}

// A mixture of experts' metrics against the one device's, each step's within `bound` relative (gtest expectations
// naming what differs): the balance loss, the max over mean load summed over the layers, and each layer's. Returns
// how many differ.
inline int compare_moe_metrics(const Result& got, const Result& want, double bound) {
  int failures = 0;
  const auto check = [&](double g, double w, size_t step, const std::string& what) {
    const double r = std::fabs(g - w) / std::max(std::fabs(w), 1e-30);
    EXPECT_LE(r, bound) << "step " << step + 1 << ": " << what << " " << g << " vs one device " << w;
    failures += r > bound;
  };
  EXPECT_EQ(got.balance_losses.size(), want.balance_losses.size());
  failures += got.balance_losses.size() != want.balance_losses.size();
  for (size_t i = 0; i < std::min(got.balance_losses.size(), want.balance_losses.size()); ++i) {
    EXPECT_GT(want.balance_losses[i], 0) << "step " << i + 1 << ": the one device measured no balance";
    failures += want.balance_losses[i] <= 0;
    check(got.balance_losses[i], want.balance_losses[i], i, "moe_balance_loss");
    check(got.max_loads[i], want.max_loads[i], i, "moe_max_load");
    EXPECT_EQ(got.layer_max_loads[i].size(), want.layer_max_loads[i].size()) << "step " << i + 1 << ": MoE layers";
    failures += got.layer_max_loads[i].size() != want.layer_max_loads[i].size();
    for (size_t l = 0; l < std::min(got.layer_max_loads[i].size(), want.layer_max_loads[i].size()); ++l)
      check(got.layer_max_loads[i][l], want.layer_max_loads[i][l], i, "moe_layer_max_load[" + std::to_string(l) + "]");
  }
  return failures;
}

}  // namespace tandem
