// `alk serve`'s request parsing (src/serve/request.h) and chat-template rendering: any body
// either parses into a request whose fields are in range, or raises ApiError with a 4xx
// status and an error JSON that parses back; the parsed messages render through the plain
// template without another exception.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "io/json.h"
#include "serve/chat_template.h"
#include "serve/request.h"

namespace {

void check_error(const alk::serve::ApiError& e) {
  if (e.status < 400 || e.status > 499) std::abort();
  const alk::json::Value v = alk::json::parse(alk::serve::error_json(e));  // throws (a finding) if not JSON
  if (!v.at("error").at("message").is_string()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  static const alk::serve::ChatTemplate plain(alk::serve::plain_chat_template());
  for (auto endpoint : {alk::serve::Endpoint::Completions, alk::serve::Endpoint::ChatCompletions}) {
    try {
      const alk::serve::CompletionRequest r = alk::serve::parse_completion_request(body, endpoint);
      if (r.max_tokens && *r.max_tokens < 1) std::abort();
      if (!(r.temperature >= 0 && r.temperature <= 2) || !(r.top_p > 0 && r.top_p <= 1) || r.top_k < 0) std::abort();
      if (r.stop.size() > 4) std::abort();
      if (endpoint == alk::serve::Endpoint::ChatCompletions) {
        if (r.messages.empty()) std::abort();
        (void)plain.render(r.messages, true, "<s>", "</s>");
      }
    } catch (const alk::serve::ApiError& e) {
      check_error(e);
    }
  }
  try {
    (void)alk::serve::parse_detokenize_request(body);
  } catch (const alk::serve::ApiError& e) {
    check_error(e);
  }
  return 0;
}
