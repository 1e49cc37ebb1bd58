// `alk serve`: the OpenAI HTTP API over the engine (engine.h), on cpp-httplib (Debian's
// libcpp-httplib-dev, the library llama.cpp's llama-server is built on): a thread pool of
// blocking handlers, chunked responses for server-sent events, and a content provider whose
// failed write tells us the client left. Endpoints, limits and behaviour: README.md ("alk serve").
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "serve/request.h"

namespace alk::serve {

struct ModelSource {
  std::string run_dir;  // --from
  std::string hf_dir;   // --model (a Hugging Face directory: config.json, safetensors, tokenizer.json)
  std::string device;   // "" = the default device
  std::string name;     // the model's name in the API; "" = the directory's name
};
// The model, its tokenizer and chat template: what every source must give.
ServedModel load_served_model(const ModelSource& source, Loc loc = Loc::current());

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (the URL printed says which)
  std::vector<std::string> api_keys;  // empty: no authentication
  int64_t max_body_bytes = 1 << 20;
  int64_t max_prompt_tokens = 0;  // 0: the context less one
  double timeout_seconds = 600;   // a request running longer is ended
  double drain_seconds = 30;      // SIGTERM: how long running requests may finish before they are cancelled
  int threads = 0;                // HTTP handler threads; 0: slots + max_queue + 8
};

// The keys in a file: one per line, blank lines and lines starting with # skipped.
std::vector<std::string> read_api_keys(const std::string& file, Loc loc = Loc::current());
// Whether `given` equals one of `keys`, in time that depends on the lengths only.
bool key_matches(const std::string& given, const std::vector<std::string>& keys);

// Serves until SIGTERM or SIGINT, then drains and returns 0. `log` gets the URL line
// ("alk serve: listening on http://HOST:PORT") and one line per event worth a line.
int run_server(const ModelSource& source, const EngineOptions& engine, const ServerOptions& options, std::ostream& log);

}  // namespace alk::serve
