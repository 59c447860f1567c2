// An error that every rank of the job raises at the same point, after agreeing on it (a refusal before step 1, a
// checkpoint that could not be written): rank 0's message is the one to print, once, whatever the launcher. Errors
// of one rank alone stay plain tandem::Error.
#pragma once

#include "tandem/core/error.h"

namespace tandem::train {

class AgreedError : public Error {
 public:
  using Error::Error;
};

}  // namespace tandem::train
