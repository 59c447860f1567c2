// How attention runs under context parallelism (parallel.context_attention), as one enum from the config down to the
// blocks, its one spelling, and the rule auto follows: "heads" regroups each sequence by heads with all-to-all
// (DeepSpeed's Ulysses), "ring" keeps each shard's tokens of every head and passes key/value blocks around the cp
// group (nn/ring_attention.h), "auto" takes heads where a slot's heads split over the shards and ring otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::spec {

enum class ContextAttention { Auto, Heads, Ring };

std::string context_attention_name(ContextAttention a);  // "auto" | "heads" | "ring"
std::vector<std::string> context_attention_names();      // every name, in the enum's order

// Whether attention by heads can regroup one tensor-parallel slot's `heads` query heads over `kv_heads` key/value
// heads across `cp` shards: each shard needs whole query heads (cp divides heads) and the one or more kv heads they use
// (cp divides kv_heads, or cp is a multiple of kv_heads and each kv head is repeated over the shards that share it).
// The one place for this rule (nn/context_split.h repeats the heads, check_context refuses by it).
bool heads_split(int64_t heads, int64_t kv_heads, int cp);

// The attention a slot of `heads` over `kv_heads` runs at context size `cp` > 1 under `request`: Heads or Ring, never
// Auto (auto: heads where heads_split, ring otherwise).
ContextAttention context_attention_used(ContextAttention request, int64_t heads, int64_t kv_heads, int cp);

}  // namespace tandem::spec
