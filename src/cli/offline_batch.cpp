#include "cli/offline_batch.h"

#include <chrono>
#include <ctime>
#include <memory>
#include <optional>
#include <ostream>
#include <unordered_map>

#include "cli/offline_progress.h"
#include "model/model.h"
#include "server/request_cache.h"
#include "server/request_constraint.h"
#include "server/completion_stream.h"
#include "text/tokenizer.h"

namespace strata::cli {

namespace {

using Clock = std::chrono::steady_clock;

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r\n") == std::string::npos; }

// A request in the engine, until every one of its sequences has finished.
struct ActiveRequest {
  size_t slot = 0;  // its place in the output order
  OfflineRequest prepared;
  std::unique_ptr<server::CompletionStream> stream;
  std::vector<std::string> sequence_ids;  // per choice
  size_t unfinished = 0;                  // sequences without their finished event yet
  bool answered = false;                  // the record is written (or admission failed and an error was written)
};

class OfflineRun {
 public:
  OfflineRun(const model::Model& model, const text::Tokenizer& tokenizer, OfflineSettings settings,
             const std::vector<std::string>& lines, std::ostream& out, OfflineProgress* progress)
      : tokenizer_(tokenizer),
        settings_(std::move(settings)),
        engine_(model, settings_.engine),
        lines_(lines),
        out_(out),
        progress_(progress) {
    settings_.limits.protocol.vocab_size = model.config().vocab_size;
    settings_.limits.grammars = [this]() -> text::grammar::GrammarCache& {
      if (!grammars_) grammars_ = server::make_grammar_cache(tokenizer_, settings_.limits.grammar_limits);
      return *grammars_;
    };
    for (const std::string& l : lines_) summary_.requests += !blank(l);
    records_.resize(static_cast<size_t>(summary_.requests));
    window_ = std::max<int64_t>(2 * settings_.engine.scheduler.max_num_seqs, 1);
  }

  OfflineSummary run() {
    const Clock::time_point start = Clock::now();
    if (progress_) progress_->start();
    for (;;) {
      admit();
      write_ready();
      if (progress_) progress_->update(summary_.succeeded + summary_.failed, summary_.generated_tokens);
      if (in_engine_ == 0 && next_line_ >= lines_.size()) break;
      const std::vector<engine::TokenEvent> events = engine_.step();
      if (events.empty() && !engine_.has_unfinished())
        fail("internal error: the engine stopped with ", in_engine_, " sequences unfinished");
      for (const engine::TokenEvent& ev : events) on_event(ev);
    }
    out_.flush();
    summary_.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    summary_.engine = engine_.stats();
    return summary_;
  }

 private:
  // Reads lines and submits their sequences until the window is full.
  void admit() {
    while (in_engine_ < window_ && next_line_ < lines_.size()) {
      const std::string& text = lines_[next_line_];
      const auto line_number = static_cast<int64_t>(++next_line_);
      if (blank(text)) continue;
      const size_t slot = next_slot_++;
      OfflineRequest prepared = prepare_offline_request(line_number, text, tokenizer_, settings_.limits);
      if (prepared.error) {
        fail_request(slot, prepared, *prepared.error);
        continue;
      }
      submit(slot, std::move(prepared));
    }
  }

  void submit(size_t slot, OfflineRequest prepared) {
    const server::CompletionRequest& r = prepared.request;
    auto request = std::make_shared<ActiveRequest>();
    request->slot = slot;
    std::vector<int64_t> prompt_tokens;
    for (const auto& p : prepared.prompts) prompt_tokens.push_back(static_cast<int64_t>(p.size()));
    request->stream = std::make_unique<server::CompletionStream>(
        r, tokenizer_, server::new_response_id(r.endpoint), static_cast<int64_t>(std::time(nullptr)),
        settings_.limits.served_model_name, prompt_tokens, prepared.echo);
    const size_t choices = request->stream->num_choices();
    const auto n = static_cast<size_t>(r.sampling.n);
    const engine::CacheOptions cache = server::request_cache_options(r, settings_.engine.cache.get(), "");
    for (size_t c = 0; c < choices; ++c) {
      const size_t p = c / n, i = c % n;
      engine::SamplingParams params = r.sampling;
      params.n = 1;
      params.max_tokens = prepared.max_tokens[p];
      params.constraint = prepared.constraint;
      if (r.sampling.seed) params.seed = *r.sampling.seed + i;
      std::string id = cat(slot, "-", c);
      try {
        engine_.add_request(id, prepared.prompts[p], params, cache);
      } catch (const Error& e) {
        // As the server: the choices already submitted are aborted, the request answers with the engine's error.
        for (const std::string& done : request->sequence_ids) engine_.abort(done);
        const bool chat = r.endpoint == server::Endpoint::kChatCompletions;
        fail_request(slot, prepared,
                     server::as_request_error(e, chat ? "messages" : (prepared.prompts.size() > 1 ? cat("prompt[", p, "]") : "prompt")));
        request->answered = true;
        break;
      }
      sequences_.emplace(id, std::make_pair(request, c));
      request->sequence_ids.push_back(std::move(id));
      ++request->unfinished;
      ++in_engine_;
    }
    request->prepared = std::move(prepared);
  }

  void fail_request(size_t slot, const OfflineRequest& prepared, const server::RequestError& error) {
    records_[slot] = error_record(prepared.line, prepared.custom_id, error);
    ++summary_.failed;
  }

  void on_event(const engine::TokenEvent& ev) {
    const auto it = sequences_.find(ev.request_id);
    if (it == sequences_.end()) return;
    const std::shared_ptr<ActiveRequest> request = it->second.first;
    const size_t choice = it->second.second;
    if (ev.token) ++summary_.generated_tokens;
    if (ev.finished) {
      sequences_.erase(it);
      --request->unfinished;
      --in_engine_;
    }
    if (request->answered) return;  // a failed admission: only its aborted sequences are left
    const server::StreamUpdate update = request->stream->on_event(choice, ev);
    if (update.abort_sequence) engine_.abort(request->sequence_ids[choice]);
    if (request->stream->done()) {
      request->answered = true;
      records_[request->slot] =
          success_record(request->prepared.line, request->prepared.custom_id, request->stream->response_body());
      const server::Usage usage = request->stream->usage();
      summary_.prompt_tokens += usage.prompt_tokens;
      ++summary_.succeeded;
    }
  }

  // Writes the records that are next in input order.
  void write_ready() {
    bool wrote = false;
    while (written_ < static_cast<int64_t>(records_.size()) && records_[static_cast<size_t>(written_)]) {
      std::optional<std::string>& record = records_[static_cast<size_t>(written_)];
      out_ << *record << '\n';
      record.reset();
      ++written_;
      wrote = true;
    }
    if (wrote) out_.flush();
  }

  const text::Tokenizer& tokenizer_;
  OfflineSettings settings_;
  engine::Engine engine_;
  const std::vector<std::string>& lines_;
  std::ostream& out_;
  OfflineProgress* progress_;
  std::unique_ptr<text::grammar::GrammarCache> grammars_;  // built when a line first needs it

  OfflineSummary summary_;
  std::vector<std::optional<std::string>> records_;  // by slot, until written
  std::unordered_map<std::string, std::pair<std::shared_ptr<ActiveRequest>, size_t>> sequences_;  // engine id → choice
  size_t next_line_ = 0, next_slot_ = 0;
  int64_t in_engine_ = 0, window_ = 1, written_ = 0;
};

}  // namespace

OfflineSummary run_offline_batch(const model::Model& model, const text::Tokenizer& tokenizer,
                                 OfflineSettings settings, const std::vector<std::string>& lines, std::ostream& out,
                                 OfflineProgress* progress) {
  OfflineRun run(model, tokenizer, std::move(settings), lines, out, progress);
  return run.run();
}

}  // namespace strata::cli
