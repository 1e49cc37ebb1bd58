// The one thread that owns the model and its alk::Generator (which is single-threaded), and
// the Jobs through which HTTP handler threads talk to it. A handler submits a Job (refused
// when the slots and the queue are full, or while draining), then reads its events; the
// engine admits waiting Jobs into free slots, steps the Generator (every running request
// advances by one token per step: continuous batching) and hands each token to its Job.
// A Job cancelled by its handler (the client went away) or past its deadline is cancelled in
// the Generator at the next step, which frees its slot.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "alk/generate.h"
#include "alk/tokenizer.h"
#include "serve/metrics.h"

namespace alk::nn {
class GPT;
}

namespace alk::serve {

// What the server serves: the model and what the API needs besides (from a run directory,
// later also a Hugging Face directory).
struct ServedModel {
  std::string name;  // the `model` clients name (GET /v1/models)
  std::shared_ptr<nn::GPT> model;
  Tokenizer tokenizer;
  std::string chat_template;  // tokenizer_config.json's; "" when there is none
  std::string bos_token, eos_token;
  std::vector<int32_t> eos_ids;  // generation ends after any of these (their text is not sent)
  bool add_special_tokens = false;  // completions' prompts get the tokenizer's BOS (Hugging Face models)
};

using Clock = std::chrono::steady_clock;

class Job {
 public:
  struct Event {
    int32_t token = -1;
    double logprob = 0;
    std::vector<std::pair<int32_t, double>> top;  // the most likely tokens here (EngineOptions::top_logprobs)
  };
  GenerateRequest request;
  Clock::time_point arrived = Clock::now();
  std::optional<Clock::time_point> deadline;

  // Handler side: waits up to `wait` for events; returns them (empty on a timeout).
  std::vector<Event> next(std::chrono::milliseconds wait);
  bool done() const;
  FinishReason finish_reason() const;
  bool timed_out() const;
  std::string error() const;  // the engine refused it (e.g. the Generator's checks)
  void cancel() { cancel_requested_ = true; }  // the client went away
  // The text hit a stop string: nothing more is wanted (not counted as a cancellation).
  void end_early() {
    ended_early_ = true;
    cancel_requested_ = true;
  }
  bool ended_early() const { return ended_early_; }

  // Engine side.
  void push(Event e);
  void finish(FinishReason r, bool timed_out = false, std::string error = "");
  bool cancel_requested() const { return cancel_requested_; }
  int64_t generator_id = -1;
  std::optional<Clock::time_point> last_token;

 private:
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool done_ = false, timed_out_ = false;
  FinishReason reason_ = FinishReason::None;
  std::string error_;
  std::atomic<bool> cancel_requested_{false}, ended_early_{false};
};

struct EngineOptions {
  int64_t slots = 4;
  int64_t max_context = 0;  // 0: the model's
  int64_t max_queue = 64;
  std::string dtype = "auto";  // auto: f32 on CPUs, bf16 on GPUs
  int64_t top_logprobs = 5;    // alternatives computed per token (the most a request may ask for)
  int64_t prefill_chunk = 512; // prompt tokens prefilled per step (GeneratorOptions::prefill_chunk)
  int64_t step_delay_ms = 0;   // ALK_SERVE_STEP_DELAY_MS: a pause after each step, so tests can act mid-generation
};

class Engine {
 public:
  // load runs on the engine thread (GET /health answers 503 until it returns).
  Engine(std::function<ServedModel()> load, EngineOptions options, Metrics& metrics);
  ~Engine();
  void start();

  bool ready() const { return ready_; }
  std::string load_error() const;
  const ServedModel& model() const { return model_; }  // once ready()
  int64_t max_context() const { return max_context_; }
  int64_t top_logprobs() const { return opt_.top_logprobs; }

  enum class Admit : uint8_t { Ok, QueueFull, Draining, NotReady };
  Admit submit(const std::shared_ptr<Job>& job);
  void wake();  // a Job was cancelled: the engine looks at once

  // SIGTERM: refuse new Jobs, let the running and queued ones finish for up to grace, then
  // cancel what is left; returns once nothing runs.
  void drain(std::chrono::milliseconds grace);

 private:
  void run();
  void loop(Generator& gen);

  std::function<ServedModel()> load_;
  EngineOptions opt_;
  Metrics& metrics_;
  ServedModel model_;
  int64_t max_context_ = 0;
  std::atomic<bool> ready_{false};
  std::string load_error_;

  mutable std::mutex m_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Job>> waiting_;
  int64_t running_count_ = 0;
  bool draining_ = false, stop_ = false, force_cancel_ = false, loaded_ = false;
  std::thread thread_;
};

}  // namespace alk::serve
