// CudaBackend's end of a step: which logits come home, and how (see logits_out.h).
#include <algorithm>
#include <cstring>
#include <span>

#include "backend/cpu/sampling.h"
#include "backend/cuda/cuda_backend_op.h"
#include "backend/cuda/linear.h"
#include "backend/cuda/sampling.h"
#include "core/error.h"

namespace strata::cuda {

Mat CudaBackend::rows_to_host(const Tensor& x, const std::vector<int64_t>& rows) {
  const OpClock::Scope timed_op_(clock_, "rows_to_host", rows_.rows, stream_);
  Mat m(static_cast<int64_t>(rows.size()), x.cols);
  if (rows.empty()) return m;
  const size_t row_bytes = static_cast<size_t>(x.cols) * sizeof(float);
  char* dst = staging_ ? static_cast<char*>(staging_->bytes(row_bytes * rows.size()))
                       : reinterpret_cast<char*>(m.v.data());
  // One copy per run of consecutive rows: usually the whole list is one run.
  for (size_t i = 0; i < rows.size();) {
    size_t end = i + 1;
    while (end < rows.size() && rows[end] == rows[end - 1] + 1) ++end;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst + i * row_bytes, x.data + rows[i] * x.cols, (end - i) * row_bytes,
                                      cudaMemcpyDeviceToHost, stream_));
    i = end;
  }
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (staging_) std::memcpy(m.v.data(), dst, row_bytes * rows.size());
  return m;
}

CudaBackend::Tensor CudaBackend::keep_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  const OpClock::Scope timed_op_(clock_, "keep_rows", rows_.rows, stream_);
  Tensor out = tensor(static_cast<int64_t>(rows.size()), x.cols);
  // begin_step uploaded the step's stream rows; another list (no caller today) goes up here, unrecorded.
  const int32_t* index = kept_device_;
  if (!kept_ || rows != *kept_) {
    not_recordable("keep_rows rows");
    index = upload(std::vector<int32_t>(rows.begin(), rows.end()));
  }
  gather_rows(x.data, x.cols, index, out.rows, out.data, stream_);
  return out;
}

void CudaBackend::apply_penalties(Tensor& x, const std::vector<int64_t>& rows,
                                  const std::vector<const model::RowPenalties*>& penalties) {
  if (rows.empty()) return;
  const OpClock::Scope timed_op_(clock_, "apply_penalties", rows_.rows, stream_);
  // The biases, then the repetition entries, then the subtractions. A bias b is applied as the subtraction of -b:
  // l - (-b) is l + b exactly, the host's bits, and the penalty kernel stays as it is.
  std::vector<PenaltyEntry> entries;
  for (size_t i = 0; i < rows.size(); ++i)
    for (const auto& [id, amount] : penalties[i]->bias) entries.push_back({static_cast<int32_t>(rows[i]), id, -amount});
  const size_t n_bias = entries.size();
  for (size_t i = 0; i < rows.size(); ++i)
    if (penalties[i]->repetition != 1.0f)
      for (int32_t id : penalties[i]->seen)
        entries.push_back({static_cast<int32_t>(rows[i]), id, penalties[i]->repetition});
  const size_t n_repetition = entries.size() - n_bias;
  for (size_t i = 0; i < rows.size(); ++i)
    for (const auto& [id, amount] : penalties[i]->subtract) entries.push_back({static_cast<int32_t>(rows[i]), id, amount});
  if (entries.empty()) return;
  auto* d = static_cast<PenaltyEntry*>(scratch_.bytes(entries.size() * sizeof(PenaltyEntry)));
  // From pageable memory the copy is staged before the call returns, so `entries` may go out of scope after it.
  STRATA_CUDA_CHECK(cudaMemcpyAsync(d, entries.data(), entries.size() * sizeof(PenaltyEntry), cudaMemcpyHostToDevice,
                                    stream_));
  // Biases first, in a launch of their own: an id may have a bias and a penalty, and each launch touches a
  // (row, id) at most once.
  if (n_bias > 0) cuda::apply_penalties(x.data, x.cols, nullptr, 0, d, static_cast<int64_t>(n_bias), stream_);
  const PenaltyEntry* d_repetition = d + n_bias;
  cuda::apply_penalties(x.data, x.cols, d_repetition, static_cast<int64_t>(n_repetition), d_repetition + n_repetition,
                        static_cast<int64_t>(entries.size() - n_bias - n_repetition), stream_);
  changed(x.data);
}

void CudaBackend::mask_rows(Tensor& x, const std::vector<int64_t>& rows,
                            const std::vector<const model::TokenMask*>& masks) {
  if (rows.empty()) return;
  const OpClock::Scope timed_op_(clock_, "mask_rows", rows_.rows, stream_);
  // One upload: the row ids, then each row's words, cut or zero-padded to the row's ceil(cols / 32) (a shorter mask
  // allows no id past its last word, as on the host).
  const size_t n_words = static_cast<size_t>((x.cols + 31) / 32), count = rows.size(), total = count + count * n_words;
  // Written straight into the pinned staging (set_mask_staging); a step ends waiting for its stream (end_step), so
  // the copy is done before the next step writes the buffer again. Without staging: pageable memory, which the
  // driver has taken when the call returns.
  std::vector<uint32_t> pageable;
  uint32_t* host = nullptr;
  if (mask_staging_) {
    host = static_cast<uint32_t*>(mask_staging_->bytes(total * sizeof(uint32_t)));
  } else {
    pageable.resize(total);
    host = pageable.data();
  }
  for (size_t i = 0; i < count; ++i) {
    host[i] = static_cast<uint32_t>(rows[i]);
    const model::TokenMask& m = *masks[i];
    uint32_t* words = host + count + i * n_words;
    const size_t n = std::min(m.size(), n_words);
    std::copy_n(m.begin(), n, words);
    std::fill(words + n, words + n_words, 0u);
  }
  auto* d = static_cast<uint32_t*>(scratch_.bytes(total * sizeof(uint32_t)));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(d, host, total * sizeof(uint32_t), cudaMemcpyHostToDevice, stream_));
  cuda::mask_rows(x.data, x.cols, reinterpret_cast<const int32_t*>(d), d + count, static_cast<int64_t>(n_words),
                  static_cast<int64_t>(count), stream_);
  changed(x.data);
}

std::vector<float> CudaBackend::top_probabilities(const Tensor& x, const std::vector<int64_t>& rows) {
  std::vector<float> out(rows.size());
  if (rows.empty()) return out;
  const OpClock::Scope timed_op_(clock_, "top_probabilities", rows_.rows, stream_);
  const std::vector<int32_t> ids(rows.begin(), rows.end());
  auto* d_rows = static_cast<int32_t*>(scratch_.bytes(ids.size() * (sizeof(int32_t) + sizeof(float))));
  auto* d_out = reinterpret_cast<float*>(d_rows + ids.size());
  STRATA_CUDA_CHECK(cudaMemcpyAsync(d_rows, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  cuda::top_probability_rows(x.data, x.cols, d_rows, static_cast<int64_t>(ids.size()), d_out, stream_);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

std::vector<int32_t> CudaBackend::pick_rows(const Tensor& x, const std::vector<int64_t>& rows,
                                            const std::vector<model::TokenPick>& picks) {
  std::vector<int32_t> out(rows.size());
  if (rows.empty()) return out;
  const OpClock::Scope timed_op_(clock_, "pick_rows", rows_.rows, stream_);
  // Masses are summed as 64-bit multiples of 2^-46 of the top token's probability (sampling.cu).
  if (x.cols >= (int64_t{1} << 17)) fail("pick_rows: a vocabulary of ", x.cols, " tokens; the device sampler takes < 131072");
  std::vector<int32_t> greedy_rows;
  std::vector<size_t> greedy_at, random_at;
  std::vector<RowPick> random;
  for (size_t i = 0; i < rows.size(); ++i) {
    const model::TokenPick& p = picks[i];
    if (p.greedy()) {
      greedy_rows.push_back(static_cast<int32_t>(rows[i]));
      greedy_at.push_back(i);
      continue;
    }
    RowPick r;
    r.inv_temperature = 1.0 / p.temperature;
    r.top_p = p.top_p;
    r.min_p = p.min_p;
    r.uniform = p.uniform;
    r.top_k = static_cast<int32_t>(std::min<int64_t>(p.top_k, x.cols));
    r.row = static_cast<int32_t>(rows[i]);
    random.push_back(r);
    random_at.push_back(i);
  }
  // One upload (greedy row ids, then the random picks) and one download of every id.
  const size_t n_greedy = greedy_rows.size(), n_random = random.size();
  const size_t random_offset = (n_greedy * sizeof(int32_t) + alignof(RowPick) - 1) / alignof(RowPick) * alignof(RowPick);
  auto* d = static_cast<char*>(scratch_.bytes(random_offset + n_random * sizeof(RowPick) + rows.size() * sizeof(int32_t)));
  std::vector<char> host(random_offset + n_random * sizeof(RowPick));
  std::memcpy(host.data(), greedy_rows.data(), n_greedy * sizeof(int32_t));
  std::memcpy(host.data() + random_offset, random.data(), n_random * sizeof(RowPick));
  auto* d_greedy = reinterpret_cast<int32_t*>(d);
  auto* d_random = reinterpret_cast<RowPick*>(d + random_offset);
  auto* d_out = reinterpret_cast<int32_t*>(d + random_offset + n_random * sizeof(RowPick));
  // From pageable memory the copy is staged before the call returns, so `host` may go out of scope after it.
  STRATA_CUDA_CHECK(cudaMemcpyAsync(d, host.data(), host.size(), cudaMemcpyHostToDevice, stream_));
  if (n_greedy) cuda::argmax_rows(x.data, x.cols, d_greedy, static_cast<int64_t>(n_greedy), d_out, stream_);
  if (n_random) cuda::sample_rows(x.data, x.cols, d_random, static_cast<int64_t>(n_random), d_out + n_greedy, stream_);
  std::vector<int32_t> ids(rows.size());
  STRATA_CUDA_CHECK(cudaMemcpyAsync(ids.data(), d_out, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t g = 0; g < n_greedy; ++g) out[greedy_at[g]] = ids[g];
  for (size_t r = 0; r < n_random; ++r) {
    int32_t id = ids[n_greedy + r];
    const size_t i = random_at[r];
    // Rows the kernel leaves to the host (no finite logit, or thousands of near-equal logits at a cut): the row
    // home, picked by the CPU backend's reference op.
    if (id == kPickOnHost) {
      std::vector<float> row(static_cast<size_t>(x.cols));
      STRATA_CUDA_CHECK(cudaMemcpy(row.data(), x.data + rows[i] * x.cols, row.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost));
      id = cpu::pick_token(row, picks[i]);
    }
    out[i] = id;
  }
  return out;
}

}  // namespace strata::cuda
