// OpenAI request bodies: each field's type and range checked where it is read (request.h).
#include "serve/request.h"

#include <cmath>
#include <limits>

namespace alk::serve {

std::string error_json(const ApiError& e) {
  json::Object err;
  err.emplace_back("message", e.what());
  err.emplace_back("type", e.type);
  err.emplace_back("param", e.param.empty() ? json::Value() : json::Value(e.param));
  err.emplace_back("code", e.code.empty() ? json::Value() : json::Value(e.code));
  return json::dump(json::Object{{"error", std::move(err)}});
}

ApiError invalid(const std::string& param, const std::string& message) {
  return ApiError(400, "invalid_request_error", message, param);
}

json::Value parse_body(std::string_view body) {
  try {
    // Requests are flat: a shallow depth limit keeps a hostile body from recursing deep.
    return json::parse(body, 16);
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", std::string("the body is not valid JSON: ") + e.what());
  }
}

namespace {

const json::Object& as_object_body(const json::Value& v) {
  if (!v.is_object()) throw invalid("", "the body must be a JSON object");
  return v.as_object();
}

std::string kind_of(const json::Value& v) { return std::string(json::kind_name(v.kind())); }

double number_in(const json::Value& v, const char* name, double lo, double hi) {
  if (!v.is_number()) throw invalid(name, std::string(name) + " must be a number, got " + kind_of(v));
  const double d = v.as_double();
  if (!(d >= lo && d <= hi))
    throw invalid(name, std::string(name) + " must be in [" + json::dump(lo) + ", " + json::dump(hi) + "], got " +
                            json::dump(v));
  return d;
}

// An integer: 3 or 3.0 (JSON has one number type; some clients write 3.0), never 3.5.
int64_t integer_in(const json::Value& v, const char* name, int64_t lo, int64_t hi) {
  int64_t i = 0;
  if (v.is_int()) {
    i = v.as_int();
  } else if (v.kind() == json::Kind::Double && std::floor(v.as_double()) == v.as_double() &&
             std::fabs(v.as_double()) < 9.0e15) {
    i = static_cast<int64_t>(v.as_double());
  } else {
    throw invalid(name, std::string(name) + " must be an integer, got " +
                            (v.is_number() ? json::dump(v) : kind_of(v)));
  }
  if (i < lo || i > hi)
    throw invalid(name, std::string(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            "], got " + std::to_string(i));
  return i;
}

bool boolean(const json::Value& v, const char* name) {
  if (!v.is_bool()) throw invalid(name, std::string(name) + " must be a boolean, got " + kind_of(v));
  return v.as_bool();
}

const std::string& string_of(const json::Value& v, const char* name) {
  if (!v.is_string()) throw invalid(name, std::string(name) + " must be a string, got " + kind_of(v));
  return v.as_string();
}

std::vector<int32_t> token_ids(const json::Array& a, const char* name) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const json::Value& x : a)
    ids.push_back(static_cast<int32_t>(integer_in(x, name, 0, std::numeric_limits<int32_t>::max())));
  return ids;
}

// Chat content: a string, or the array form [{"type": "text", "text": ...}, ...] (joined).
std::string message_content(const json::Value& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.as_string();
  if (!v.is_array()) throw invalid("messages", "a message's content must be a string or an array of text parts");
  std::string text;
  for (const json::Value& part : v.as_array()) {
    if (!part.is_object()) throw invalid("messages", "a content part must be an object");
    const json::Value* type = part.find("type");
    if (!type || !type->is_string() || type->as_string() != "text")
      throw invalid("messages", "only content parts of type \"text\" are supported");
    const json::Value* t = part.find("text");
    if (!t || !t->is_string()) throw invalid("messages", "a text part needs a string \"text\"");
    text += t->as_string();
  }
  return text;
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body, Endpoint endpoint, const RequestLimits& limits) {
  const json::Value root = parse_body(body);
  const json::Object& o = as_object_body(root);
  CompletionRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::ChatCompletions;
  bool have_input = false;
  for (const auto& [key, v] : o) {
    if (key == "model") {
      r.model = string_of(v, "model");
    } else if (key == "prompt" && !chat) {
      have_input = true;
      if (v.is_string()) {
        r.prompt = v.as_string();
      } else if (v.is_array()) {
        const json::Array& a = v.as_array();
        if (a.empty()) throw invalid("prompt", "prompt must not be empty");
        if (a[0].is_string()) {
          if (a.size() != 1) throw invalid("prompt", "one prompt per request (a batch of prompts is not supported)");
          r.prompt = a[0].as_string();
        } else if (a[0].is_array()) {
          if (a.size() != 1) throw invalid("prompt", "one prompt per request (a batch of prompts is not supported)");
          r.prompt_ids = token_ids(a[0].as_array(), "prompt");
        } else {
          r.prompt_ids = token_ids(a, "prompt");
        }
      } else {
        throw invalid("prompt", "prompt must be a string, an array of token ids or an array of one string, got " +
                                    kind_of(v));
      }
    } else if (key == "messages" && chat) {
      have_input = true;
      if (!v.is_array()) throw invalid("messages", "messages must be an array, got " + kind_of(v));
      const json::Array& a = v.as_array();
      if (a.empty()) throw invalid("messages", "messages must not be empty");
      if (static_cast<int64_t>(a.size()) > limits.max_messages)
        throw invalid("messages", "at most " + std::to_string(limits.max_messages) + " messages");
      for (const json::Value& m : a) {
        if (!m.is_object()) throw invalid("messages", "each message must be an object");
        const json::Value* role = m.find("role");
        if (!role || !role->is_string()) throw invalid("messages", "each message needs a string \"role\"");
        const std::string& rs = role->as_string();
        if (rs != "system" && rs != "user" && rs != "assistant" && rs != "developer" && rs != "tool")
          throw invalid("messages", "unknown role \"" + rs + "\"");
        const json::Value* content = m.find("content");
        r.messages.push_back({rs, content ? message_content(*content) : std::string()});
      }
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      if (!v.is_null()) r.max_tokens = integer_in(v, key == "max_tokens" ? "max_tokens" : "max_completion_tokens", 1,
                                                  std::numeric_limits<int32_t>::max());
    } else if (key == "temperature") {
      if (!v.is_null()) r.temperature = number_in(v, "temperature", 0, 2);
    } else if (key == "top_p") {
      if (!v.is_null()) r.top_p = number_in(v, "top_p", 0, 1);
      if (r.top_p == 0) throw invalid("top_p", "top_p must be in (0, 1], got 0");
    } else if (key == "top_k") {
      if (!v.is_null()) r.top_k = integer_in(v, "top_k", -1, std::numeric_limits<int32_t>::max());
      if (r.top_k < 0) r.top_k = 0;  // llama.cpp's and vLLM's "-1: all"
    } else if (key == "n") {
      if (!v.is_null() && integer_in(v, "n", 1, 128) != 1) throw invalid("n", "only n=1 is supported");
    } else if (key == "seed") {
      if (!v.is_null())
        r.seed = static_cast<uint64_t>(integer_in(v, "seed", std::numeric_limits<int64_t>::min(),
                                                  std::numeric_limits<int64_t>::max()));
    } else if (key == "presence_penalty") {
      if (!v.is_null()) r.presence_penalty = number_in(v, "presence_penalty", -2, 2);
    } else if (key == "frequency_penalty") {
      if (!v.is_null()) r.frequency_penalty = number_in(v, "frequency_penalty", -2, 2);
    } else if (key == "stop") {
      if (v.is_null()) continue;
      if (v.is_string()) {
        r.stop.push_back(v.as_string());
      } else if (v.is_array()) {
        for (const json::Value& s : v.as_array()) r.stop.push_back(string_of(s, "stop"));
      } else {
        throw invalid("stop", "stop must be a string or an array of strings, got " + kind_of(v));
      }
      if (static_cast<int64_t>(r.stop.size()) > limits.max_stop_sequences)
        throw invalid("stop", "at most " + std::to_string(limits.max_stop_sequences) + " stop sequences");
      for (const std::string& s : r.stop) {
        if (s.empty()) throw invalid("stop", "a stop sequence must not be empty");
        if (static_cast<int64_t>(s.size()) > limits.max_stop_bytes)
          throw invalid("stop", "a stop sequence may have at most " + std::to_string(limits.max_stop_bytes) + " bytes");
      }
    } else if (key == "logprobs") {
      if (v.is_null()) continue;
      if (chat) {
        r.logprobs = boolean(v, "logprobs");
      } else {
        // Completions: the number of alternatives per position (0 = the chosen token's only).
        r.logprobs = true;
        r.top_logprobs = integer_in(v, "logprobs", 0, std::min<int64_t>(5, limits.max_top_logprobs));
      }
    } else if (key == "top_logprobs" && chat) {
      if (!v.is_null()) r.top_logprobs = integer_in(v, "top_logprobs", 0, limits.max_top_logprobs);
    } else if (key == "stream") {
      if (!v.is_null()) r.stream = boolean(v, "stream");
    } else if (key == "stream_options") {
      if (v.is_null()) continue;
      if (!v.is_object()) throw invalid("stream_options", "stream_options must be an object, got " + kind_of(v));
      if (const json::Value* u = v.find("include_usage"); u && !u->is_null())
        r.include_usage = boolean(*u, "stream_options.include_usage");
    } else if (key == "echo" && !chat) {
      if (!v.is_null()) r.echo = boolean(v, "echo");
    }
  }
  if (!have_input) throw invalid(chat ? "messages" : "prompt", std::string(chat ? "messages" : "prompt") + " is required");
  if (chat && r.top_logprobs > 0 && !r.logprobs)
    throw invalid("top_logprobs", "top_logprobs needs logprobs: true");
  if (r.include_usage && !r.stream)
    throw invalid("stream_options", "stream_options is only allowed with stream: true");
  if (!chat && r.prompt_ids && r.prompt_ids->empty()) throw invalid("prompt", "prompt must not be empty");
  return r;
}

std::string parse_tokenize_request(std::string_view body) {
  const json::Value root = parse_body(body);
  const json::Object& o = as_object_body(root);
  for (const auto& [key, v] : o)
    if (key == "content" || key == "prompt") return string_of(v, key == "content" ? "content" : "prompt");
  throw invalid("content", "content is required");
}

std::vector<int32_t> parse_detokenize_request(std::string_view body) {
  const json::Value root = parse_body(body);
  const json::Object& o = as_object_body(root);
  for (const auto& [key, v] : o) {
    if (key != "tokens") continue;
    if (!v.is_array()) throw invalid("tokens", "tokens must be an array of token ids, got " + kind_of(v));
    return token_ids(v.as_array(), "tokens");
  }
  throw invalid("tokens", "tokens is required");
}

}  // namespace alk::serve
