// SIGTERM, SIGINT and SIGUSR2 as a request to stop: the trainer finishes its step, saves a checkpoint and exits 0.
// The flag is process state by necessity (a signal handler can reach nothing else); nothing but these two
// functions touches it.
#pragma once

namespace tandem::train {

// Installs the handlers (idempotent). A second signal ends the process at once.
void install_stop_handlers();
bool stop_requested();

}  // namespace tandem::train
