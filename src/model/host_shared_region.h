#pragma once
// SharedRegion for engines that compute on the CPU: a POSIX shared-memory object (shm_open), named in its handle
// ("shm:NAME:FLOATS"). The maker unlinks the name when it is destroyed; openers keep their mapping until theirs.
#include <memory>
#include <string>

#include "model/shared_region.h"

namespace strata::model {

std::unique_ptr<SharedRegion> make_host_shared_region(int64_t floats);
// Throws strata::Error naming the handle and the cause (not a shm handle, no such object, a size that differs).
std::unique_ptr<SharedRegion> open_host_shared_region(const std::string& handle);

}  // namespace strata::model
