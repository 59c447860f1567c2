// `tandem plan CONFIG.json --devices N [--device-memory 141GiB] [--nodes K] [--rates FILE] [--explain LAYOUT]
// [--max-seq-len [N]]` and `tandem calibrate [--out rates.json]`.
#include "plan_command.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>

#include "tandem/comm/mpi/mpi_world.h"
#include "tandem/config/config.h"
#include "tandem/core/units.h"
#include "tandem/device/cpu_device.h"
#include "tandem/plan/calibrate.h"
#include "tandem/plan/max_seq_len.h"
#include "tandem/plan/search.h"
#include "tandem/plan/seq_len_model.h"

namespace tandem::app {

namespace {

// The threads each process of an N-device run gets: OMP_NUM_THREADS, else the cores shared out as
// `tandem train -n N` shares them.
int threads_per_process(int devices) {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) return std::max(1, std::atoi(env));
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::max(1u, cores / static_cast<unsigned>(std::max(1, devices))));
}

// The same command with every option that changed the answer, to be run again with --explain.
std::string same_command(const PlanArgs& a) {
  std::string again = "tandem plan " + a.config + " --devices " + std::to_string(a.devices);
  if (!a.device_memory.empty()) again += " --device-memory " + a.device_memory;
  if (a.nodes != 1) again += " --nodes " + std::to_string(a.nodes);
  if (!a.rates.empty()) again += " --rates " + a.rates;
  if (!a.host_memory.empty()) again += " --host-memory " + a.host_memory;
  if (!a.dtype.empty()) again += " --dtype " + a.dtype;
  for (const std::string& o : a.overrides) again += " --set " + o;
  return again;
}

// What --max-seq-len searches: the lengths' step, and the longest allowed, the model's own limit or the option's
// shorter one. Throws Error, saying what to change, for options that make no sense together.
plan::SeqLenOptions seq_len_options(const PlanArgs& a, const plan::SeqLenModel& model) {
  if (a.max_seq_len < 0)
    TANDEM_FAIL("--seq-len-step goes with --max-seq-len: it is the step of the lengths that search tries");
  if (!a.explain.empty())
    TANDEM_FAIL(
        "--max-seq-len and --explain answer different questions: give one (--explain with --set "
        "model.seq_len=N shows one layout at that length)");
  plan::SeqLenOptions o;
  o.step = a.seq_len_step ? a.seq_len_step : 1024;
  if (a.max_seq_len > plan::kLargestSeqLen)
    TANDEM_FAIL("--max-seq-len ", a.max_seq_len, " is past the longest model.seq_len a config takes, ",
                plan::kLargestSeqLen, ": give at most that");
  // The shorter of the model's own limit and the option's; without either, the default bound.
  o.limit = model.limit();
  if (a.max_seq_len > 0 && (o.limit.tokens == 0 || a.max_seq_len < o.limit.tokens))
    o.limit = {a.max_seq_len, "--max-seq-len " + std::to_string(a.max_seq_len), true};
  if (o.limit.tokens == 0)
    o.limit = {plan::kDefaultSeqLenBound, "the default bound; --max-seq-len N searches further", false};
  return o;
}

// --max-seq-len: the longest seq_len at which a candidate fits, what reaches it and what stops the next length.
int run_max_seq_len(const PlanArgs& a, const plan::SeqLenModel& model, const plan::SeqLenOptions& seq,
                    plan::SearchOptions opt) {
  std::printf(
      "\nLongest seq_len: multiples of %lld tokens up to %lld (%s); %lld sequence%s a step, as the config says\n",
      static_cast<long long>(seq.step), static_cast<long long>(seq.limit.tokens), seq.limit.what.c_str(),
      static_cast<long long>(opt.global_batch), opt.global_batch == 1 ? "" : "s");
  plan::SeqLenOptions o = seq;
  o.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);  // each length of a long search shows as it is done
  };
  const plan::SeqLenResult r = plan::search_max_seq_len([&](int64_t seq_len) { return model.at(seq_len); }, opt, o);
  std::printf("\n%s", plan::format_max_seq_len(r, opt).c_str());
  if (r.longest > 0)
    std::printf("\n`%s --set model.seq_len=%lld --explain %s` shows where the memory and time go.\n",
                same_command(a).c_str(), static_cast<long long>(r.longest), r.at_longest.fit.front().name().c_str());
  return 0;
}

}  // namespace

void add_plan_options(CLI::App& sub, PlanArgs& a) {
  sub.add_option("config", a.config, "The JSON config whose model and global batch to plan for")
      ->required()
      ->check(CLI::ExistingFile);
  sub.add_option("--devices", a.devices, "How many devices the job will have")->required()->check(CLI::PositiveNumber);
  sub.add_option("--device-memory", a.device_memory,
                 "Memory per device, e.g. 141GiB (default: the config's device_memory)");
  sub.add_option("--nodes", a.nodes, "Hosts the devices are spread over; tensor parallelism stays inside one")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub.add_option("--rates", a.rates,
                 "Speeds for the time model: cpu, h200, or a file from `tandem calibrate` (default: h200 for devices "
                 "of 8 GiB or more, else cpu)");
  sub.add_option("--host-memory", a.host_memory,
                 std::string("Host memory per node for offloaded state, e.g. 512GiB (default: the config's "
                             "host_memory, else for this machine ") +
                     device::kUsableHostMemoryRule + ")");
  sub.add_option("--dtype", a.dtype, "Compute dtype: fp32 or bf16 (default: bf16 if the config enables bf16/fp16)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  sub.add_option("--explain", a.explain, "Print the full breakdown of one layout, e.g. dp2,pp2,tp1,zero1,micro16");
  sub.add_option("--top", a.top, "How many layouts that fit to list")->capture_default_str();
  sub.add_option("--max-seq-len", a.max_seq_len,
                 "Instead of the table: the longest seq_len that fits, up to N tokens if given, else up to the model's "
                 "max_position_embeddings (or 1048576)")
      ->expected(0, 1)
      ->default_str("0")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--seq-len-step", a.seq_len_step,
                 "With --max-seq-len: the lengths tried are multiples of this many tokens (default 1024)")
      ->check(CLI::PositiveNumber);
  sub.add_option("--set", a.overrides, "Override a config key, e.g. --set train_batch_size=128")
      ->allow_extra_args(false);
}

int run_plan_command(const PlanArgs& a) {
  const config::TrainConfig tc = config::parse(config::load_config(a.config, a.overrides));
  // --max-seq-len's options are checked before anything is predicted.
  const bool longest = a.max_seq_len >= 0 || a.seq_len_step > 0;
  const std::optional<plan::SeqLenModel> seq_model =
      longest ? std::optional(plan::SeqLenModel::from_file(a.config, a.overrides)) : std::nullopt;
  const plan::SeqLenOptions seq = longest ? seq_len_options(a, *seq_model) : plan::SeqLenOptions{};
  plan::SearchOptions opt;
  opt.devices = a.devices;
  opt.nodes = a.nodes;
  opt.device_memory = a.device_memory.empty() ? tc.device_memory_bytes : parse_bytes(a.device_memory);
  // Devices of a GPU's size are priced as GPUs: a CPU process's budget is a test's, far smaller.
  constexpr uint64_t kGpuSized = uint64_t{8} << 30;
  const std::string rates = !a.rates.empty() ? a.rates : opt.device_memory >= kGpuSized ? "h200" : "cpu";
  opt.rates = plan::load_rates(rates);
  opt.host_memory = !a.host_memory.empty() ? parse_bytes(a.host_memory)
                    : tc.host_memory_bytes ? tc.host_memory_bytes
                                           : device::usable_host_memory();
  opt.default_schedule =
      tc.parallel.virtual_stages.value_or(1) > 1 ? spec::ScheduleKind::Interleaved : tc.parallel.schedule;
  opt.default_checkpointing = tc.parallel.activation_checkpointing;
  opt.keep_attention = tc.parallel.keep_attention;
  opt.tiles = tc.tiles;
  const bool half = a.dtype.empty() ? tc.bf16 || tc.fp16.enabled : a.dtype != "fp32";
  opt.dtype_bytes = half ? 2 : 4;
  opt.cpu_threads = threads_per_process(a.devices);
  opt.global_batch = config::global_batch(tc.batch_config);
  opt.default_micro = tc.batch_config.micro.value_or(1);
  if (longest) plan::check_seq_len_options(opt, seq);

  plan::MemoryModel memory(plan::planned_model(tc.model, tc.lora, tc.fp8));
  const plan::PlannedModel& info = memory.model();
  const std::string budget = opt.device_memory ? format_bytes(opt.device_memory) : "unlimited memory";
  std::printf("model: %s, %.3gB parameters; global batch %lld sample%s", info.type.c_str(),
              static_cast<double>(memory.logical_parameters()) / 1e9, static_cast<long long>(opt.global_batch),
              opt.global_batch == 1 ? "" : "s");
  if (info.rows_per_sample > 1) std::printf(" of %lld tokens", static_cast<long long>(info.rows_per_sample));
  std::printf("\n%d device%s (%d node%s) of %s; compute %s; rates '%s'\n", opt.devices, opt.devices == 1 ? "" : "s",
              opt.nodes, opt.nodes == 1 ? "" : "s", budget.c_str(), half ? "bf16" : "fp32", opt.rates.name.c_str());
  std::printf(
      "host memory for offloaded state: %s per node (%s)\n",
      opt.host_memory ? format_bytes(opt.host_memory).c_str() : "unlimited",
      !a.host_memory.empty() ? "--host-memory"
      : tc.host_memory_bytes
          ? "the config's host_memory"
          : (std::string("for this machine ") + device::kUsableHostMemoryRule + "; --host-memory sets it").c_str());

  if (!a.explain.empty()) {
    const plan::Setup setup = plan::parse_candidate(a.explain, opt);
    if (info.validate) info.validate(setup.plan, setup.micro_batch, setup.micro_batches);
    const plan::Candidate c = plan::evaluate(memory, setup, opt);
    std::printf("\n%s", plan::format_explain(c, opt).c_str());
    return 0;
  }
  if (longest) return run_max_seq_len(a, *seq_model, seq, opt);
  const plan::SearchResult result = plan::search_layouts(info, opt);
  const auto split = [](const plan::Candidate& c) { return c.setup.plan.layout.cp > 1; };
  const bool context = std::any_of(result.fit.begin(), result.fit.end(), split) ||
                       std::any_of(result.no_fit.begin(), result.no_fit.end(), split);
  std::printf("%lld layouts (dp x pp x tp%s), %zu candidates predicted\n\n", static_cast<long long>(result.layouts),
              context ? " x cp" : "", result.fit.size() + result.no_fit.size());
  std::printf("%s", plan::format_table(result, opt, a.top).c_str());
  if (!result.fit.empty()) {
    std::printf("\n`%s --explain %s` shows where the memory and time go.\n", same_command(a).c_str(),
                result.fit.front().name().c_str());
  }
  return 0;
}

void add_calibrate_options(CLI::App& sub, std::string& out_path) {
  sub.add_option("--out", out_path, "Where to write the rates JSON")->capture_default_str();
}

int run_calibrate_command(const std::string& out_path) {
  std::unique_ptr<comm::mpi::MpiWorld> world;
  std::unique_ptr<comm::Communicator> comm;
  if (comm::mpi::launched_by_mpi()) {
    world = std::make_unique<comm::mpi::MpiWorld>(nullptr, nullptr);
    comm = world->world();
  }
  const plan::Calibration c = plan::calibrate(plan::builtin_rates("cpu"), comm.get());
  if (!world || world->rank() == 0) {
    std::printf("calibration of this host:\n%s", c.report.c_str());
    plan::save_rates(c.rates, out_path);
    std::printf("wrote %s (use it with `tandem plan --rates %s`)\n", out_path.c_str(), out_path.c_str());
  }
  if (comm) comm->barrier();
  return 0;
}

}  // namespace tandem::app
