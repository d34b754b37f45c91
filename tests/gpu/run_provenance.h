#pragma once
// What a GPU results file records about its run (issue 23): the device's name and the UTC date; the commit comes from
// cli/git_commit.h.
#include <cuda_runtime.h>

#include <ctime>
#include <string>

namespace strata::test {

struct RunProvenance {
  std::string gpu, date;
};

inline RunProvenance run_provenance() {
  cudaDeviceProp prop{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) prop.name[0] = 0;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {prop.name, date};
}

}  // namespace strata::test
