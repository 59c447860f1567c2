// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011): the value at a counter depends only
// on (key, counter), so any device can produce any slice of a tensor's initial values on its own.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace tandem {

using PhiloxBlock = std::array<uint32_t, 4>;

// Ten rounds of Philox4x32 on `counter` under the 64-bit `key`.
PhiloxBlock philox4x32(PhiloxBlock counter, uint64_t key);

// FNV-1a 64-bit hash of a name: the stream id of a parameter.
uint64_t hash_name(std::string_view name);

// Uniform in (0, 1]: never 0, so log() is safe.
inline float uniform_from_bits(uint32_t bits) { return (static_cast<float>(bits >> 8) + 1.0f) * (1.0f / 16777216.0f); }

// N(0, 1) for element `index` of the stream `stream` under `seed` (Box-Muller on one Philox block).
float normal_at(uint64_t seed, uint64_t stream, uint64_t index);
// U(0, 1] for element `index`; the same block as normal_at, a different word.
float uniform_at(uint64_t seed, uint64_t stream, uint64_t index);
// A 64-bit integer for element `index`.
uint64_t bits64_at(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace tandem
