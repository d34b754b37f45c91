#include "model/deepseek_v4/draft_vocabulary.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"

namespace strata::model::v4 {

std::vector<int32_t> read_draft_vocabulary(const std::string& path, int64_t vocab) {
  std::ifstream in(path);
  if (!in) fail("draft vocabulary ", path, ": cannot be read");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    fail("draft vocabulary ", path, ": not JSON (", e.what(), ")");
  }
  if (!j.is_object() || !j.contains("ids") || !j["ids"].is_array())
    fail("draft vocabulary ", path, ": expected an object with an \"ids\" array of token ids");
  const nlohmann::json& ids = j["ids"];
  if (ids.empty()) fail("draft vocabulary ", path, ": \"ids\" is empty");
  std::vector<int32_t> out;
  std::unordered_set<int64_t> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer()) fail("draft vocabulary ", path, ": ids[", i, "] is not an integer");
    const auto id = ids[i].get<int64_t>();
    if (id < 0 || id >= vocab)
      fail("draft vocabulary ", path, ": ids[", i, "] = ", id, " is outside the vocabulary [0, ", vocab, ")");
    if (!seen.insert(id).second) fail("draft vocabulary ", path, ": token ", id, " is listed twice");
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

void set_draft_vocabulary(ModelWeights& w, std::vector<int32_t> ids) {
  const WeightRef& head = w.head;
  auto values = std::make_shared<std::vector<float>>(ids.size() * static_cast<size_t>(head.cols));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= head.rows)
      fail("draft vocabulary: token ", ids[i], " is outside the head's ", head.rows, " rows");
    head.row_f32(ids[i], values->data() + i * static_cast<size_t>(head.cols));
  }
  WeightRef sub;
  sub.dtype = DType::F32;
  sub.data = reinterpret_cast<const uint8_t*>(values->data());
  sub.rows = static_cast<int64_t>(ids.size());
  sub.cols = head.cols;
  sub.fp32_product = head.fp32_product;
  w.draft_head = sub;
  w.draft_head_f32 = std::move(values);
  w.draft_vocab = std::move(ids);
}

}  // namespace strata::model::v4
