// Byte counts as people write them ("512MiB", "1.5GB", "4096") and as we print them ("476.2 MiB").
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

// Parses "<number>[B|KB|MB|GB|TB|KiB|MiB|GiB|TiB]" (case-insensitive unit). Throws Error naming the text.
uint64_t parse_bytes(const std::string& text);
// 1536 -> "1.5 KiB"; always binary units, one decimal.
std::string format_bytes(uint64_t bytes);
// Seconds as "1h02m", "3m05s", "12.3s".
std::string format_duration(double seconds);

}  // namespace tandem
