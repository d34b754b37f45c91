#include "cli/default_model.h"

#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace strata::cli {

namespace fs = std::filesystem;

std::vector<std::string> default_model_candidates() {
  std::vector<std::string> out;
  auto add = [&](const fs::path& p) {
    const std::string s = p.lexically_normal().string();
    for (const std::string& seen : out)
      if (seen == s) return;
    out.push_back(s);
  };
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) add(exe.parent_path().parent_path() / "models" / "demo");
#ifdef STRATA_SOURCE_DIR
  add(fs::path(STRATA_SOURCE_DIR) / "models" / "demo");
#endif
  return out;
}

const std::string& checked_model_dir(const std::string& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) fail("--model ", dir, ": does not exist (give a checkpoint directory: config.json + safetensors)");
  if (!fs::is_directory(st))
    fail("--model ", dir, ": must be a directory (config.json + safetensors + tokenizer.json), not a file; "
         "give the folder that holds it");
  return dir;
}

std::string model_dir_or_default(const Args& args) {
  if (args.has("model")) return checked_model_dir(args.str("model"));
  const std::vector<std::string> candidates = default_model_candidates();
  std::string looked;
  for (const std::string& dir : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(dir) / "config.json", ec)) return dir;
    looked += (looked.empty() ? "'" : ", '") + dir + "'";
  }
  fail("no --model DIR given, and the default model (the demo model, models/demo/ of the repository) is not there: "
       "looked in ", looked.empty() ? "no place (this binary cannot tell where it is)" : looked,
       ". Pass --model DIR, or get the demo model: a checkout that includes models/demo/, or build it as "
       "docs/demo_model.md describes.");
}

std::string default_served_model_name(const std::string& dir) {
  std::string name = fs::path(dir).lexically_normal().filename().string();
  if (name.empty() || name == ".") name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  return name;
}

}  // namespace strata::cli
