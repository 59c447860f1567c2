// CheckpointWriter (checkpoint_writer.h): the copy at the boundary, the background write, the agreement and the
// manifest. A rank file is its header (safetensors_layout) and then its data section, written in 64 MiB writes; its
// CRC-32 is computed on the bytes in memory beside the writes, never by reading the file back.
#include "tandem/train/checkpoint_writer.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <future>
#include <map>
#include <system_error>
#include <utility>
#include <vector>

#include "tandem/checkpoint/atomic_file.h"
#include "tandem/checkpoint/progress.h"
#include "tandem/core/units.h"
#include "tandem/train/agreed_error.h"
#include "tandem/train/checkpoint_format.h"

namespace tandem::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kWriteChunk = size_t{64} << 20;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The pieces this rank saves: what it updates, once per logical element (at ZeRO stage 0, where every replica holds
// everything, the first of the ranks holding it: ParameterStore::saves_state; tp slot 0 for parameters every slot holds
// whole; not a tied replica, whose original is saved where it lives).
void visit_saved(parallel::Engine& engine, const layout::Coord& coord,
                 const std::function<void(const nn::Parameter&, const std::string& key, int64_t offset,
                                          const Tensor& value, const Tensor& m, const Tensor& v)>& fn) {
  const parallel::ParameterStore& store = engine.store();
  engine.store().visit_owned(
      [&](const nn::Parameter& p, int64_t offset, const Tensor& value, const Tensor& m, const Tensor& v) {
        if (p.replica || !store.saves_state(p) || (!nn::tp_sharded(p) && coord.tp != 0)) return;
        fn(p, p.name + "@" + std::to_string(p.shard.part) + ":" + std::to_string(offset), offset, value, m, v);
      });
}

constexpr const char* kParts[] = {"value", "exp_avg", "exp_avg_sq"};

// One tensor of the rank file, in file order.
struct Slot {
  size_t offset;  // in the data section
  Tensor tensor;  // (n) fp32, on the engine's device
};

std::vector<Slot> slots_of(parallel::Engine& engine, const layout::Coord& coord,
                           const checkpoint::SafetensorsLayout& layout) {
  std::vector<Slot> out;
  visit_saved(engine, coord,
              [&](const nn::Parameter&, const std::string& key, int64_t, const Tensor& value, const Tensor& m,
                  const Tensor& v) {
                const Tensor* parts[] = {&value, &m, &v};
                for (int i = 0; i < 3; ++i) out.push_back({layout.offsets.at(key + "/" + kParts[i]), *parts[i]});
              });
  std::sort(out.begin(), out.end(), [](const Slot& a, const Slot& b) { return a.offset < b.offset; });
  return out;
}

// Writes <path> (through <path>.tmp) from the header and the data section in memory, the CRC-32 computed beside the
// writes. `kill_halfway`: the fault injection of kind=kill_in_write.
uint32_t write_image(const std::string& path, const std::string& prefix, const char* data, size_t bytes,
                     checkpoint::Progress& progress, bool kill_halfway) {
  checkpoint::AtomicFileWriter out(path);
  auto crc = std::async(std::launch::async, [&] {
    return checkpoint::crc32_bytes(checkpoint::crc32_bytes(0, prefix.data(), prefix.size()), data, bytes);
  });
  const auto kill = [&] {
    std::fprintf(stderr, "[fault injection] killed while writing %s\n", path.c_str());
    std::fflush(stderr);
    std::raise(SIGKILL);
  };
  out.write(prefix.data(), prefix.size());
  progress.add(prefix.size());
  if (kill_halfway && bytes == 0) kill();
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kWriteChunk, bytes - done);
    out.write(data + done, n);
    done += n;
    progress.add(n);
    if (kill_halfway && done >= bytes / 2) kill();
  }
  out.commit();
  return crc.get();
}

// Writes <path> from the tensors themselves, in file order: straight from host memory on the CPU, through `staging`
// from a GPU.
uint32_t write_staged(const std::string& path, const std::string& prefix, const std::vector<Slot>& slots,
                      HostBuffer& staging, checkpoint::Progress& progress) {
  checkpoint::AtomicFileWriter out(path);
  uint32_t crc = checkpoint::crc32_bytes(0, prefix.data(), prefix.size());
  out.write(prefix.data(), prefix.size());
  progress.add(prefix.size());
  for (const Slot& s : slots) {
    const Tensor& t = s.tensor;
    if (t.device().kind() == DeviceKind::Cpu) {
      out.write(t.raw(), t.nbytes());
      crc = checkpoint::crc32_bytes(crc, t.raw(), t.nbytes());
      progress.add(t.nbytes());
      continue;
    }
    const auto per_chunk = static_cast<int64_t>(staging.bytes() / sizeof(float));
    for (int64_t first = 0; first < t.numel(); first += per_chunk) {
      const int64_t n = std::min(per_chunk, t.numel() - first);
      t.flat_slice(first, n, {n}).copy_to_host(staging.data());
      const size_t bytes = static_cast<size_t>(n) * sizeof(float);
      out.write(staging.data(), bytes);
      crc = checkpoint::crc32_bytes(crc, staging.data(), bytes);
      progress.add(bytes);
    }
  }
  out.commit();
  return crc;
}

int64_t step_of_folder(const fs::path& dir) { return std::stoll(dir.filename().string().substr(5)); }

}  // namespace

struct CheckpointWriter::Pending {
  int64_t step = 0;
  fs::path tmp_dir, final_dir;
  config::Json manifest;
  std::thread thread;
  std::atomic<bool> done{false};
  std::string error;  // set before done, by whoever writes the file
  uint32_t crc = 0;
  Clock::time_point started;
  double write_s = 0;                                // this rank's file, start to commit
  std::vector<std::pair<Device*, uint64_t>> copies;  // async: each device's last copy of the state (its ticket)
};

CheckpointWriter::CheckpointWriter(parallel::Engine& engine, layout::Groups& groups, CheckpointWriterOptions options)
    : engine_(engine), groups_(groups), options_(std::move(options)) {
  std::vector<checkpoint::TensorEntry> entries;
  config::Json pieces = config::Json::object();
  visit_saved(engine_, groups_.coord,
              [&](const nn::Parameter& p, const std::string& key, int64_t offset, const Tensor& value, const Tensor&,
                  const Tensor&) {
                device_ = &value.device();
                pieces[key] = {{"name", p.name},
                               {"shape", p.global_shape},
                               {"shard", format::shard_json(p.shard)},
                               {"offset", offset},
                               {"count", value.numel()}};
                for (const char* part : kParts)
                  entries.push_back({key + "/" + part, DType::F32, {value.numel()}, nullptr});
              });
  piece_table_ = pieces.dump();
  layout_ = checkpoint::safetensors_layout(format::rank_file_name(groups_.rank), entries, {{"pieces", piece_table_}});
}

CheckpointWriter::~CheckpointWriter() {
  if (pending_ && pending_->thread.joinable()) pending_->thread.join();
}

uint64_t CheckpointWriter::host_bytes() const {
  if (options_.async) return layout_.data_bytes;
  return std::min<uint64_t>(layout_.data_bytes, kWriteChunk);
}

uint64_t CheckpointWriter::checkpoint_bytes() {
  const double files = groups_.world->all_reduce_scalar(static_cast<double>(rank_file_bytes()));
  const uint64_t manifest = 4096 + options_.config.dump(2).size() + 128 * static_cast<uint64_t>(groups_.layout.world());
  return static_cast<uint64_t>(files) + manifest;
}

config::Json CheckpointWriter::manifest_without_files(int64_t step) {
  const auto& l = groups_.layout;
  return {{"format", format::kFormat},
          {"version", format::kVersion},
          {"step", step},
          {"optimizer_step", engine_.store().optimizer().step_count()},
          {"data_position", {{"step", step}}},
          {"rng", {{"seed", options_.config.value("seed", 0)}, {"generator", "philox4x32-10"}}},
          {"loss_scale",
           {{"scale", engine_.loss_scale()},
            {"good_steps", engine_.loss_scale_good_steps()},
            {"overflows_left", engine_.loss_scale_overflows_left()}}},
          {"saved_by",
           {{"virtual_gpus", l.dp},
            {"pipeline", l.pp},
            {"tensor", l.tp},
            {"context", l.cp},
            {"zero_stage", engine_.store().zero_stage()}}},
          {"num_parameters", engine_.model().num_parameters()},
          {"config", options_.config}};
}

void CheckpointWriter::copy_state(Pending& w) {
  checkpoint::Progress progress("copying checkpoint state to host memory", layout_.data_bytes, options_.print,
                                options_.progress);
  // A GPU's state is queued on its stream of copies to host memory after the work queued so far (this step's update),
  // so the next step's forward and backward run beside the copies: its update waits for them on the GPU
  // (ParameterStore::update_after) and the writer thread before it writes. State in host memory (offloaded, or paged in
  // from a swap file only for the visit) is copied at once.
  std::vector<std::pair<Device*, uint64_t>> fences;
  visit_saved(
      engine_, groups_.coord,
      [&](const nn::Parameter&, const std::string& key, int64_t, const Tensor& value, const Tensor& m,
          const Tensor& v) {
        const Tensor* parts[] = {&value, &m, &v};
        for (int i = 0; i < 3; ++i) {
          Device& d = parts[i]->device();
          auto f = std::find_if(fences.begin(), fences.end(), [&](const auto& e) { return e.first == &d; });
          if (f == fences.end()) f = fences.insert(fences.end(), {&d, d.fence()});
          const uint64_t ticket = d.copy_to_host_async(image_.data() + layout_.offsets.at(key + "/" + kParts[i]),
                                                       parts[i]->raw(), parts[i]->nbytes(), f->second);
          if (ticket != 0) {  // a device's copies run in order: its last ticket covers them all
            auto c = std::find_if(w.copies.begin(), w.copies.end(), [&](const auto& e) { return e.first == &d; });
            if (c == w.copies.end())
              w.copies.push_back({&d, ticket});
            else
              c->second = ticket;
          }
          progress.add(parts[i]->nbytes());
        }
      });
  // The update's ticket is one of its own (an empty copy after the others), as one ticket has one waiter: the writer
  // thread's wait on the last copy's ticket retires it.
  for (const auto& [d, last] : w.copies)
    engine_.store().update_after(*d, d->copy_to_host_async(nullptr, nullptr, 0, last));
  progress.finish();
}

double CheckpointWriter::save(int64_t step) {
  const auto t0 = Clock::now();
  if (pending_) complete();
  const fs::path root(options_.root);
  auto p = std::make_unique<Pending>();
  p->step = step;
  p->final_dir = root / format::step_folder_name(step);
  p->tmp_dir = root / (format::step_folder_name(step) + ".tmp");
  if (groups_.rank == 0) {
    // The folder is this job's (its lock): an unfinished checkpoint in it is a killed job's, of no use to anyone.
    if (!swept_ && fs::is_directory(root))
      for (const auto& e : fs::directory_iterator(root))
        if (e.is_directory() && e.path().extension() == ".tmp") fs::remove_all(e.path());
    fs::remove_all(p->tmp_dir);
    fs::create_directories(p->tmp_dir);
  }
  swept_ = true;
  groups_.world->barrier();
  p->manifest = manifest_without_files(step);
  const std::string path = (p->tmp_dir / format::rank_file_name(groups_.rank)).string();
  const std::string what =
      "writing checkpoint " + format::step_folder_name(step) + (groups_.layout.world() > 1 ? " (rank 0's file)" : "");
  p->started = Clock::now();
  pending_ = std::move(p);
  Pending& w = *pending_;
  if (options_.async) {
    if (image_.bytes() < layout_.data_bytes) image_ = HostBuffer(layout_.data_bytes, *device_);
    copy_state(w);
    const bool kill = options_.kill_in_write_step == step;
    w.thread = std::thread([this, &w, path, what, kill] {
      try {
        for (const auto& [d, ticket] : w.copies) d->host_waits(ticket);  // the state has arrived
        checkpoint::Progress progress(what, layout_.file_bytes(), options_.print, options_.progress);
        const auto t = Clock::now();
        w.crc = write_image(path, layout_.prefix, image_.data(), layout_.data_bytes, progress, kill);
        w.write_s = seconds_since(t);
        progress.finish();
      } catch (const std::exception& e) {
        w.error = e.what();
      }
      w.done.store(true, std::memory_order_release);
    });
    const double blocked = seconds_since(t0);
    if (options_.print) {
      std::printf("checkpoint %s: %s %s %s host memory in %s; writing it in the background\n",
                  format::step_folder_name(step).c_str(), format_bytes(layout_.data_bytes).c_str(),
                  w.copies.empty() ? "copied to" : "queued for copying beside the next step to",
                  image_.pinned() ? "page-locked" : "pageable", format_duration(blocked).c_str());
      std::fflush(stdout);
    }
    return blocked;
  }
  if (staging_.bytes() == 0 && device_) staging_ = HostBuffer(host_bytes(), *device_);
  try {
    checkpoint::Progress progress(what, layout_.file_bytes(), options_.print, options_.progress);
    const auto t = Clock::now();
    w.crc = write_staged(path, layout_.prefix, slots_of(engine_, groups_.coord, layout_), staging_, progress);
    w.write_s = seconds_since(t);
    progress.finish();
  } catch (const std::exception& e) {
    w.error = e.what();
  }
  w.done = true;
  complete();
  return seconds_since(t0);
}

void CheckpointWriter::poll() {
  if (!pending_) return;
  // Every rank done: the largest "not done" is 0.
  if (groups_.world->all_reduce_scalar(pending_->done.load(std::memory_order_acquire) ? 0.0 : 1.0,
                                       comm::ReduceOp::Max) == 0)
    complete();
}

double CheckpointWriter::finish() {
  if (!pending_) return 0;
  const auto t0 = Clock::now();
  complete();
  return seconds_since(t0);
}

void CheckpointWriter::fail_write(const Pending& p, int first, const std::string& cause) {
  if (groups_.rank == 0) {
    std::error_code ec;
    fs::remove_all(p.tmp_dir, ec);
  }
  // The failing rank's own words, where only it has them; rank 0 says what that leaves.
  if (first != 0 && groups_.rank == first) {
    std::fprintf(stderr, "error on rank %d: %s\n", groups_.rank, cause.c_str());
    std::fflush(stderr);
  }
  groups_.world->barrier();
  const auto complete = format::complete_checkpoint_paths(options_.root);
  throw AgreedError(detail::concat(
      "checkpoint ", format::step_folder_name(p.step), " could not be written (",
      groups_.rank == first ? cause
                            : "rank " + std::to_string(first) + " could not write its file: its message is above",
      "): its unfinished folder is removed. The newest complete checkpoint is ",
      complete.empty() ? std::string("none: this run has written no complete checkpoint")
                       : "of step " + std::to_string(step_of_folder(complete.back())) + " (" +
                             complete.back().string() + "): resume from it with --resume",
      ". Free space where the checkpoints go, or lower checkpoint.keep, or write the run elsewhere with --out"));
}

void CheckpointWriter::complete() {
  std::unique_ptr<Pending> p = std::move(pending_);
  if (p->thread.joinable()) p->thread.join();
  const int world = groups_.layout.world();
  // The lowest rank whose file could not be written, or `world`.
  const auto first_failing = [&](bool failed) {
    return static_cast<int>(
        -groups_.world->all_reduce_scalar(failed ? -groups_.rank : -static_cast<double>(world), comm::ReduceOp::Max));
  };
  if (const int first = first_failing(!p->error.empty()); first < world) fail_write(*p, first, p->error);
  config::Json files = config::Json::object();
  uint64_t total = 0;
  for (int r = 0; r < world; ++r) {
    const double c = groups_.world->all_reduce_scalar(r == groups_.rank ? static_cast<double>(p->crc) : 0.0);
    const double b =
        groups_.world->all_reduce_scalar(r == groups_.rank ? static_cast<double>(layout_.file_bytes()) : 0.0);
    files[format::rank_file_name(r)] = {{"crc32", static_cast<uint32_t>(c)}, {"bytes", static_cast<uint64_t>(b)}};
    total += static_cast<uint64_t>(b);
  }
  // The manifest last, then the folder renamed into place: only then is it a checkpoint.
  std::string manifest_error;
  if (groups_.rank == 0) {
    try {
      p->manifest["files"] = files;
      checkpoint::write_file_atomic((p->tmp_dir / "manifest.json").string(), p->manifest.dump(2) + "\n");
      fs::remove_all(p->final_dir);
      fs::rename(p->tmp_dir, p->final_dir);
      checkpoint::fsync_directory(options_.root);
    } catch (const std::exception& e) {
      manifest_error = e.what();
    }
  }
  if (const int first = first_failing(!manifest_error.empty()); first < world) fail_write(*p, first, manifest_error);
  if (groups_.rank == 0) {
    const auto all = format::complete_checkpoint_paths(options_.root);
    for (size_t i = 0; i + static_cast<size_t>(std::max<int64_t>(options_.keep, 1)) < all.size(); ++i)
      fs::remove_all(all[i]);
  }
  groups_.world->barrier();
  if (options_.print) {
    // The write's own time and rate (rank 0's file), not the wait until a step boundary noticed it was done.
    const std::string rate =
        format_bytes(static_cast<uint64_t>(static_cast<double>(layout_.file_bytes()) / std::max(p->write_s, 1e-9)));
    std::printf("saved checkpoint %s (%s; %s written in %.3f s, %s/s)\n", p->final_dir.string().c_str(),
                format_bytes(total).c_str(), world > 1 ? "rank 0's file" : "its file", p->write_s, rate.c_str());
    std::fflush(stdout);
  }
}

uint64_t async_checkpoint_host_bytes(parallel::Engine& engine, const layout::Coord& coord) {
  uint64_t bytes = 0;
  visit_saved(engine, coord,
              [&](const nn::Parameter&, const std::string&, int64_t, const Tensor& value, const Tensor&,
                  const Tensor&) { bytes += 3 * static_cast<uint64_t>(value.numel()) * sizeof(float); });
  return bytes;
}

}  // namespace tandem::train
