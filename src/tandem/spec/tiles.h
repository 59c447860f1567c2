// "tiles": how many tokens the long-sequence passes take at once, the loss's chunks of logits and the blocks' MLP
// tiles (nn/tiles.h has the rules that choose them; docs/long-context.md says when to set them), and the memory a
// block of the deterministic attention backward takes on a GPU. 0: the rule's choice.
#pragma once

#include <cstdint>

namespace tandem::spec {

struct Tiles {
  int64_t loss_tokens = 0;  // rows of logits a head makes at once (nn::head_loss)
  int64_t mlp_tokens = 0;   // rows a block's MLP runs at once (LlamaBlock)
  // Bytes of dP a block of the CUDA deterministic attention backward may take (ops.h's block_bytes; 0: the rule's 4
  // GiB, or more where the preflight finds room: ops/cuda/scratch_sizes.h, plan/preflight.cc).
  int64_t attention_block_bytes = 0;
};

}  // namespace tandem::spec
