#pragma once
// A reduced draft vocabulary for the MTP layer (docs/mtp.md, "A reduced draft vocabulary"). The MTP head shares
// the main model's vocabulary matrix, and on a small model that product is most of a draft step (the demo model:
// 24.8 M of 28.3 M parameters). Scoring only the tokens drafts actually are (FR-Spec's idea: the most frequent
// ones) makes a draft step cheap; verification is unchanged, so greedy output stays the plain decode's and sampled
// output an exact draw (a draft is still an exact draw from the distribution it was drawn from, whose support is now
// the subset). A token outside the subset is never drafted, only emitted by the target.
#include <cstdint>
#include <string>
#include <vector>

#include "model/deepseek_v4/weights.h"

namespace strata::model::v4 {

// The file a checkpoint directory may carry: {"ids": [id, ...]} (distinct ids in [0, vocab), most useful first;
// other keys are notes and ignored).
inline constexpr const char* kDraftVocabularyFile = "draft_vocab.json";

// The ids of `path` (kDraftVocabularyFile's format), each checked against `vocab`; every problem is named with the
// file. A missing file is an error here: callers check for it.
std::vector<int32_t> read_draft_vocabulary(const std::string& path, int64_t vocab);

// Gives `w`'s MTP head the rows `ids` of `w.head` (as fp32: row_f32's values). Before the backend is built (a GPU
// backend uploads draft_head with the other matrices).
void set_draft_vocabulary(ModelWeights& w, std::vector<int32_t> ids);

}  // namespace strata::model::v4
