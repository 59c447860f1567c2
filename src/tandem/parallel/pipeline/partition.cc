#include "tandem/parallel/pipeline/partition.h"

#include <algorithm>
#include <limits>

namespace tandem::parallel::pipeline {

std::vector<LayerRange> balance_by_parameters(const nn::Model& model, int chunks) {
  // Atoms: a layer with parameters and the parameter-free layers that follow it.
  std::vector<size_t> atom_begin;
  std::vector<int64_t> atom_params;
  const auto& layers = model.layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    int64_t n = 0;
    for (nn::Parameter* p : layers[i]->parameters()) n += shape_numel(p->shape);
    if (atom_begin.empty() || n > 0) {
      atom_begin.push_back(i);
      atom_params.push_back(n);
    } else {
      atom_params.back() += n;
    }
  }
  const int A = static_cast<int>(atom_begin.size());
  if (chunks > A) TANDEM_FAIL("the model has ", A, " layers with parameters, too few for ", chunks, " pipeline stages");
  // best[k][a]: the smallest possible largest chunk when the first a atoms form k chunks.
  std::vector<int64_t> prefix(static_cast<size_t>(A) + 1, 0);
  for (int a = 0; a < A; ++a) prefix[a + 1] = prefix[a] + atom_params[a];
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(chunks + 1, std::vector<int64_t>(A + 1, inf));
  std::vector<std::vector<int>> cut(chunks + 1, std::vector<int>(A + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= chunks; ++k)
    for (int a = k; a <= A; ++a)
      for (int j = k - 1; j < a; ++j) {
        if (best[k - 1][j] == inf) continue;
        const int64_t v = std::max(best[k - 1][j], prefix[a] - prefix[j]);
        if (v < best[k][a]) {
          best[k][a] = v;
          cut[k][a] = j;
        }
      }
  std::vector<LayerRange> ranges(static_cast<size_t>(chunks));
  int a = A;
  for (int k = chunks; k >= 1; --k) {
    const int j = cut[k][a];
    const size_t first = atom_begin[j];
    const size_t last = a == A ? layers.size() : atom_begin[a];
    ranges[k - 1] = {first, last};
    a = j;
  }
  return ranges;
}

std::vector<LayerRange> gpt_stage_map(const nn::Model& model, const std::vector<std::pair<int64_t, int64_t>>& blocks,
                                      size_t blocks_begin) {
  std::vector<LayerRange> ranges;
  for (size_t c = 0; c < blocks.size(); ++c) {
    size_t first = blocks_begin + static_cast<size_t>(blocks[c].first);
    size_t last = blocks_begin + static_cast<size_t>(blocks[c].second) + 1;
    if (c == 0) first = 0;
    if (c + 1 == blocks.size()) last = model.layers().size();
    ranges.emplace_back(first, last);
  }
  return ranges;
}

}  // namespace tandem::parallel::pipeline
