#include "backend/cuda/step_graphs.h"

namespace strata::cuda {

StepGraphs::StepGraphs(bool enabled) : enabled_(enabled) {}

StepGraphs::~StepGraphs() { clear(); }

void StepGraphs::clear() {
  for (auto& [shape, e] : entries_)
    if (e.exec) cudaGraphExecDestroy(e.exec);
  entries_.clear();
}

StepGraphs::Entry& StepGraphs::entry(const std::vector<int64_t>& shape) {
  if (entries_.size() >= kMaxEntries && !entries_.count(shape)) clear();
  return entries_[shape];
}

}  // namespace strata::cuda
