// OffloadUpdater: the host half of offload_optimizer, the ParameterStore's offloaded units' AdamW on the host and
// their new values on their way back to the device. The updates run on a thread of its own, one unit at a time in the
// order they were submitted, while the caller goes on with the device's work; the store waits for a unit's updates
// before it touches that unit again (wait), and for all of them before it reads the state (finish).
// One unit's update: its AdamW pass over its owned shard (paged in from the swap file when the state lives there), the
// rounded compute-dtype values written in that same pass, then copied up to where the device keeps the owned values.
// A staged unit (Unit::staged(): the host keeps no copy of its values) goes in pieces of at most `upload_piece`
// elements through two piece-sized upload buffers in turn, so that the host updates piece k while piece k - 1 travels
// up; every other unit goes whole from its host values. The device side of each copy is ordered by the device's
// transfer tickets (device_interface.h): an upload starts after the device work queued before its update (the
// update's fence), and the unit's last upload's ticket (Unit::upload) is what a later use of the values waits for.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/optim/adamw.h"
#include "tandem/parallel/zero/step_observer.h"
#include "tandem/parallel/zero/swap_files.h"
#include "tandem/parallel/zero/unit.h"

namespace tandem::parallel {

// One offloaded unit's update of one step: its count, lr and gradient scale, the fence its uploads wait for (the
// device work queued before it, which still reads the old values), and who watches it (StepObserver::watches_update).
struct QueuedUpdate {
  Unit* unit = nullptr;
  float lr = 0, grad_scale = 1;
  int64_t step = 0;
  uint64_t fence = 0;
  StepObserver* watcher = nullptr;  // told of its host AdamW and its uploads; null when none watches
};

class OffloadUpdater {
 public:
  // What the updates read and write, all owned by the store and outliving the updater.
  struct Setup {
    Device& device;                             // where the values are used
    Device* host;                               // host memory (the upload buffers); null without offload
    optim::AdamW& adamw;                        // its segments hold the offloaded units' host state
    const std::vector<int64_t>& segment_start;  // by segment: where it starts in its unit's owned shard
    SwapFiles& swap;                            // nvme: the swapped units' state and values
    DType compute;                              // the values' dtype
    int64_t upload_piece;                       // offload_optimizer.upload_piece: a staged unit's pieces, elements
    bool param_offload;                         // offload_param: the device takes the host values at each gather
    bool thread;                                // updates on a thread of their own (OffloadRun::update_thread)
  };
  // `largest_staged`: the largest owned shard of a staged unit (0: none), which with upload_piece sizes the buffers.
  OffloadUpdater(const Setup& setup, int64_t largest_staged);
  ~OffloadUpdater() { stop(); }

  // Runs the update on the update's thread (started with the first), or at once without one (Setup::thread).
  void submit(const QueuedUpdate& q);
  // Until the unit's submitted updates are done; rethrows what failed on the update's thread.
  void wait(const Unit& u);
  // Until every submitted update is done; rethrows what failed.
  void finish();
  // Ends the update's thread once its queue is empty.
  void stop();
  // The unit's owned values cast from its fp32 master (no update) and uploaded after the device work of `after`:
  // after the master was written from outside (a checkpoint). Only once finished (the caller's thread).
  void upload_current(Unit& u, uint64_t after) { update_values(u, nullptr, after, /*watcher=*/nullptr); }

 private:
  void run(const QueuedUpdate& q);
  void loop();  // the update's thread: the queue in order, until stop()
  // The unit's owned values from its master, through `update`'s AdamW pass when there is one (which writes the
  // rounded values too; the swapped state written back), and uploaded in pieces (staged) or whole.
  void update_values(Unit& u, const QueuedUpdate* update, uint64_t after, StepObserver* watcher);
  // Elements [begin, end) of the unit's owned values into `values` (end - begin): the AdamW pass over the segments
  // there when `update`, else the master's values cast. `state`: read_state's views for a swapped unit.
  void write_values(const Unit& u, const QueuedUpdate* update, const std::array<Tensor, 3>& state, int64_t begin,
                    int64_t end, const Tensor& values);
  // Where the next `n` values go before their upload: the unit's host values (its own, or the parameters' swap
  // buffer of the update's thread), or for a staged unit the next upload buffer once its last upload has left it.
  Tensor values_for_upload(Unit& u, int64_t n);
  // `source` up into the device's owned values from element `at` of the owned shard on, after `after`; at stages 1-2
  // the full values go stale (the store gathers them again before use). Nothing with offload_param: the store's
  // gathers take the host values themselves.
  void upload(Unit& u, const Tensor& source, int64_t at, uint64_t after, StepObserver* watcher);

  Setup s_;
  // The staged units' two compute-dtype host buffers (min(largest staged shard, upload_piece) each), the ticket of
  // each one's last upload, and the one to use next. Used by one thread at a time: the update's, or the caller's once
  // the updates are finished.
  std::array<Tensor, 2> upload_buffers_;
  std::array<uint64_t, 2> upload_tickets_{};
  size_t next_upload_buffer_ = 0;
  // The thread and its queue; mu_ guards the queue, pending_, stopping_ and error_.
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<QueuedUpdate> queue_;
  std::unordered_map<const Unit*, int> pending_;  // by unit: updates submitted and not yet done
  int in_flight_ = 0;                             // the sum of pending_
  bool stopping_ = false;
  std::exception_ptr error_;  // the first failure; after it the queue is only marked done
};

}  // namespace tandem::parallel
