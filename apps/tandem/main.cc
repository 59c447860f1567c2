// The tandem command line: `tandem train [-n N] CONFIG.json [--out DIR] [--set key=value]... [--resume DIR]`
// and `tandem export CHECKPOINT --to FILE|DIR [--format safetensors|hf|peft] [--merge] [--dtype fp32|bf16]`.
// With -n it starts N processes through mpirun; under mpirun/mpiexec each process is one device. The only
// place that catches errors and exits.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "info_command.h"
#include "job.h"
#include "lora_export.h"
#include "plan_command.h"
#include "tandem/checkpoint/disk_space.h"
#include "tandem/checkpoint/progress.h"
#include "tandem/checkpoint/safetensors.h"
#include "tandem/comm/mpi/mpi_world.h"
#include "tandem/config/config.h"
#include "tandem/config/settings.h"
#include "tandem/core/diagnostics.h"
#include "tandem/core/error.h"
#include "tandem/core/units.h"
#include "tandem/device/cpu_device.h"
#include "tandem/interchange/hf_export.h"
#include "tandem/layout/groups.h"
#include "tandem/layout/placement.h"
#include "tandem/plan/preflight.h"
#include "tandem/plan/rates.h"
#include "tandem/plan/search.h"
#include "tandem/train/agreed_error.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/run_folder.h"
#include "tandem/train/stop_signal.h"
#include "tandem/train/trainer.h"

namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string out;  // empty: the resumed run's folder, or a new one under runs/
  std::string resume;
  std::string init;
  std::string device = "auto";
  int processes = 0;
  bool overwrite = false;
};

// Runs this command as N processes under mpirun and returns the job's exit code: the failing rank's (mpirun
// reports the first), 0 when every rank succeeds. mpirun runs in its own process group, so a terminal's Ctrl-C
// reaches only this process, which turns the first SIGINT or SIGTERM into SIGUSR2 for mpirun to forward: every
// rank finishes its step, saves and exits 0. A second signal ends the job at once.
volatile std::sig_atomic_t launcher_signals = 0;
extern "C" void on_launcher_signal(int) { launcher_signals = launcher_signals + 1; }

int launch_with_mpirun(int argc, char** argv, int n) {
  // --stdin none: mpirun runs in the background of the terminal and must not read from it. Ranks outlive a peer
  // that dies (orte_abort_on_non_zero_status 0), so their watchdog can name it; every failure still ends the job
  // through MPI_Abort, whose code mpirun returns. -q: Tandem's message is the message, without mpirun's banners.
  std::vector<std::string> args = {"mpirun",
                                   "-n",
                                   std::to_string(n),
                                   "--bind-to",
                                   "none",
                                   "--stdin",
                                   "none",
                                   "-q",
                                   "--mca",
                                   "orte_abort_on_non_zero_status",
                                   "0"};
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (static_cast<unsigned>(n) > cores) args.push_back("--oversubscribe");
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  // Share the cores between the processes rather than letting each start a thread per core.
  if (!std::getenv("OMP_NUM_THREADS"))
    setenv("OMP_NUM_THREADS", std::to_string(std::max(1u, cores / static_cast<unsigned>(n))).c_str(), 1);
  args.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-n" || a == "--processes") {
      ++i;  // drop "-n N": the children are already N
      continue;
    }
    if (a.rfind("-n", 0) == 0 && a.size() > 2 && std::isdigit(static_cast<unsigned char>(a[2]))) continue;
    if (a.rfind("--processes=", 0) == 0) continue;
    args.push_back(a);
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);

  struct sigaction sa {};
  sa.sa_handler = on_launcher_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &sa, nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "error: could not start mpirun (fork: %s)\n", std::strerror(errno));
    return 1;
  }
  if (child == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    execvp("mpirun", cargs.data());
    std::fprintf(stderr, "error: could not start mpirun (%s): install Open MPI (openmpi-bin)\n", std::strerror(errno));
    std::_Exit(127);
  }
  setpgid(child, child);  // also here: whichever runs first, the child is in its own group before a signal comes
  int forwarded = 0, status = 0;
  for (;;) {
    const pid_t r = waitpid(child, &status, 0);
    if (r == child) break;
    if (r < 0 && errno != EINTR) {
      std::fprintf(stderr, "error: lost track of mpirun (waitpid: %s)\n", std::strerror(errno));
      return 1;
    }
    for (; forwarded < launcher_signals; ++forwarded) {
      if (forwarded == 0) {
        std::fprintf(stderr,
                     "\nstopping: every rank finishes its step and saves a checkpoint (signal again to end "
                     "the job now)\n");
        kill(child, SIGUSR2);
      } else {
        kill(child, SIGTERM);
      }
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

// The planner's prediction before anything is allocated: printed, and a refusal when it cannot fit. The tiles it
// chose are written into `tc`. Returns the predicted peak of the fullest device.
int64_t preflight(tandem::config::TrainConfig& tc, const tandem::layout::ParallelPlan& plan,
                  tandem::device::AccountedDevice* gpu, uint64_t gpu_memory, bool print) {
  using namespace tandem;
  layout::validate_for_model(plan, tc.model, tc.batch.accum);  // its messages say what to change; say them first
  plan::PreflightOptions o;
  o.backend = gpu ? plan::Backend::Cuda : plan::Backend::Cpu;
  o.device_free_bytes = gpu_memory;
  o.device = gpu;
  // Offloaded state and background checkpoints share the node's host memory with the other ranks on it.
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  o.ranks_per_node = local_size ? std::max(1, std::atoi(local_size)) : 1;
  o.host_memory_bytes = tc.host_memory_bytes ? tc.host_memory_bytes : device::usable_host_memory();
  const plan::PreflightResult pre = plan::preflight(tc, plan, o);
  if (print) {
    std::printf("%s\n", pre.line.c_str());
    std::fflush(stdout);
  }
  if (!pre.fits) TANDEM_FAIL(pre.message);
  tc.tiles = pre.tiles;
  return pre.peak;
}

// "parallel": "auto": the planner's fastest layout that fits `world` devices (with its ZeRO stage, activation
// checkpointing and micro-batching) written into the config, which is validated again.
tandem::config::Json choose_layout(tandem::config::Json cfg, int world, bool on_gpu, uint64_t gpu_memory, bool print) {
  using namespace tandem;
  if (!cfg.contains("parallel") || !cfg.at("parallel").is_string()) return cfg;
  const config::TrainConfig given = config::parse(cfg);
  plan::SearchOptions o;
  o.devices = world;
  o.rates = plan::builtin_rates(on_gpu ? "h200" : "cpu");
  o.dtype_bytes = given.bf16 || given.fp16.enabled ? 2 : 4;
  o.global_batch = config::global_batch(given.batch_config);
  o.device_memory = given.device_memory_bytes ? given.device_memory_bytes : gpu_memory;
  o.host_memory = given.host_memory_bytes ? given.host_memory_bytes : device::usable_host_memory();
  const plan::SearchResult r = plan::search_layouts(plan::planned_model(given.model, given.lora, given.fp8), o);
  if (r.fit.empty())
    TANDEM_FAIL("\"parallel\": \"auto\" found no layout of ", world, " devices that fits",
                r.no_fit.empty() ? std::string()
                                 : ": the closest, " + r.no_fit.front().name() + ", " + r.no_fit.front().why_not);
  const plan::Setup& s = r.fit.front().setup;
  // The candidate's layout, ZeRO stage (and offload, when only an offloaded one fits) and micro-batch.
  const config::Json keys = r.fit.front().config();
  cfg["parallel"] = keys.at("parallel");
  cfg["parallel"]["schedule"] = spec::schedule_name(s.plan.schedule);
  cfg["parallel"]["virtual_stages"] = s.plan.virtual_stages;
  for (const auto& [key, value] : keys.at("zero_optimization").items()) cfg["zero_optimization"][key] = value;
  cfg["train_batch_size"] = o.global_batch;
  cfg["train_micro_batch_size_per_gpu"] = s.micro_batch;
  cfg["gradient_accumulation_steps"] = s.micro_batches;
  if (print)
    std::printf("parallel: auto -> %s (the planner's fastest layout that fits)\n", r.fit.front().name().c_str());
  return config::validate(cfg);
}

int run_train(int argc, char** argv, const TrainArgs& a) {
  using namespace tandem;
  app::Job job(&argc, &argv);
  train::install_stop_handlers();  // a stop asked for during setup stops the run after its first step

  // Setup, in phases every rank does alike; an error in any is printed once (Job::agreed).
  config::Json cfg;
  std::unique_ptr<device::AccountedDevice> gpu;  // outlives the groups and the trainer that use it
  uint64_t gpu_memory = 0;
  Diagnostics diagnostics;  // the diagnosis variables, read once here and handed to the trainer
  job.agreed([&] {
    diagnostics = Diagnostics::from_environment();
    cfg = config::load_config(a.config, a.overrides);
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");  // this process's rank on its node
    gpu = layout::make_device(a.device, local ? std::atoi(local) : 0);
    gpu_memory = gpu ? gpu->plannable_bytes() : 0;
  });
  // Every rank plans with the smallest GPU memory of the job, so all choose the same layout.
  gpu_memory = static_cast<uint64_t>(job.min(static_cast<double>(gpu_memory)));

  layout::ParallelPlan plan;
  config::TrainConfig tc;
  int64_t predicted_peak = 0;
  std::string checkpoint;
  job.agreed([&] {
    if (!a.resume.empty()) checkpoint = train::find_checkpoint(a.resume);
    cfg = choose_layout(cfg, job.size(), gpu != nullptr, gpu_memory, job.printer());
    plan = layout::resolve_parallel(config::parallel_config(cfg.value("parallel", config::Json())), job.size());
    if (job.mpi()) job.mpi()->set_timeout_s(plan.timeout_s);
    tc = config::parse(cfg, plan.layout.dp);
    if (job.printer())
      for (const std::string& line : tc.notices) std::printf("%s\n", line.c_str());  // "auto" values, no-effect keys
    std::fflush(stdout);
    predicted_peak = preflight(tc, plan, gpu.get(), gpu_memory, job.printer());
  });
  train::RunFolderLock folder_lock;  // rank 0's, for the whole job: a second job into the folder is refused
  const std::string out = job.from_rank0([&] {
    train::RunFolder run = train::prepare_run_folder(a.out, checkpoint, a.overwrite);
    folder_lock = std::move(run.lock);
    return run.dir;
  });
  if (job.printer()) {
    std::printf("run folder: %s (metrics.jsonl, checkpoints/)\n", out.c_str());
    std::fflush(stdout);
  }

  try {
    layout::Groups groups = layout::make_job_groups(job.mpi(), plan.layout, gpu.get());
    train::TrainOptions opt;
    opt.out_dir = out;
    opt.resume = checkpoint;
    opt.init = a.init;
    opt.device = gpu.get();
    opt.out_dir_locked = true;
    opt.predicted_peak_bytes = predicted_peak;
    opt.diagnostics = diagnostics;
    train::Trainer trainer = train::Trainer::from_config(tc, plan, opt, &groups);
    trainer.run();
    groups.world->barrier();
  } catch (const train::AgreedError& e) {
    job.fail_agreed(e.what());
  } catch (const std::exception& e) {
    job.fail(e.what());
  }
  return 0;
}

struct ExportArgs {
  std::string from, to;
  std::string format = "safetensors";
  std::string dtype = "fp32";
  std::string max_shard_size = "5GB";
  bool overwrite = false;
  bool merge = false;  // a LoRA checkpoint: the base with its adapters merged
};

// Consolidates a checkpoint of any layout into one file of fp32 logical tensors, or into a Hugging Face model
// folder. Never writes over a file or a non-empty folder (unless asked) nor into a checkpoint.
int run_export(const ExportArgs& a) {
  namespace fs = std::filesystem;
  using namespace tandem;
  if (a.format != "safetensors" && a.format != "hf" && a.format != "peft")
    TANDEM_FAIL("--format '", a.format,
                "': use safetensors (one file in Tandem's names), hf (a Hugging Face folder) or peft (a LoRA run's ",
                "adapters as a PEFT folder)");
  if (a.dtype != "fp32" && a.dtype != "bf16") TANDEM_FAIL("--dtype '", a.dtype, "': use fp32 or bf16");
  const bool peft = a.format == "peft";
  const bool hf = a.format == "hf" || peft;  // a folder
  if (a.format != "hf" && a.dtype != "fp32")
    TANDEM_FAIL("--dtype ", a.dtype, " is for --format hf; the ", a.format, " files are fp32");
  const std::string folder = train::find_checkpoint(a.from);
  // A LoRA run's checkpoint holds the adapters alone (lora_export.h).
  const config::Json saved = train::read_checkpoint_summary(folder).config;
  const bool lora = saved.contains("lora");
  if (!lora && (peft || a.merge))
    TANDEM_FAIL(peft ? "--format peft" : "--merge", " is for checkpoints of LoRA runs (a config with \"lora\"); '",
                folder, "' holds the whole model: export it with --format hf or safetensors");
  if (lora && a.format == "hf" && !a.merge)
    TANDEM_FAIL("'", folder, "' is a LoRA run's checkpoint: it holds the adapters alone. Export them with --format ",
                "peft (PeftModel.from_pretrained loads the folder), or the base with the adapters merged with ",
                "--format hf --merge");
  std::error_code ec;
  const fs::path target = fs::weakly_canonical(a.to, ec);
  for (fs::path p = hf ? target : target.parent_path(); !ec && !p.empty() && p != p.parent_path(); p = p.parent_path())
    if (fs::equivalent(p, folder, ec) || fs::exists(p / "manifest.json"))
      TANDEM_FAIL("--to '", a.to, "' lies inside the checkpoint '", p.string(),
                  "': write the export outside it (checkpoints are never modified)");
  if (!hf && fs::exists(a.to) && !a.overwrite)
    TANDEM_FAIL("--to '", a.to, "' exists: choose another file, or pass --overwrite to replace it");
  if (hf && fs::exists(a.to) && !fs::is_directory(a.to))
    TANDEM_FAIL("--to '", a.to, "' is a file: --format ", a.format, " writes a folder");
  if (hf && fs::is_directory(a.to) && !fs::is_empty(a.to) && !a.overwrite)
    TANDEM_FAIL("--to '", a.to, "' is a folder that is not empty: choose another, or pass --overwrite to replace ",
                "the model files in it");
  const uint64_t shard_bytes = parse_bytes(a.max_shard_size);
  if (lora && (peft || a.merge))
    return app::export_lora({folder, a.to, a.format, a.dtype == "bf16", shard_bytes, a.merge}, saved);
  // The export's bytes against the destination's free space, before anything is read: the weights (4 or 2 bytes an
  // element) and their headers, index and config (a few kB a tensor at most: 1 MiB is ample for any model here).
  checkpoint::SpaceNeed need;
  need.bytes = train::checkpoint_weight_bytes(folder) / (a.dtype == "bf16" ? 2 : 1) + (uint64_t{1} << 20);
  need.what =
      std::string("the export (") + (hf ? "a Hugging Face folder" : "one safetensors file") + ", " + a.dtype + ")";
  need.advice = std::string("choose another --to on a disk with room") +
                (hf && a.dtype == "fp32" ? ", or --dtype bf16 (half the bytes)" : "") + ", or free space there";
  checkpoint::check_free_space(a.to, need);
  const checkpoint::ProgressOptions pace = checkpoint::ProgressOptions::from(Diagnostics::from_environment());
  const auto weights = train::read_checkpoint_weights(folder, /*print=*/true, pace);
  checkpoint::Progress progress("writing " + a.to, need.bytes - (uint64_t{1} << 20), true, pace);
  if (!hf) {
    std::vector<checkpoint::TensorEntry> entries;
    for (const auto& [name, t] : weights) entries.push_back({name, DType::F32, t.shape, t.values.data()});
    checkpoint::write_safetensors(a.to, entries, {{"format", "pt"}, {"source", folder}}, &progress);
    progress.finish();
    std::printf("wrote %zu tensors from %s to %s\n", entries.size(), folder.c_str(), a.to.c_str());
    return 0;
  }
  const spec::ModelConfig model = config::model_config(saved.at("model"));
  std::map<std::string, interchange::HostWeights> host;
  for (const auto& [name, t] : weights) host[name] = {t.shape, t.values.data()};
  fs::create_directories(a.to);
  // A previous export's files would mix with this one's (another shard count leaves stale shards).
  for (const auto& e : fs::directory_iterator(a.to)) {
    const std::string n = e.path().filename().string();
    if (n == "config.json" || (n.rfind("model", 0) == 0 && n.find(".safetensors") != std::string::npos))
      fs::remove(e.path());
  }
  interchange::HfExportOptions o;
  o.bf16 = a.dtype == "bf16";
  o.max_shard_bytes = shard_bytes;
  o.progress = &progress;
  const int files = interchange::write_hf_folder(a.to, model, host, o);
  progress.finish();
  std::printf("wrote a Hugging Face %s model (%s, %d weight file%s) from %s to %s\n", spec::model_type(model).c_str(),
              a.dtype.c_str(), files, files > 1 ? "s" : "", folder.c_str(), a.to.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then makes a write fail with EFBIG, reported with the file's name like a full
  // disk, instead of killing the process with SIGXFSZ.
  signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"Tandem: train models too big for one device on several, used as fewer, bigger ones."};
  app.require_subcommand(1);

  TrainArgs a;
  CLI::App* train = app.add_subcommand("train", "Train a model from a JSON config");
  train->add_option("config", a.config, "The JSON config (DeepSpeed key names where they exist)")
      ->required()
      ->check(CLI::ExistingFile);
  train->add_option("-n,--processes", a.processes, "Start this many processes (devices) through mpirun")
      ->check(CLI::PositiveNumber);
  train->add_option("--out", a.out,
                    "Folder for metrics.jsonl and checkpoints/ (default: the resumed run's, else a new one under "
                    "runs/)");
  train->add_flag("--overwrite", a.overwrite,
                  "Replace the metrics and checkpoints of another run in --out (nothing else there is touched)");
  train->add_option("--set", a.overrides, "Override a config key, e.g. --set optimizer.params.lr=3e-4")
      ->allow_extra_args(false);
  train->add_option("--resume", a.resume, "Continue from a checkpoint folder or a run folder (any layout)");
  train->add_option("--device", a.device, "auto (a GPU when one is visible), cpu or cuda")->capture_default_str();
  train
      ->add_option("--init", a.init,
                   "Start from the weights of a safetensors file (e.g. from tandem export) or a Hugging Face folder")
      ->check(CLI::ExistingPath);

  ExportArgs ex;
  CLI::App* exporter =
      app.add_subcommand("export", "Write a checkpoint's weights as one safetensors file or a Hugging Face folder");
  exporter->add_option("checkpoint", ex.from, "A checkpoint folder, or a run folder (its newest checkpoint)")
      ->required();
  exporter->add_option("--to", ex.to, "The safetensors file (PyTorch-style parameter names) or folder to write")
      ->required();
  exporter
      ->add_option("--format", ex.format,
                   "safetensors (one file, Tandem's names), hf (a Hugging Face folder) or peft (a LoRA run's adapters)")
      ->capture_default_str();
  exporter->add_flag("--merge", ex.merge, "A LoRA run's checkpoint: the base model with the adapters merged into it");
  exporter->add_option("--dtype", ex.dtype, "fp32 or bf16 (--format hf)")->capture_default_str();
  exporter->add_option("--max-shard-size", ex.max_shard_size, "Largest weight file of --format hf, e.g. 5GB")
      ->capture_default_str();
  exporter->add_flag("--overwrite", ex.overwrite, "Replace --to when it exists");

  tandem::app::PlanArgs plan_args;
  CLI::App* plan = app.add_subcommand("plan", "Which layouts fit and which is fastest, before anything runs");
  tandem::app::add_plan_options(*plan, plan_args);
  std::string rates_out = "rates.json";
  CLI::App* calibrate = app.add_subcommand("calibrate", "Measure this machine's rates for the planner");
  tandem::app::add_calibrate_options(*calibrate, rates_out);

  CLI::App* info = app.add_subcommand("info", "What this build can run on and what this machine has");
  CLI::App* keys = app.add_subcommand("keys",
                                      "Every config key of Tandem's schema as a Markdown table: type, default, "
                                      "check, DeepSpeed name (docs/config-keys.md)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*exporter) return run_export(ex);
    if (*plan) return tandem::app::run_plan_command(plan_args);
    if (*info) return tandem::app::run_info_command();
    if (*keys) {
      std::printf("%s", tandem::config::settings_markdown().c_str());
      return 0;
    }
    if (*calibrate) return tandem::app::run_calibrate_command(rates_out);
    if (*train) {
      if (a.processes > 0 && !tandem::comm::mpi::launched_by_mpi()) return launch_with_mpirun(argc, argv, a.processes);
      return run_train(argc, argv, a);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
