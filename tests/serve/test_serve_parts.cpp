// The HTTP-independent parts of `alk serve`: request parsing and its OpenAI errors, the chat
// template subset, the text stream (stop strings, UTF-8), metrics text and key checks.
#include <gtest/gtest.h>

#include "io/json.h"
#include "serve/chat_template.h"
#include "serve/metrics.h"
#include "serve/request.h"
#include "serve/server.h"
#include "serve/text_stream.h"

namespace alk::serve {
namespace {

CompletionRequest completions(const std::string& body) { return parse_completion_request(body, Endpoint::Completions); }
CompletionRequest chat(const std::string& body) { return parse_completion_request(body, Endpoint::ChatCompletions); }

// The ApiError a body raises (status and param), or status 0 when it parses.
std::pair<int, std::string> refusal(const std::string& body, Endpoint e = Endpoint::Completions) {
  try {
    parse_completion_request(body, e);
  } catch (const ApiError& err) {
    return {err.status, err.param};
  }
  return {0, ""};
}

TEST(ServeRequest, ReadsEveryFieldAndIgnoresUnknownOnes) {
  const CompletionRequest r = completions(
      R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,"n":1,"stop":["a","bc"],)"
      R"("seed":-3,"presence_penalty":0.5,"frequency_penalty":-1,"logprobs":0,"stream":true,)"
      R"("stream_options":{"include_usage":true},"user":"someone","suffix":null,"best_of":1})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.presence_penalty, 0.5);
  EXPECT_EQ(r.frequency_penalty, -1);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  // Token-id prompts, one-string arrays, chat messages with text parts.
  EXPECT_EQ(completions(R"({"prompt":[1,2,3]})").prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(completions(R"({"prompt":[[4,5]]})").prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(completions(R"({"prompt":["x"]})").prompt, "x");
  const CompletionRequest c = chat(
      R"({"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],)"
      R"("max_completion_tokens":3,"logprobs":true})");
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[1].role, "user");
  EXPECT_EQ(c.messages[1].content, "ab");
  EXPECT_EQ(c.max_tokens, 3);
  EXPECT_TRUE(c.logprobs);
}

TEST(ServeRequest, WrongTypesAndRangesAre400sNamingTheField) {
  using P = std::pair<int, std::string>;
  EXPECT_EQ(refusal(R"({"prompt":"x","max_tokens":-1})"), P(400, "max_tokens"));
  EXPECT_EQ(refusal(R"({"prompt":"x","max_tokens":0})"), P(400, "max_tokens"));
  EXPECT_EQ(refusal(R"({"prompt":"x","max_tokens":1e300})"), P(400, "max_tokens"));
  EXPECT_EQ(refusal(R"({"prompt":"x","max_tokens":99999999999999999999999})"), P(400, "max_tokens"));
  EXPECT_EQ(refusal(R"({"prompt":"x","max_tokens":2.5})"), P(400, "max_tokens"));
  EXPECT_EQ(refusal(R"({"prompt":"x","max_tokens":"5"})"), P(400, "max_tokens"));
  EXPECT_EQ(refusal(R"({"prompt":"x","temperature":2.5})"), P(400, "temperature"));
  EXPECT_EQ(refusal(R"({"prompt":"x","temperature":"hot"})"), P(400, "temperature"));
  EXPECT_EQ(refusal(R"({"prompt":"x","top_p":0})"), P(400, "top_p"));
  EXPECT_EQ(refusal(R"({"prompt":"x","n":2})"), P(400, "n"));
  EXPECT_EQ(refusal(R"({"prompt":"x","stop":["a","b","c","d","e"]})"), P(400, "stop"));
  EXPECT_EQ(refusal(R"({"prompt":"x","stop":[""]})"), P(400, "stop"));
  EXPECT_EQ(refusal(R"({"prompt":"x","stream":"yes"})"), P(400, "stream"));
  EXPECT_EQ(refusal(R"({"prompt":"x","stream_options":{"include_usage":true}})"), P(400, "stream_options"));
  EXPECT_EQ(refusal(R"({"prompt":[1,-2]})"), P(400, "prompt"));
  EXPECT_EQ(refusal(R"({"prompt":{}})"), P(400, "prompt"));
  EXPECT_EQ(refusal(R"({"max_tokens":3})"), P(400, "prompt"));
  EXPECT_EQ(refusal(R"({"prompt":"x","logprobs":6})"), P(400, "logprobs"));
  EXPECT_EQ(refusal(R"({"messages":[]})", Endpoint::ChatCompletions), P(400, "messages"));
  EXPECT_EQ(refusal(R"({"messages":[{"role":"wizard","content":"x"}]})", Endpoint::ChatCompletions), P(400, "messages"));
  EXPECT_EQ(refusal(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", Endpoint::ChatCompletions),
            P(400, "top_logprobs"));
  // Not JSON, not an object, bad UTF-8, too deep: 400s without a field.
  EXPECT_EQ(refusal("{\"prompt\": \"x\""), P(400, ""));
  EXPECT_EQ(refusal("[1]"), P(400, ""));
  EXPECT_EQ(refusal("{\"prompt\": \"\xff\xfe\"}"), P(400, ""));
  EXPECT_EQ(refusal(std::string(100, '[') + std::string(100, ']')), P(400, ""));
}

TEST(ServeRequest, ErrorJsonHasOpenAisShape) {
  const json::Value v = json::parse(error_json(invalid("max_tokens", "max_tokens must be >= 1")));
  const json::Value& e = v.at("error");
  EXPECT_EQ(e.at("message").as_string(), "max_tokens must be >= 1");
  EXPECT_EQ(e.at("type").as_string(), "invalid_request_error");
  EXPECT_EQ(e.at("param").as_string(), "max_tokens");
  EXPECT_TRUE(e.at("code").is_null());
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[3,4]})"), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(parse_tokenize_request(R"({"content":"ab"})"), "ab");
  EXPECT_THROW(parse_detokenize_request(R"({"tokens":"3"})"), ApiError);
}

std::string render(const std::string& source, const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) {
  return ChatTemplate(source).render(messages, add_generation_prompt, "<s>", "</s>");
}

TEST(ServeChatTemplate, RendersTheConstructsChatTemplatesUse) {
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello"}, {"user", "Bye"}};
  // ChatML (Qwen, many others).
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  EXPECT_EQ(render(chatml, {{"user", "Hi"}}), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A Llama-2-like template: system folded into the first user turn, loop.index0, raise_exception, trim.
  const std::string llama2 =
      "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
      "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}\n"
      "{% for message in loop_messages %}\n"
      "  {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('roles must alternate') }}{% endif %}\n"
      "  {% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
      "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}\n"
      "  {% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}"
      "{% elif message['role'] == 'assistant' %}{{ ' ' + content | trim + ' ' + eos_token }}{% endif %}\n"
      "{% endfor %}";
  EXPECT_EQ(render(llama2, msgs),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi [/INST] Hello </s><s>[INST] Bye [/INST]");
  try {
    render(llama2, {{"user", "a"}, {"user", "b"}});
    ADD_FAILURE() << "raise_exception did not raise";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("roles must alternate"), std::string::npos);
  }
  // loop.first/last, ~, filters, tests, namespace, whitespace control, elif, inline if.
  const std::string misc =
      "{%- set ns = namespace(n=0) -%}\n"
      "{%- for m in messages if m.role != 'system' -%}\n"
      "  {%- set ns.n = ns.n + 1 -%}\n"
      "  {{- '[' if loop.first else ',' }}{{ m.role | upper ~ ':' ~ m.content | length }}{{ ']' if loop.last }}\n"
      "{%- endfor -%}\n"
      " {{ ns.n }} {{ messages | length }} {{ 'x' is defined }} {{ undefined_name is defined }} {{ messages[0] | tojson }}"
      "{% if foo is not defined %} nofoo{% elif true %}never{% else %}never{% endif %}"
      "{# a comment #} {{ 'A b '.strip().lower() }} {{ '%d' | length }} {{ 7 // 2 }}{{ -7 % 3 }}";
  EXPECT_EQ(render(misc, msgs),
            "[USER:4,ASSISTANT:5,USER:3]3 4 True False {\"role\": \"system\", \"content\": \"Be brief.\"} nofoo a b 2 32");
  // trim_blocks and lstrip_blocks, as transformers renders: a block tag's line leaves no blank line.
  EXPECT_EQ(render("{% for m in messages %}\n    {% if true %}\n{{ m.role }}\n    {% endif %}\n{% endfor %}", {{"user", "x"}}),
            "user\n");
  EXPECT_EQ(render(plain_chat_template(), {{"user", "Hi"}}), "user: Hi\n\nassistant:");
}

TEST(ServeChatTemplate, WhatIsOutsideTheSubsetIsRefusedWhenCompiled) {
  EXPECT_THROW(ChatTemplate("{% macro f() %}{% endmacro %}"), ApiError);
  EXPECT_THROW(ChatTemplate("{% for x in y %}"), ApiError);
  EXPECT_THROW(ChatTemplate("{{ 'unterminated }}"), ApiError);
  EXPECT_THROW(ChatTemplate("{{ a $ b }}"), ApiError);
  EXPECT_THROW(render("{{ x | no_such_filter }}", {}), ApiError);
}

TEST(ServeTextStream, StopStringsCutTheTextAndPartialsAreHeldBack) {
  TextStream s({"END", "\n\n"});
  EXPECT_EQ(s.push("hello E"), "hello ");  // "E" may start END
  EXPECT_EQ(s.push("N"), "");
  EXPECT_EQ(s.push("x"), "ENx");  // it did not
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.push(" done\n"), " done");
  EXPECT_EQ(s.push("\nmore"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push("ignored"), "");
  EXPECT_EQ(s.finish(), "");
  // A character split over two tokens is sent whole; a lone bad byte becomes U+FFFD.
  TextStream u;
  EXPECT_EQ(u.push("caf\xC3"), "caf");
  EXPECT_EQ(u.push("\xA9!"), "\xC3\xA9!");
  EXPECT_EQ(u.push("\xE2\x82"), "");
  EXPECT_EQ(u.finish(), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(valid_utf8("a\xFF" "b\xED\xA0\x80"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(incomplete_utf8_tail("x\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("x\xF0\x9F\x98\x80"), 0u);
}

TEST(ServeMetrics, PrometheusTextHasCountersGaugesAndCumulativeBuckets) {
  Metrics m;
  m.requests_ok = 3;
  m.slots_busy = 2;
  m.time_to_first_token.observe(0.003);
  m.time_to_first_token.observe(0.3);
  m.time_to_first_token.observe(100);
  const std::string text = m.render();
  EXPECT_NE(text.find("alk_requests_total{outcome=\"ok\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE alk_slots_busy gauge\nalk_slots_busy 2\n"), std::string::npos);
  EXPECT_NE(text.find("alk_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("alk_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("alk_time_to_first_token_seconds_bucket{le=\"0.5\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("alk_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("alk_time_to_first_token_seconds_count 3\n"), std::string::npos);
}

TEST(ServeKeys, OnlyAnExactKeyMatches) {
  const std::vector<std::string> keys = {"sk-one", "sk-two-longer"};
  EXPECT_TRUE(key_matches("sk-one", keys));
  EXPECT_TRUE(key_matches("sk-two-longer", keys));
  EXPECT_FALSE(key_matches("sk-on", keys));
  EXPECT_FALSE(key_matches("sk-one ", keys));
  EXPECT_FALSE(key_matches("", keys));
  EXPECT_FALSE(key_matches(std::string("sk-one\0", 7), keys));
}

}  // namespace
}  // namespace alk::serve
