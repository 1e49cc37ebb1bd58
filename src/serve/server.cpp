// The HTTP side of `alk serve` (server.h): routes, authentication, limits, and the responses
// and server-sent events of the OpenAI API built from a Job's tokens.
#include "serve/server.h"

#include <httplib.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <ctime>
#include <fstream>
#include <ostream>

#include "alk/nn.h"
#include "serve/chat_template.h"
#include "serve/text_stream.h"

namespace alk::serve {

std::vector<std::string> read_api_keys(const std::string& file, Loc loc) {
  std::ifstream in(file);
  check(in.good(), "serve", loc, "cannot read the API key file ", file);
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    keys.push_back(line.substr(start));
  }
  check(!keys.empty(), "serve", loc, "the API key file ", file, " holds no key");
  return keys;
}

bool key_matches(const std::string& given, const std::vector<std::string>& keys) {
  // Every key is compared over the longer of the two lengths, byte by byte, without an early
  // exit: the time depends on the lengths, never on where the first difference is.
  unsigned any = 0;
  for (const std::string& key : keys) {
    const size_t n = std::max(given.size(), key.size());
    unsigned diff = given.size() == key.size() ? 0u : 1u;
    for (size_t i = 0; i < n; ++i) {
      const unsigned char a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
      const unsigned char b = i < key.size() ? static_cast<unsigned char>(key[i]) : 0;
      diff |= static_cast<unsigned>(a ^ b);
    }
    any |= diff == 0 ? 1u : 0u;
  }
  return any != 0;
}

namespace {

int64_t unix_time() { return static_cast<int64_t>(std::time(nullptr)); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e), "application/json");
}

// What is made of one request's tokens, for either a whole response or a stream of chunks.
struct Completion {
  const ServedModel* model = nullptr;
  CompletionRequest request;
  std::shared_ptr<Job> job;
  Engine* engine = nullptr;
  std::string id;
  int64_t created = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  TextStream text;
  std::string all_text;
  // Logprobs of the tokens since they were last taken (chunks) or of all (a whole response).
  std::vector<std::pair<std::string, double>> logprobs;
  std::vector<std::vector<std::pair<std::string, double>>> tops;  // each token's alternatives (as text)
  size_t text_offset = 0;
  std::vector<int64_t> offsets;

  bool chat() const { return request.endpoint == Endpoint::ChatCompletions; }

  // One event's text (what may be sent now).
  std::string take(const Job::Event& e) {
    ++completion_tokens;
    if (text.stopped()) return "";
    for (int32_t eos : model->eos_ids)
      if (e.token == eos) return "";
    const std::string& bytes = model->tokenizer.token_bytes(e.token);
    std::string out = text.push(bytes);
    if (request.logprobs) {
      logprobs.emplace_back(valid_utf8(bytes), e.logprob);
      std::vector<std::pair<std::string, double>> alternatives;
      for (size_t j = 0; j < e.top.size() && static_cast<int64_t>(j) < request.top_logprobs; ++j)
        alternatives.emplace_back(valid_utf8(model->tokenizer.token_bytes(e.top[j].first)), e.top[j].second);
      tops.push_back(std::move(alternatives));
      offsets.push_back(static_cast<int64_t>(text_offset));
      text_offset += bytes.size();
    }
    if (text.stopped()) {
      job->end_early();
      engine->wake();
    }
    all_text += out;
    return out;
  }
  std::string finish_text() {
    std::string out = text.finish();
    all_text += out;
    return out;
  }
  const char* finish_reason() const {
    if (text.stopped()) return "stop";
    return job->finish_reason() == FinishReason::Stop ? "stop" : "length";
  }

  json::Value logprobs_json() {
    if (!request.logprobs) return nullptr;
    json::Value out;
    if (chat()) {
      auto bytes_of = [](const std::string& tok) {
        json::Array bytes;
        for (unsigned char c : tok) bytes.emplace_back(static_cast<int64_t>(c));
        return bytes;
      };
      json::Array content;
      for (size_t i = 0; i < logprobs.size(); ++i) {
        json::Array top;
        for (const auto& [alt, alp] : tops[i])
          top.push_back(json::Object{{"token", alt}, {"logprob", alp}, {"bytes", bytes_of(alt)}});
        content.push_back(json::Object{{"token", logprobs[i].first}, {"logprob", logprobs[i].second},
                                       {"bytes", bytes_of(logprobs[i].first)}, {"top_logprobs", top}});
      }
      out = json::Object{{"content", content}};
    } else {
      json::Array tokens, lps, top_maps, offs;
      for (size_t i = 0; i < logprobs.size(); ++i) {
        tokens.emplace_back(logprobs[i].first);
        lps.emplace_back(logprobs[i].second);
        if (request.top_logprobs > 0) {
          // A map from text to log-probability; two ids of one text keep the likelier.
          json::Object alternatives;
          for (const std::pair<std::string, double>& alt : tops[i])
            if (std::none_of(alternatives.begin(), alternatives.end(), [&](const auto& kv) { return kv.first == alt.first; }))
              alternatives.emplace_back(alt.first, alt.second);
          top_maps.push_back(std::move(alternatives));
        } else {
          top_maps.push_back(nullptr);
        }
        offs.emplace_back(offsets[i]);
      }
      out = json::Object{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", top_maps}, {"text_offset", offs}};
    }
    logprobs.clear();
    offsets.clear();
    tops.clear();
    return out;
  }
  json::Value usage() const {
    return json::Object{{"prompt_tokens", prompt_tokens},
                        {"completion_tokens", completion_tokens},
                        {"total_tokens", prompt_tokens + completion_tokens}};
  }

  std::string whole_response() {
    json::Object choice;
    choice.emplace_back("index", 0);
    const std::string body = (request.echo ? request.prompt : std::string()) + all_text;
    if (chat()) choice.emplace_back("message", json::Object{{"role", "assistant"}, {"content", body}});
    else choice.emplace_back("text", body);
    choice.emplace_back("logprobs", logprobs_json());
    choice.emplace_back("finish_reason", finish_reason());
    return json::dump(json::Object{{"id", id},
                                   {"object", chat() ? "chat.completion" : "text_completion"},
                                   {"created", created},
                                   {"model", model->name},
                                   {"choices", json::Array{json::Value(std::move(choice))}},
                                   {"usage", usage()}});
  }

  // A chunk with some text (or the role, or the finish reason), in the endpoint's form.
  std::string chunk(const std::string& piece, const char* finish, bool role = false) {
    json::Object choice;
    choice.emplace_back("index", 0);
    if (chat()) {
      json::Object delta;
      if (role) delta.emplace_back("role", "assistant");
      if (role || !piece.empty() || !finish) delta.emplace_back("content", piece);
      choice.emplace_back("delta", std::move(delta));
    } else {
      choice.emplace_back("text", piece);
    }
    choice.emplace_back("logprobs", logprobs_json());
    choice.emplace_back("finish_reason", finish ? json::Value(finish) : json::Value());
    json::Object o{{"id", id},
                   {"object", chat() ? "chat.completion.chunk" : "text_completion"},
                   {"created", created},
                   {"model", model->name},
                   {"choices", json::Array{json::Value(std::move(choice))}}};
    if (request.include_usage) o.emplace_back("usage", nullptr);
    return "data: " + json::dump(o) + "\n\n";
  }
  std::string usage_chunk() {
    json::Object o{{"id", id},
                   {"object", chat() ? "chat.completion.chunk" : "text_completion"},
                   {"created", created},
                   {"model", model->name},
                   {"choices", json::Array{}},
                   {"usage", usage()}};
    return "data: " + json::dump(o) + "\n\n";
  }
};

struct Context {
  Context(Engine& e, Metrics& m, const ServerOptions& o) : engine(e), metrics(m), options(o) {}
  Engine& engine;
  Metrics& metrics;
  const ServerOptions& options;
  std::atomic<int64_t> next_id{1};
  std::optional<ChatTemplate> chat_template;  // compiled once the model is loaded
  std::mutex template_mutex;

  const ChatTemplate& chat_template_of(const ServedModel& m) {
    std::lock_guard<std::mutex> lock(template_mutex);
    if (!chat_template) chat_template.emplace(m.chat_template.empty() ? plain_chat_template() : m.chat_template);
    return *chat_template;
  }
};

const ServedModel& ready_model(Context& ctx) {
  if (!ctx.engine.ready()) throw ApiError(503, "unavailable_error", "the model is still loading");
  return ctx.engine.model();
}

void check_token_ids(const std::vector<int32_t>& ids, const ServedModel& m, const char* param) {
  for (int32_t id : ids)
    if (id >= m.tokenizer.vocab_size() || id >= m.model->cfg.vocab)
      throw invalid(param, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                               std::to_string(std::min<int64_t>(m.tokenizer.vocab_size(), m.model->cfg.vocab)) + ")");
}

void handle_generation(Context& ctx, const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  auto c = std::make_shared<Completion>();
  c->request = parse_completion_request(req.body, endpoint);
  const ServedModel& m = ready_model(ctx);
  const CompletionRequest& r = c->request;
  if (!r.model.empty() && r.model != m.name)
    throw ApiError(404, "invalid_request_error", "The model `" + r.model + "` does not exist (this server has `" + m.name + "`)",
                   "model", "model_not_found");
  if (r.top_logprobs > ctx.engine.top_logprobs())
    throw invalid(endpoint == Endpoint::Completions ? "logprobs" : "top_logprobs",
                  "this server computes at most " + std::to_string(ctx.engine.top_logprobs()) +
                      " alternatives per token (alk serve --top-logprobs), asked for " + std::to_string(r.top_logprobs));
  std::vector<int32_t> prompt;
  if (endpoint == Endpoint::ChatCompletions) {
    prompt = m.tokenizer.encode(ctx.chat_template_of(m).render(r.messages, true, m.bos_token, m.eos_token));
  } else if (r.prompt_ids) {
    check_token_ids(*r.prompt_ids, m, "prompt");
    prompt = *r.prompt_ids;
    c->request.prompt = m.tokenizer.decode(prompt);
  } else {
    prompt = m.tokenizer.encode(r.prompt, m.add_special_tokens);
  }
  // An empty prompt starts from the end-of-text token, as GPT-2 does.
  if (prompt.empty()) prompt.push_back(m.eos_ids.empty() ? m.tokenizer.byte_id('\n') : m.eos_ids[0]);
  const int64_t context = ctx.engine.max_context();
  const int64_t max_prompt = ctx.options.max_prompt_tokens > 0 ? std::min(ctx.options.max_prompt_tokens, context - 1) : context - 1;
  if (static_cast<int64_t>(prompt.size()) > max_prompt)
    throw ApiError(400, "invalid_request_error",
                   "the prompt has " + std::to_string(prompt.size()) + " tokens; this server takes at most " +
                       std::to_string(max_prompt) + " (the context is " + std::to_string(context) + ")",
                   endpoint == Endpoint::ChatCompletions ? "messages" : "prompt", "context_length_exceeded");
  auto job = std::make_shared<Job>();
  GenerateRequest& g = job->request;
  g.prompt = prompt;
  g.sampling.temperature = r.temperature;
  g.sampling.top_k = r.top_k;
  g.sampling.top_p = r.top_p;
  g.sampling.seed = r.seed;
  g.sampling.presence_penalty = r.presence_penalty;
  g.sampling.frequency_penalty = r.frequency_penalty;
  const int64_t room = context - static_cast<int64_t>(prompt.size());
  g.sampling.max_tokens = std::min(r.max_tokens.value_or(endpoint == Endpoint::ChatCompletions ? room : 16), room);
  for (int32_t eos : m.eos_ids) g.sampling.stop.push_back({eos});
  if (ctx.options.timeout_seconds > 0)
    job->deadline = job->arrived + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(ctx.options.timeout_seconds));
  c->model = &m;
  c->job = job;
  c->engine = &ctx.engine;
  c->text = TextStream(r.stop);
  c->prompt_tokens = static_cast<int64_t>(prompt.size());
  if (r.echo) c->text_offset = c->request.prompt.size();  // offsets count from the echoed prompt's start
  c->created = unix_time();
  c->id = std::string(endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-") + std::to_string(ctx.next_id++);
  switch (ctx.engine.submit(job)) {
    case Engine::Admit::Ok: break;
    case Engine::Admit::QueueFull:
      ++ctx.metrics.requests_rejected_queue_full;
      res.set_header("Retry-After", "1");
      throw ApiError(429, "rate_limit_error", "every slot is busy and the queue is full; retry later", "",
                     "rate_limit_exceeded");
    case Engine::Admit::Draining: throw ApiError(503, "unavailable_error", "the server is shutting down");
    case Engine::Admit::NotReady: throw ApiError(503, "unavailable_error", "the model is still loading");
  }
  if (!r.stream) {
    while (!job->done())
      for (const Job::Event& e : job->next(std::chrono::milliseconds(100))) c->take(e);
    if (!job->error().empty()) throw invalid("", job->error());
    if (job->timed_out())
      throw ApiError(504, "timeout_error", "the request ran longer than the server's --timeout");
    c->finish_text();
    res.set_content(c->whole_response(), "application/json");
    return;
  }
  auto role_sent = std::make_shared<bool>(false);
  Engine* engine = &ctx.engine;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [c, job, role_sent, engine](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) {
          if (sink.write(s.data(), s.size())) return true;
          job->cancel();  // the client is gone: free its slot now
          engine->wake();
          return false;
        };
        if (c->chat() && !*role_sent) {
          *role_sent = true;
          if (!send(c->chunk("", nullptr, true))) return false;
        }
        const std::vector<Job::Event> events = job->next(std::chrono::milliseconds(100));
        for (const Job::Event& e : events) {
          const std::string piece = c->take(e);
          if ((!piece.empty() || (c->request.logprobs && !c->logprobs.empty())) && !send(c->chunk(piece, nullptr)))
            return false;
        }
        if (!job->done()) {
          if (events.empty() && !sink.is_writable()) {
            job->cancel();
            engine->wake();
            return false;
          }
          return true;
        }
        if (!job->error().empty() || job->timed_out()) {
          const ApiError e = job->timed_out() ? ApiError(504, "timeout_error", "the request ran longer than the server's --timeout")
                                              : invalid("", job->error());
          if (!send("data: " + error_json(e) + "\n\n")) return false;
        } else {
          const std::string tail = c->finish_text();
          if (!tail.empty() && !send(c->chunk(tail, nullptr))) return false;
          if (!send(c->chunk("", c->finish_reason()))) return false;
          if (c->request.include_usage && !send(c->usage_chunk())) return false;
        }
        if (!send("data: [DONE]\n\n")) return false;
        sink.done();
        return true;
      },
      [job, engine](bool success) {
        if (!success) {
          job->cancel();
          engine->wake();
        }
      });
}

// Wraps a handler: ApiErrors become their JSON, anything else a 500.
template <typename F>
httplib::Server::Handler api(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, "server_error", e.what()));
    }
  };
}

bool needs_key(const std::string& path) { return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize"; }

}  // namespace

int run_server(const ModelSource& source, const EngineOptions& engine_options, const ServerOptions& options,
               std::ostream& log) {
  // SIGTERM and SIGINT are taken by sigwait below: blocked here, before any thread starts, so
  // every thread inherits the mask. A client that goes away must not kill the server (SIGPIPE).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  Metrics metrics;
  Engine engine([source] { return load_served_model(source); }, engine_options, metrics);
  Context ctx(engine, metrics, options);
  httplib::Server svr;
  const int threads = options.threads > 0 ? options.threads
                                          : static_cast<int>(std::min<int64_t>(
                                                512, engine_options.slots + engine_options.max_queue + 8));
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  svr.set_keep_alive_timeout(5);
  svr.set_read_timeout(30);
  svr.set_write_timeout(30);
  const std::vector<std::string> keys = options.api_keys;
  svr.set_pre_routing_handler([keys](const httplib::Request& req, httplib::Response& res) {
    if (keys.empty() || !needs_key(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) == 0 && key_matches(auth.substr(prefix.size()), keys))
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, ApiError(401, "authentication_error",
                             auth.empty() ? "an API key is required (Authorization: Bearer KEY)" : "the API key is not valid",
                             "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own refusals (no route, a body over the limit, a bad request line) get OpenAI's shape too.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(res, ApiError(404, "invalid_request_error", "no route for " + req.method + " " + req.path));
    else if (res.status == 413) send_error(res, ApiError(413, "invalid_request_error", "the body is over the server's limit"));
    else send_error(res, ApiError(res.status, "invalid_request_error", "bad request (HTTP " + std::to_string(res.status) + ")"));
  });
  svr.set_logger([&metrics](const httplib::Request&, const httplib::Response& res) {
    if (res.status < 400) ++metrics.requests_ok;
    else if (res.status == 429) return;  // counted where it is refused
    else if (res.status < 500) ++metrics.requests_client_error;
    else ++metrics.requests_server_error;
  });

  svr.Get("/health", [&engine](const httplib::Request&, httplib::Response& res) {
    if (engine.ready()) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    } else {
      const std::string err = engine.load_error();
      send_error(res, err.empty() ? ApiError(503, "unavailable_error", "the model is still loading")
                                  : ApiError(500, "server_error", "the model failed to load: " + err));
    }
  });
  svr.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
  svr.Get("/v1/models", api([&ctx](const httplib::Request&, httplib::Response& res) {
            const ServedModel& m = ready_model(ctx);
            json::Object model{{"id", m.name}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "alk"},
                               {"max_model_len", ctx.engine.max_context()}};
            res.set_content(json::dump(json::Object{{"object", "list"}, {"data", json::Array{json::Value(model)}}}),
                            "application/json");
          }));
  svr.Post("/v1/completions", api([&ctx](const httplib::Request& req, httplib::Response& res) {
             handle_generation(ctx, req, res, Endpoint::Completions);
           }));
  svr.Post("/v1/chat/completions", api([&ctx](const httplib::Request& req, httplib::Response& res) {
             handle_generation(ctx, req, res, Endpoint::ChatCompletions);
           }));
  svr.Post("/tokenize", api([&ctx](const httplib::Request& req, httplib::Response& res) {
             const std::string text = parse_tokenize_request(req.body);
             const ServedModel& m = ready_model(ctx);
             json::Array ids;
             for (int32_t id : m.tokenizer.encode(text)) ids.emplace_back(static_cast<int64_t>(id));
             res.set_content(json::dump(json::Object{{"tokens", ids}}), "application/json");
           }));
  svr.Post("/detokenize", api([&ctx](const httplib::Request& req, httplib::Response& res) {
             const std::vector<int32_t> ids = parse_detokenize_request(req.body);
             const ServedModel& m = ready_model(ctx);
             check_token_ids(ids, m, "tokens");
             res.set_content(json::dump(json::Object{{"content", valid_utf8(m.tokenizer.decode(ids))}}),
                             "application/json");
           }));

  const int port = options.port == 0 ? svr.bind_to_any_port(options.host)
                                     : (svr.bind_to_port(options.host, options.port) ? options.port : -1);
  check(port > 0, "serve", Loc::current(), "cannot listen on ", options.host, ":", options.port);
  engine.start();
  std::thread listener([&svr] { svr.listen_after_bind(); });
  const bool ipv6 = options.host.find(':') != std::string::npos;
  log << "alk serve: listening on http://" << (ipv6 ? "[" : "") << options.host << (ipv6 ? "]" : "") << ":" << port
      << std::endl;
  int status = 0;
  bool announced = false;
  for (;;) {
    timespec wait{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGTERM || sig == SIGINT) {
      log << "alk serve: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ": draining" << std::endl;
      engine.drain(std::chrono::milliseconds(static_cast<int64_t>(options.drain_seconds * 1000)));
      break;
    }
    if (!announced && engine.ready()) {
      announced = true;
      log << "alk serve: model " << engine.model().name << " ready (" << engine_options.slots << " slots x "
          << engine.max_context() << " positions)" << std::endl;
    }
    if (const std::string err = engine.load_error(); !err.empty()) {
      log << "alk serve: the model failed to load: " << err << std::endl;
      status = 1;
      break;
    }
  }
  svr.stop();
  listener.join();
  log << "alk serve: stopped" << std::endl;
  return status;
}

}  // namespace alk::serve
