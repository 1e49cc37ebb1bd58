// The OpenAI HTTP API's request bodies as alk reads them (POST /v1/completions and
// /v1/chat/completions), checked field by field before anything reaches the engine, and the
// error object every refusal is answered with. Nothing here knows HTTP or the model: the
// parser takes the body's bytes and the server's limits, and returns a plain struct or throws
// ApiError (status, OpenAI error type, message, the offending field).
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "io/json.h"

namespace alk::serve {

// An answer other than 200: the HTTP status and OpenAI's error JSON,
//   {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;   // invalid_request_error, authentication_error, ...
  std::string param;  // the field at fault, "" for none
  std::string code;   // model_not_found, context_length_exceeded, ... or ""
};
std::string error_json(const ApiError& e);
// A 400 invalid_request_error naming param.
ApiError invalid(const std::string& param, const std::string& message);

enum class Endpoint : uint8_t { Completions, ChatCompletions };

struct ChatMessage {
  std::string role, content;
};

// What the server's limits allow a request (the model's context decides max_tokens's default).
struct RequestLimits {
  int64_t max_stop_sequences = 4;
  int64_t max_stop_bytes = 256;  // each stop string
  int64_t max_messages = 1024;
  int64_t max_top_logprobs = 20;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;  // "" when the client named none
  // Completions: the prompt as text, or as token ids (an array of integers).
  std::string prompt;
  std::optional<std::vector<int32_t>> prompt_ids;
  std::vector<ChatMessage> messages;  // chat
  std::optional<int64_t> max_tokens;  // none: until the context ends (chat) or 16 (completions)
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  std::optional<uint64_t> seed;
  double presence_penalty = 0, frequency_penalty = 0;
  std::vector<std::string> stop;
  bool logprobs = false;     // chosen tokens' log-probabilities
  int64_t top_logprobs = 0;  // and the most likely alternatives at each position
  bool stream = false, include_usage = false;
  bool echo = false;  // completions: the prompt's text before the completion
};

// Parses and checks a request body. Unknown fields are ignored (clients send more than alk
// uses); a known field of the wrong type or outside its range is a 400 naming it.
CompletionRequest parse_completion_request(std::string_view body, Endpoint endpoint, const RequestLimits& limits = {});

// The body of POST /tokenize ({"content": text} or {"prompt": text}) and /detokenize ({"tokens": [ids]}).
std::string parse_tokenize_request(std::string_view body);
std::vector<int32_t> parse_detokenize_request(std::string_view body);

// The body as JSON: a 400 with the parser's message when it is not (bad UTF-8 included).
json::Value parse_body(std::string_view body);

}  // namespace alk::serve
