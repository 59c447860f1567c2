// `tandem info`: what this build can run on and what this machine has (backends, GPUs, library versions,
// threads), like `ds_report`. Its last line, "usable GPUs: N", is what scripts read.
#pragma once

namespace tandem::app {

int run_info_command();

}  // namespace tandem::app
