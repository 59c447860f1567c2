// HostCheckpoints: where activation checkpointing keeps each layer's input between its forward and its backward
// when the device cannot hold them (parallel.cpu_checkpointing, docs/long-context.md): in host memory, copied there
// and back through the device's ticketed copies (core/device_interface.h), so that on a GPU the copies run on their
// own streams beside the layers' work. Model::forward_range and backward_range call it; nothing else does.
//
// The order of one layer i's input x (B, T, C), in the forward and the backward:
//   forward  : copy_up(x) before the layer's forward is queued: the copy runs beside that forward (both only read x);
//              then release_after_copy(): device work queued later waits for the copy, so x may be released (the
//              memory's next user on the device comes after that wait).
//   backward : before layer i + 1's recompute, prefetch(i's Saved) allocates x again on the device and starts its copy
//              down after the device work queued so far (the memory it reuses is free of it then); take() makes the
//              device wait for that copy before layer i's recompute and gives its host buffer back.
// Host buffers are kept for reuse, by shape and dtype, for as long as this object lives: page-locking host memory is
// slow, and freeing it waits for the whole device. A buffer is written again only once the copy that read it last
// is done. The host memory is an accounted device, so the planner's counting host sees every buffer as the run's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/nn/layer.h"

namespace tandem::nn {

class HostCheckpoints {
 public:
  // `device`: where the layers run; `host`: the host memory the inputs wait in (page-locked for a GPU's copies);
  // `layers`: how many of a chunk's first layers send their inputs there (-1: every one that can).
  HostCheckpoints(Device& device, Device& host, int64_t layers = -1) : device_(device), host_(host), layers_(layers) {}
  ~HostCheckpoints();
  HostCheckpoints(const HostCheckpoints&) = delete;
  HostCheckpoints& operator=(const HostCheckpoints&) = delete;

  // Where the copies are shown, if anywhere (a step's timeline): asked before each copy whether it records copies in
  // that direction now, then given the copy's start and end as marks of the device's queue (Device::mark).
  struct CopyTimeline {
    virtual ~CopyTimeline() = default;
    virtual bool records_copy(bool up) const = 0;
    virtual void copied(bool up, std::string name, uint64_t start, uint64_t end) = 0;
  };
  void set_timeline(CopyTimeline* timeline) { timeline_ = timeline; }

  // Whether the input of the layer at `position` of a chunk of `size` layers waits here. The chunk's last layer keeps
  // its input on the device: its backward comes first, so the input would have to come straight back.
  bool holds(size_t position, size_t size) const {
    return position + 1 < size && (layers_ < 0 || static_cast<int64_t>(position) < layers_);
  }

  // Starts copying x (on the device, made by the work queued so far) into a host buffer; returns what the layer
  // keeps: that buffer, of x's shape and dtype. At most one copy is pending at a time. `layer` names it in a timeline.
  Saved copy_up(const Tensor& x, const std::string& layer = "");
  // Device work queued from now on waits for the pending copy up: the device tensor it read may be released.
  void release_after_copy();

  // Starts bringing back the input kept in `s` (one copy_up's Saved) into a new device tensor.
  void prefetch(const Saved& s, const std::string& layer = "");
  // The device tensor of the input kept in `s`, once device work queued from now on may read it (prefetched or not);
  // the host buffer goes back for reuse.
  Tensor take(const Saved& s, const std::string& layer = "");

 private:
  struct Coming {  // an input on its way back to the device
    Tensor device;
    uint64_t ticket = 0;
  };
  struct Spare {  // a host buffer kept for reuse, and the copy down that read it last
    Tensor host;
    uint64_t read = 0;
  };
  Tensor host_buffer(const Tensor& like);
  // Issues `copy` (returning its ticket) on the queue of its direction, after the fence `after`; with a timeline that
  // records it, marks that queue around it.
  template <class Copy>
  uint64_t issue(bool up, const std::string& layer, uint64_t after, Copy&& copy);

  Device& device_;
  Device& host_;
  int64_t layers_;        // of each chunk, the first layers whose inputs wait here; -1: all but the last
  uint64_t pending_ = 0;  // the copy up issued by copy_up and not yet waited for
  bool has_pending_ = false;
  std::map<const void*, Coming> coming_;  // by the host buffer's address
  std::vector<Spare> spare_;
  CopyTimeline* timeline_ = nullptr;
};

}  // namespace tandem::nn
