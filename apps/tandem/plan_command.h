// `tandem plan` and `tandem calibrate`: the planner's subcommands. main.cc registers their options on its
// subcommands and calls them; errors are thrown as tandem::Error for main to print.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>
#include <vector>

namespace tandem::app {

struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;  // --set key=value, as `tandem train`
  int devices = 0;
  std::string device_memory;  // "141GiB"; empty: the config's "device_memory"
  int nodes = 1;
  std::string rates;        // "cpu", "h200" or a file from `tandem calibrate`; empty: h200 for GPU-sized devices
  std::string host_memory;  // per node, "512GiB"; empty: the config's "host_memory", else this machine's free
  std::string dtype;        // "fp32" | "bf16"; empty: bf16 when the config enables bf16 or fp16
  std::string explain;      // "dp2,pp2,tp1,zero1,micro16": the full breakdown of one layout
  size_t top = 15;
  // --max-seq-len [N]: the longest seq_len that fits instead of the table. -1: not asked; 0 (the option alone): up to
  // the model's own limit; N: up to N tokens.
  int64_t max_seq_len = -1;
  int64_t seq_len_step = 0;  // --seq-len-step: the lengths tried are its multiples; 0: 1024
};

void add_plan_options(CLI::App& sub, PlanArgs& args);
int run_plan_command(const PlanArgs& args);

// Measures this host (and, under mpirun with more than one process, its collectives) and writes the rates
// JSON `tandem plan --rates` reads.
void add_calibrate_options(CLI::App& sub, std::string& out_path);
int run_calibrate_command(const std::string& out_path);

}  // namespace tandem::app
