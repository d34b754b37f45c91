#pragma once
#include <string>
#include <vector>

namespace strata::cli {

// Each returns the process exit code; errors in the arguments or inputs throw strata::Error.
int model_command(const std::vector<std::string>& args);
int generate_command(const std::vector<std::string>& args);
int bench_command(const std::vector<std::string>& args);
int tokenize_command(const std::vector<std::string>& args);
int cache_command(const std::vector<std::string>& args);  // `strata cache stats|verify|gc`
int chat_template_command(const std::vector<std::string>& args);
int serve_command(const std::vector<std::string>& args);
int bench_serve_command(const std::vector<std::string>& args);  // `strata bench serve`
int route_command(const std::vector<std::string>& args);        // `strata route`

}  // namespace strata::cli
