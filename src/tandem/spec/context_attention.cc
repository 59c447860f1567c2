// The context attention's names and the rule auto follows: the only place they are spelt.
#include "tandem/spec/context_attention.h"

#include "tandem/core/error.h"

namespace tandem::spec {

namespace {
constexpr ContextAttention kAll[] = {ContextAttention::Auto, ContextAttention::Heads, ContextAttention::Ring};
}  // namespace

std::string context_attention_name(ContextAttention a) {
  switch (a) {
    case ContextAttention::Auto:
      return "auto";
    case ContextAttention::Heads:
      return "heads";
    case ContextAttention::Ring:
      return "ring";
  }
  TANDEM_CHECK(false, "unhandled ContextAttention ", static_cast<int>(a));
}

std::vector<std::string> context_attention_names() {
  std::vector<std::string> names;
  for (const ContextAttention a : kAll) names.push_back(context_attention_name(a));
  return names;
}

bool heads_split(int64_t heads, int64_t kv_heads, int cp) {
  return heads % cp == 0 && (kv_heads % cp == 0 || cp % kv_heads == 0);
}

ContextAttention context_attention_used(ContextAttention request, int64_t heads, int64_t kv_heads, int cp) {
  if (request != ContextAttention::Auto) return request;
  return heads_split(heads, kv_heads, cp) ? ContextAttention::Heads : ContextAttention::Ring;
}

}  // namespace tandem::spec
