#include "serve/engine.h"

#include <map>

#include "alk/nn.h"

namespace alk::serve {

std::vector<Job::Event> Job::next(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait_for(lock, wait, [&] { return !events_.empty() || done_; });
  std::vector<Event> out(events_.begin(), events_.end());
  events_.clear();
  return out;
}

bool Job::done() const {
  std::lock_guard<std::mutex> lock(m_);
  return done_ && events_.empty();
}
FinishReason Job::finish_reason() const {
  std::lock_guard<std::mutex> lock(m_);
  return reason_;
}
bool Job::timed_out() const {
  std::lock_guard<std::mutex> lock(m_);
  return timed_out_;
}
std::string Job::error() const {
  std::lock_guard<std::mutex> lock(m_);
  return error_;
}

void Job::push(Event e) {
  {
    std::lock_guard<std::mutex> lock(m_);
    events_.push_back(e);
  }
  cv_.notify_all();
}

void Job::finish(FinishReason r, bool timed_out, std::string error) {
  {
    std::lock_guard<std::mutex> lock(m_);
    done_ = true;
    reason_ = r;
    timed_out_ = timed_out;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

Engine::Engine(std::function<ServedModel()> load, EngineOptions options, Metrics& metrics)
    : load_(std::move(load)), opt_(std::move(options)), metrics_(metrics) {
  metrics_.slots_total = opt_.slots;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = force_cancel_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::start() { thread_ = std::thread([this] { run(); }); }

std::string Engine::load_error() const {
  std::lock_guard<std::mutex> lock(m_);
  return load_error_;
}

Engine::Admit Engine::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (!ready_) return Admit::NotReady;
    if (draining_) return Admit::Draining;
    if (static_cast<int64_t>(waiting_.size()) + running_count_ >= opt_.slots + opt_.max_queue) return Admit::QueueFull;
    waiting_.push_back(job);
    metrics_.queue_depth = static_cast<int64_t>(waiting_.size());
  }
  cv_.notify_all();
  return Admit::Ok;
}

void Engine::wake() {
  { std::lock_guard<std::mutex> lock(m_); }
  cv_.notify_all();
}

void Engine::drain(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(m_);
  draining_ = true;
  cv_.notify_all();
  auto idle = [&] { return (waiting_.empty() && running_count_ == 0) || !loaded_; };
  if (!idle_cv_.wait_for(lock, grace, idle)) {
    force_cancel_ = true;
    cv_.notify_all();
    idle_cv_.wait(lock, idle);
  }
}

void Engine::run() {
  try {
    model_ = load_();
    GeneratorOptions g;
    g.slots = opt_.slots;
    g.max_context = opt_.max_context;
    g.logprobs = true;
    g.top_logprobs = opt_.top_logprobs;
    g.prefill_chunk = opt_.prefill_chunk;
    g.truncate_at_context = true;
    Device& dev = model_.model->wte->weight.device();
    std::string dtype = opt_.dtype;
    const std::string& type = dev.info().type;
    if (dtype == "auto") dtype = type == "discrete" || type == "integrated" ? "bf16" : "f32";
    check(dtype == "f32" || dtype == "bf16" || dtype == "f16", "serve", Loc::current(),
          "--dtype must be auto, f32, bf16 or f16, got ", dtype);
    if (dtype != "f32") g.autocast = dtype == "bf16" ? DType::BF16 : DType::F16;
    Generator gen(model_.model, g);
    max_context_ = gen.max_context();
    {
      std::lock_guard<std::mutex> lock(m_);
      loaded_ = true;
    }
    ready_ = true;
    loop(gen);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(m_);
    load_error_ = e.what();
    for (auto& job : waiting_) job->finish(FinishReason::Cancelled, false, e.what());
    waiting_.clear();
    loaded_ = false;
    idle_cv_.notify_all();
  }
}

void Engine::loop(Generator& gen) {
  std::map<int64_t, std::shared_ptr<Job>> running;  // by the Generator's request id
  for (;;) {
    std::vector<std::shared_ptr<Job>> admitted;
    bool cancel_all = false;
    {
      std::unique_lock<std::mutex> lock(m_);
      // Waits bounded: deadlines and cancellations are looked at least every 50 ms.
      cv_.wait_for(lock, std::chrono::milliseconds(50),
                   [&] { return stop_ || !waiting_.empty() || !running.empty() || force_cancel_; });
      if (stop_ && waiting_.empty() && running.empty()) break;
      cancel_all = force_cancel_;
      const Clock::time_point now = Clock::now();
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        Job& j = **it;
        const bool late = j.deadline && now > *j.deadline;
        if (cancel_all || j.cancel_requested() || late) {
          if (late) ++metrics_.requests_timed_out;
          else ++metrics_.requests_cancelled;
          j.finish(FinishReason::Cancelled, late);
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      while (static_cast<int64_t>(running.size() + admitted.size()) < opt_.slots && !waiting_.empty()) {
        admitted.push_back(waiting_.front());
        waiting_.pop_front();
      }
      running_count_ = static_cast<int64_t>(running.size() + admitted.size());
      metrics_.queue_depth = static_cast<int64_t>(waiting_.size());
    }
    for (const std::shared_ptr<Job>& job : admitted) {
      try {
        job->generator_id = gen.submit(job->request);
        running[job->generator_id] = job;
        metrics_.prompt_tokens += static_cast<int64_t>(job->request.prompt.size());
      } catch (const std::exception& e) {
        job->finish(FinishReason::Cancelled, false, e.what());
      }
    }
    const Clock::time_point now = Clock::now();
    for (auto& [id, job] : running) {
      const bool late = job->deadline && now > *job->deadline;
      if (cancel_all || job->cancel_requested() || late) gen.cancel(id);
    }
    metrics_.slots_busy = static_cast<int64_t>(running.size());
    if (!running.empty() || !gen.idle()) {
      for (const TokenEvent& e : gen.step()) {
        auto it = running.find(e.request);
        if (it == running.end()) continue;
        Job& job = *it->second;
        const Clock::time_point t = Clock::now();
        if (e.token >= 0) {
          if (!job.last_token) metrics_.time_to_first_token.observe(std::chrono::duration<double>(t - job.arrived).count());
          else metrics_.inter_token.observe(std::chrono::duration<double>(t - *job.last_token).count());
          job.last_token = t;
          ++metrics_.generation_tokens;
          job.push({e.token, e.logprob, e.top});
        }
        if (e.finished != FinishReason::None) {
          bool late = false;
          if (e.finished == FinishReason::Cancelled) {
            late = job.deadline && t > *job.deadline && !job.cancel_requested();
            if (late) ++metrics_.requests_timed_out;
            else if (!job.ended_early()) ++metrics_.requests_cancelled;
          }
          job.finish(e.finished, late);
          running.erase(it);
        }
      }
      if (opt_.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt_.step_delay_ms));
    }
    metrics_.slots_busy = static_cast<int64_t>(running.size());
    {
      std::lock_guard<std::mutex> lock(m_);
      running_count_ = static_cast<int64_t>(running.size());
      if (waiting_.empty() && running.empty()) idle_cv_.notify_all();
    }
  }
}

}  // namespace alk::serve
