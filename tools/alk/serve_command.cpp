// `alk serve`: the OpenAI-compatible HTTP server (src/serve/server.h) over a model, or with
// --ops the operations registry and this machine's devices over gRPC (src/remote/server.h).
#include <cstdlib>
#include <iostream>

#ifdef ALK_HAVE_REMOTE
#include "remote/server.h"
#endif
#include "serve/server.h"
#include "tools/alk/commands.h"

namespace alk::cli {

namespace {

struct ServeArgs {
  std::string from, model, device, host = "127.0.0.1", api_key_file, dtype = "auto", name;
  int port = 8080;
  int64_t slots = 4, ctx = 0, prefill_chunk = 512, top_logprobs = 5, max_queue = 64, max_body = 1 << 20, max_prompt = 0;
  double timeout = 600, drain = 30;
  // --ops: the remote server's options.
  bool ops = false;
  std::string token_file, port_file, tls_cert, tls_key;
  uint64_t max_bytes = 1ull << 32, max_message = 64ull << 20;
  double lease = 30;
};

void run_ops_server(const ServeArgs& a, bool port_given) {
#ifdef ALK_HAVE_REMOTE
  check(a.from.empty() && a.model.empty(), "serve", Loc::current(), "--ops serves devices, not a model: drop --from/--model");
  check(!a.token_file.empty(), "serve", Loc::current(), "--ops needs --token-file (one token a line): it never serves without one");
  remote::ServerOptions o;
  o.host = a.host;
  o.port = port_given ? a.port : 50051;
  o.tokens = remote::read_token_file(a.token_file);
  o.max_bytes = a.max_bytes;
  o.max_message_bytes = a.max_message;
  o.lease_seconds = a.lease;
  o.tls_cert_file = a.tls_cert;
  o.tls_key_file = a.tls_key;
  const int status = remote::run_server(o, a.port_file, std::cerr);
  if (status != 0) std::exit(status);
#else
  (void)a, (void)port_given;
  fail("serve", Loc::current(), "--ops: this alk was built without gRPC (apt-get install libgrpc++-dev protobuf-compiler-grpc, then rebuild)");
#endif
}

void run_serve(const ServeArgs& a) {
  check(!a.from.empty() || !a.model.empty(), "serve", Loc::current(), "give --from RUN_DIR or --model HF_DIR");
  check(a.slots >= 1, "serve", Loc::current(), "--slots must be >= 1, got ", a.slots);
  check(a.prefill_chunk >= 0, "serve", Loc::current(), "--prefill-chunk must be >= 0, got ", a.prefill_chunk);
  check(a.max_queue >= 0, "serve", Loc::current(), "--max-queue must be >= 0, got ", a.max_queue);
  check(a.port >= 0 && a.port <= 65535, "serve", Loc::current(), "--port must be in [0, 65535], got ", a.port);
  serve::ModelSource source{a.from, a.model, a.device, a.name};
  serve::EngineOptions engine;
  engine.slots = a.slots;
  engine.max_context = a.ctx;
  engine.max_queue = a.max_queue;
  engine.dtype = a.dtype;
  engine.top_logprobs = a.top_logprobs;
  engine.prefill_chunk = a.prefill_chunk;
  if (const char* delay = std::getenv("ALK_SERVE_STEP_DELAY_MS")) engine.step_delay_ms = std::atoll(delay);
  serve::ServerOptions server;
  server.host = a.host;
  server.port = a.port;
  if (!a.api_key_file.empty()) server.api_keys = serve::read_api_keys(a.api_key_file);
  server.max_body_bytes = a.max_body;
  server.max_prompt_tokens = a.max_prompt;
  server.timeout_seconds = a.timeout;
  server.drain_seconds = a.drain;
  const int status = serve::run_server(source, engine, server, std::cerr);
  if (status != 0) std::exit(status);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "serve a model over the OpenAI HTTP API (completions, chat, streaming)");
  static ServeArgs a;
  auto* from = cmd->add_option("--from", a.from, "run directory written by alk train");
  auto* model = cmd->add_option("--model", a.model, "Hugging Face model directory (config.json, safetensors, tokenizer)");
  from->excludes(model);
  cmd->add_option("--device", a.device, "cpu, cuda:N, vulkan:N or auto (default: ALK_DEVICE, else the CPU)");
  cmd->add_option("--dtype", a.dtype, "auto (f32 on the CPU, bf16 on GPUs), f32, bf16, f16")->capture_default_str();
  cmd->add_option("--host", a.host, "address to listen on (loopback by default)")->capture_default_str();
  cmd->add_option("--port", a.port, "port (0: any free one; the URL printed says which; --ops: default 50051)")->capture_default_str();
  cmd->add_option("--slots", a.slots, "requests decoded at once (continuous batching)")->capture_default_str();
  cmd->add_option("--ctx", a.ctx, "positions per slot (0: the model's context)")->capture_default_str();
  cmd->add_option("--prefill-chunk", a.prefill_chunk,
                  "prompt tokens prefilled per step beside the running requests (0: whole prompts)")
      ->capture_default_str();
  cmd->add_option("--api-key-file", a.api_key_file, "file of accepted API keys, one a line (Authorization: Bearer KEY)");
  cmd->add_option("--max-queue", a.max_queue, "requests waiting for a slot before 429")->capture_default_str();
  cmd->add_option("--timeout", a.timeout, "seconds a request may run (0: no limit)")->capture_default_str();
  cmd->add_option("--drain", a.drain, "on SIGTERM, seconds running requests may finish before they are cancelled")
      ->capture_default_str();
  cmd->add_option("--max-body", a.max_body, "largest request body in bytes (413 above)")->capture_default_str();
  cmd->add_option("--max-prompt", a.max_prompt, "most prompt tokens (0: the context less one)")->capture_default_str();
  cmd->add_option("--top-logprobs", a.top_logprobs, "alternatives computed per token (the most logprobs/top_logprobs may ask)")
      ->capture_default_str();
  cmd->add_option("--name", a.name, "the model's name in the API (default: the directory's name)");
  cmd->add_flag("--ops", a.ops, "serve the operations registry and this machine's devices over gRPC instead (docs/remote.md)");
  cmd->add_option("--token-file", a.token_file, "--ops: accepted tokens, one a line: TOKEN [devices=cpu,cuda:0] [max_bytes=N]");
  cmd->add_option("--port-file", a.port_file, "--ops: write the port listened on to this file (with --port 0)");
  cmd->add_option("--max-bytes", a.max_bytes, "--ops: device memory one token may hold")->capture_default_str();
  cmd->add_option("--max-message", a.max_message, "--ops: largest request or reply in bytes")->capture_default_str();
  cmd->add_option("--lease", a.lease, "--ops: seconds a silent client's session lives")->capture_default_str();
  cmd->add_option("--tls-cert", a.tls_cert, "--ops: PEM certificate chain (TLS; with --tls-key)");
  cmd->add_option("--tls-key", a.tls_key, "--ops: PEM private key");
  cmd->callback([cmd] {
    if (a.ops) return run_ops_server(a, cmd->count("--port") > 0);
    run_serve(a);
  });
}

}  // namespace alk::cli
