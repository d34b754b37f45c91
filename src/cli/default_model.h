#pragma once
// The embedded default checkpoint: the demo model committed in the repository's models/demo/ (docs/demo_model.md),
// which `strata generate` and `strata serve` use when --model is left out.
#include <string>
#include <vector>

#include "cli/args.h"

namespace strata::cli {

// Where the default model is looked for, in order: models/demo/ beside the folder of this executable (a build
// folder in the repository, e.g. build/strata → models/demo/), then in the source tree this binary was built from.
std::vector<std::string> default_model_candidates();

// `dir` itself when it is a directory; otherwise an error that says it does not exist or is not a directory (rather
// than a later, puzzling one from the first file read in it).
const std::string& checked_model_dir(const std::string& dir);

// --model DIR (checked as above) when given; otherwise the first candidate that holds a config.json. Without one, an error that names
// the places looked at and how to get the model.
std::string model_dir_or_default(const Args& args);

// The name a request's "model" must match when --served-model-name is not given, as `strata serve` and the
// offline batches default it: the model folder's name (of its absolute path when DIR is "." or ends in "/.").
std::string default_served_model_name(const std::string& dir);

}  // namespace strata::cli
