// `alk serve`: the OpenAI-compatible HTTP server (src/serve/server.h) over a model.
#include <cstdlib>
#include <iostream>

#include "serve/server.h"
#include "tools/alk/commands.h"

namespace alk::cli {

namespace {

struct ServeArgs {
  std::string from, model, device, host = "127.0.0.1", api_key_file, dtype = "auto", name;
  int port = 8080;
  int64_t slots = 4, ctx = 0, prefill_chunk = 512, top_logprobs = 5, max_queue = 64, max_body = 1 << 20, max_prompt = 0;
  double timeout = 600, drain = 30;
};

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
  cmd->add_option("--port", a.port, "port (0: any free one; the URL printed says which)")->capture_default_str();
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
  cmd->callback([] { run_serve(a); });
}

}  // namespace alk::cli
