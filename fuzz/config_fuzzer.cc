// Fuzz target for the config layer: overrides, validate() and the typed view on arbitrary JSON, and
// load_config() on the same text through a file, which must agree with the in-memory path.
//
// Input layout: the config's JSON text, then up to kMaxOverrides "a.b=value" overrides, each introduced by a
// NUL byte (JSON text never holds a raw NUL, so the split is unambiguous). An even first byte (whitespace,
// say) also sends the text through load_config(), so the seeds come in both parities. A config validate()
// accepts also goes through parse() for size % 4 + 1 data-parallel ranks, so a saved input must stay
// byte-exact.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "harness.h"
#include "tandem/config/config.h"
#include "tandem/core/error.h"

namespace {

using tandem::config::Json;

constexpr size_t kMaxOverrides = 16;

// How a pass over the config ended; the two paths must end the same way.
struct Outcome {
  enum Kind { kValid, kTandemError, kJsonError } kind;
  Json value;  // the validated config when kind == kValid
};

const char* kind_name(Outcome::Kind k) {
  return k == Outcome::kValid ? "valid" : k == Outcome::kTandemError ? "tandem::Error" : "nlohmann exception";
}

// Anything but these two exception types escapes and libFuzzer reports it as a crash.
template <class F>
Outcome outcome_of(F&& f) {
  try {
    return {Outcome::kValid, f()};
  } catch (const tandem::Error&) {
    return {Outcome::kTandemError, Json()};
  } catch (const Json::exception&) {
    return {Outcome::kJsonError, Json()};
  }
}

// parse() re-validates, resolves batch sizes and reads every key with nlohmann's typed getters. On a config
// validate() accepted, only a batch-size Error is expected; a nlohmann exception here means validate()
// let through a value the typed view cannot read, so it is not caught.
void exercise_typed_view(const Json& validated, int64_t dp) {
  try {
    const tandem::config::TrainConfig tc = tandem::config::parse(validated, dp);
    if (tc.batch.global != tc.batch.micro * tc.batch.accum * dp)
      tandem::fuzz::violated("parse(): train_batch_size " + std::to_string(tc.batch.global) + " != micro * accum * dp");
  } catch (const tandem::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string text(input.substr(0, nul));
  std::vector<std::string> overrides;
  for (size_t at = nul; at != std::string_view::npos && overrides.size() < kMaxOverrides;) {
    const size_t next = input.find('\0', at + 1);
    overrides.emplace_back(input.substr(at + 1, next == std::string_view::npos ? next : next - at - 1));
    at = next;
  }

  Json cfg = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded()) return 0;
  const bool object = cfg.is_object();

  const Outcome memory = outcome_of([&] {
    tandem::config::parse_config_text(text, "the input");  // refuses a repeated key, as load_config() does
    for (const std::string& o : overrides) tandem::config::apply_override(cfg, o);
    return tandem::config::validate(cfg);
  });

  if (memory.kind == Outcome::kValid) {
    // parse() relies on validate() being idempotent; a second pass must change nothing.
    const Outcome again = outcome_of([&] { return tandem::config::validate(memory.value); });
    if (again.kind != Outcome::kValid || again.value != memory.value)
      tandem::fuzz::violated(std::string("validate() is not idempotent: the second pass gave ") +
                             kind_name(again.kind));
    exercise_typed_view(memory.value, static_cast<int64_t>(size % 4) + 1);
  }

  if (size > 0 && data[0] % 2 == 0) {
    static const tandem::fuzz::ScratchFile file("config");
    file.write(text.data(), text.size());
    const Outcome loaded = outcome_of([&] { return tandem::config::load_config(file.path(), overrides); });
    // load_config() wants an object at the top while apply_override() turns null into one, and it also
    // accepts comments the strict parse above rejected; otherwise the two paths are the same steps.
    if (object && (loaded.kind != memory.kind || loaded.value != memory.value))
      tandem::fuzz::violated(std::string("load_config() ended as ") + kind_name(loaded.kind) +
                             " but the in-memory path as " + kind_name(memory.kind));
  }
  return 0;
}
