#include "tandem/train/stop_signal.h"

#include <csignal>
#include <cstdlib>

namespace tandem::train {

namespace {
volatile std::sig_atomic_t stop_flag = 0;

extern "C" void on_stop_signal(int sig) {
  if (stop_flag) std::_Exit(128 + sig);  // asked twice: do not wait for the step
  stop_flag = 1;
}
}  // namespace

void install_stop_handlers() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGUSR2, on_stop_signal);  // what `tandem train -n N` and mpirun forward to every rank
}

bool stop_requested() { return stop_flag != 0; }

}  // namespace tandem::train
