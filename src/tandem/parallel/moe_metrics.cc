// The step's mixture-of-experts metrics (moe_metrics.h).
#include "tandem/parallel/moe_metrics.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem::parallel {
namespace {

// The most-chosen expert's choices over the mean expert's, of counts (E); 0 where nothing was counted.
double max_over_mean(const double* counts, int64_t experts) {
  double total = 0, most = 0;
  for (int64_t e = 0; e < experts; ++e) {
    total += counts[e];
    most = std::max(most, counts[e]);
  }
  return total > 0 ? most * static_cast<double>(experts) / total : 0.0;
}

}  // namespace

MoeMetrics moe_metrics(const std::vector<std::shared_ptr<const nn::MoeBalance>>& balances, layout::Groups& groups,
                       Device& device) {
  TANDEM_CHECK(!balances.empty() && balances.front() && balances.front()->layer_counts.defined(),
               "moe_metrics: no per-layer balance sums for the step");
  const int64_t L = balances.front()->layer_counts.dim(0), E = balances.front()->layer_counts.dim(1);
  const auto M = static_cast<int64_t>(balances.size());
  const int64_t dp = groups.layout.dp;
  // One vector summed over the world: [0, L E) the layers' counts over the step, (L, E); then for each replica d and
  // micro-batch m, slot d M + m, its counts and probability sums over the MoE layers, (dp, M, 2, E).
  const int64_t per_layer = L * E, slot = 2 * E;
  std::vector<float> sums(static_cast<size_t>(per_layer + dp * M * slot), 0.0f);
  if (groups.coord.tp == 0) {
    std::vector<double> layers(static_cast<size_t>(per_layer), 0.0);
    for (int64_t m = 0; m < M; ++m) {
      TANDEM_CHECK(balances[m], "moe_metrics: micro-batch ", m, " brought no balance sums");
      const std::vector<float> c = balances[m]->layer_counts.to_host_floats(),
                               p = balances[m]->layer_probsum.to_host_floats();
      std::vector<double> count(static_cast<size_t>(E), 0.0), prob(static_cast<size_t>(E), 0.0);
      for (int64_t l = 0; l < L; ++l)
        for (int64_t e = 0; e < E; ++e) {
          layers[l * E + e] += c[l * E + e];
          count[e] += c[l * E + e];
          prob[e] += p[l * E + e];
        }
      float* out = sums.data() + per_layer + (groups.coord.dp * M + m) * slot;
      for (int64_t e = 0; e < E; ++e) {
        out[e] = static_cast<float>(count[e]);
        out[E + e] = static_cast<float>(prob[e]);
      }
    }
    for (int64_t i = 0; i < per_layer; ++i) sums[i] = static_cast<float>(layers[i]);
  }
  const PurposeScope scope(device, MemoryPurpose::Other);
  Tensor t = Tensor::empty({static_cast<int64_t>(sums.size())}, DType::F32, device, "moe metric sums");
  t.copy_from_host(sums.data());
  groups.world->all_reduce(t);
  const std::vector<float> host = t.to_host_floats();
  const std::vector<double> all(host.begin(), host.end());

  MoeMetrics r;
  std::vector<double> counts(static_cast<size_t>(E), 0.0);
  for (int64_t l = 0; l < L; ++l) {
    r.layer_max_load.push_back(max_over_mean(all.data() + l * E, E));
    for (int64_t e = 0; e < E; ++e) counts[e] += all[l * E + e];
  }
  r.max_load = max_over_mean(counts.data(), E);
  // aux = E sum_e C_e P_e / R^2 for each micro-batch, R its whole sequences' tokens x MoE layers.
  const double rows = static_cast<double>(balances.front()->rows), n = static_cast<double>(dp * M);
  for (int64_t s = 0; s < dp * M; ++s) {
    const double* c = all.data() + per_layer + s * slot;
    double dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += c[e] * c[E + e];
    r.balance_loss += static_cast<double>(E) * dot / (rows * rows) / n;
  }
  return r;
}

}  // namespace tandem::parallel
