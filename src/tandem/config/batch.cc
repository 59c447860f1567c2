// Batch-size arithmetic: DeepSpeed's train_batch_size = micro * accum * dp, deriving whichever is omitted, on the
// three keys as their rows wrote them (BatchConfig, settings_rows.cc) or straight from a config's JSON.
#include <optional>

#include "tandem/config/config.h"
#include "tandem/config/fields.h"
#include "tandem/config/settings.h"
#include "tandem/core/error.h"

namespace tandem::config {
namespace {

constexpr const char* kGlobal = "train_batch_size";
constexpr const char* kMicro = "train_micro_batch_size_per_gpu";
constexpr const char* kAccum = "gradient_accumulation_steps";

// No real batch comes near 2^31 samples; the bound keeps every product below int64's range.
constexpr int64_t kMaxBatch = 2147483647;

void check_range(const char* key, const std::optional<int64_t>& v, const std::string& shown) {
  if (v && (*v < 1 || *v > kMaxBatch))
    TANDEM_FAIL("config key '", key, "' must be a positive integer of at most ", kMaxBatch, ", got ", shown);
}

// a * b, refusing what would not fit a batch size.
int64_t times(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r > kMaxBatch)
    TANDEM_FAIL("the batch size ", a, " * ", b, " exceeds ", kMaxBatch, " samples: lower ", kMicro, " or ", kAccum);
  return r;
}

// `total` must split evenly into `parts` (= `names`, which evaluate as `values`); otherwise say which key to
// change and to what.
int64_t divide(int64_t total, int64_t parts, const std::string& names, const std::string& values, const char* derived) {
  if (total % parts == 0) return total / parts;
  const int64_t lower = total / parts * parts, upper = lower + parts;
  TANDEM_FAIL(kGlobal, " = ", total, " is not divisible by ", names, " = ", values.empty() ? "" : values + " = ", parts,
              ", so ", derived, " cannot be derived: change ", kGlobal, " to a multiple of ", parts, " (e.g. ",
              lower > 0 ? std::to_string(lower) + " or " : std::string(), upper, ")");
}

}  // namespace

BatchSizes resolve_batch(const Json& cfg, int64_t dp) {
  // The three keys checked by their rows, as validate() checks them, and read through their fields, as parse() does.
  Json keys = Json::object();
  for (const char* key : {kGlobal, kMicro, kAccum})
    if (cfg.is_object() && cfg.contains(key)) keys[key] = cfg.at(key);
  Fields f(keys, "");
  for (const char* key : {kGlobal, kMicro, kAccum})
    if (f.has(key)) read_setting(f, key);
  spec::TrainConfig run;
  write_settings(keys, "", run);
  return resolve_batch(run.batch_config, dp);
}

int64_t global_batch(const BatchConfig& given) { return given.global ? *given.global : resolve_batch(given, 1).global; }

BatchSizes resolve_batch(const BatchConfig& given, int64_t dp) {
  if (dp < 1 || dp > kMaxBatch) TANDEM_FAIL("the data-parallel size must be in [1, ", kMaxBatch, "], got ", dp);
  const auto& [global, micro, accum] = given;
  check_range(kGlobal, global, global ? std::to_string(*global) : "");
  check_range(kMicro, micro, micro ? std::to_string(*micro) : "");
  check_range(kAccum, accum, accum ? std::to_string(*accum) : "");

  if (global && micro && accum) {
    const int64_t product = times(times(*micro, *accum), dp);
    if (product != *global)
      TANDEM_FAIL("inconsistent batch sizes: ", kGlobal, " (", *global, ") must equal ", kMicro, " * ", kAccum,
                  " * data-parallel size = ", *micro, " * ", *accum, " * ", dp, " = ", product, ". Change ", kGlobal,
                  " to ", product, ", or remove one of the three keys to have it derived");
    return {*global, *micro, *accum};
  }
  const std::string dp_text = std::to_string(dp);
  if (global && micro)
    return {*global, *micro,
            divide(*global, times(*micro, dp), std::string(kMicro) + " * data-parallel size",
                   std::to_string(*micro) + " * " + dp_text, kAccum)};
  if (global && accum)
    return {*global,
            divide(*global, times(*accum, dp), std::string(kAccum) + " * data-parallel size",
                   std::to_string(*accum) + " * " + dp_text, kMicro),
            *accum};
  if (micro && accum) return {times(times(*micro, *accum), dp), *micro, *accum};
  // With one key given, DeepSpeed's convention: no accumulation.
  if (global) return {*global, divide(*global, dp, "the data-parallel size", "", kMicro), 1};
  if (micro) return {times(*micro, dp), *micro, 1};
  if (accum)
    TANDEM_FAIL("only ", kAccum, " (", *accum, ") is set: the batch size is unknown. Add ", kGlobal, " or ", kMicro);
  TANDEM_FAIL("no batch size given: set ", kGlobal, " (the global batch) or ", kMicro, " (the batch per device)");
}

}  // namespace tandem::config
