// Crash safety of `alk train`, run as a user runs it (the CLI binary in a child process):
// SIGKILL at random moments and in the middle of checkpoint writes, many times, then
// --resume to the end must give bit-identical weights and losses to an uninterrupted run;
// SIGTERM saves and exits cleanly; a save that runs out of space (a file size limit) is an
// error that leaves the previous checkpoint complete. Also: CLI errors carry no internal
// source paths (unless ALK_DEBUG=errors).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "alk/io.h"
#include "io/json.h"
#include "io/temp_dir.h"
#include "testing.h"
#include "train/job.h"

#ifdef ALK_CLI_PATH

namespace alk {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

std::string corpus_text() {
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "old", "tree", "by", "river"};
  std::string s;
  uint64_t x = 99;
  while (s.size() < 12000) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s += words[(x >> 33) % 14];
    s += (x >> 20) % 9 == 0 ? ".\n" : " ";
  }
  return s;
}

struct Spawned {
  pid_t pid = -1;
};

// fork + exec of the CLI; stdout and stderr go to `log`. fsize_limit > 0 sets RLIMIT_FSIZE
// (with SIGXFSZ ignored, so an oversized write fails with EFBIG as on a full disk).
Spawned spawn(const std::vector<std::string>& args, const std::string& log, rlim_t fsize_limit = 0) {
  std::vector<std::string> argv_s{ALK_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  Spawned s;
  s.pid = ::fork();
  // A failed fork must never reach kill(): kill(-1, sig) signals every process we may signal.
  if (s.pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (s.pid == 0) {  // only async-signal-safe calls until exec
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (fsize_limit > 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit rl = {fsize_limit, fsize_limit};
      ::setrlimit(RLIMIT_FSIZE, &rl);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return s;
}

void signal_child(const Spawned& s, int sig) {
  if (s.pid > 0) ::kill(s.pid, sig);  // never 0 or -1 (the process group, every process)
}

int wait_status(const Spawned& s) {
  int status = 0;
  while (::waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

int run_to_end(const std::vector<std::string>& args, const std::string& log, rlim_t fsize_limit = 0) {
  int st = wait_status(spawn(args, log, fsize_limit));
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

class CrashSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = dir_ / "corpus.txt";
    testing::write_file(corpus_, corpus_text());
    // Kernels the CPU's compiled tier builds go to this test's own cache.
    ::setenv("ALK_CACHE_DIR", (dir_ / "cache").c_str(), 1);
  }
  void TearDown() override { ::unsetenv("ALK_CACHE_DIR"); }

  // A tiny GPT; checkpoints every step, so a good share of the run is spent saving.
  std::vector<std::string> fresh(const std::string& out, int steps = 24, int ckpt_every = 1) const {
    return {"train",     "--corpus", corpus_, "--out", out,  "--vocab-size", "300", "--ctx", "16", "--dim", "32",
            "--heads",   "2",        "--layers", "1",  "--batch", "2", "--steps", std::to_string(steps),
            "--eval-every", "8", "--ckpt-every", std::to_string(ckpt_every), "--log-every", "1",
            "--sample-tokens", "0", "--seed", "5"};
  }
  static std::vector<std::string> resume(const std::string& out) { return {"train", "--resume", out}; }

  TempDir dir_;
  std::string corpus_;
};

// The committed checkpoint of `dir` must be complete: both files load, and agree on the step.
// Returns its step (0 when there is none yet).
int64_t check_checkpoint(const std::string& dir) {
  std::optional<train::CheckpointFiles> f = train::find_checkpoint(dir);
  if (!f) return 0;
  SafetensorsFile m = load_safetensors(f->model), o = load_safetensors(f->optimizer);
  EXPECT_EQ(m.metadata.at("step"), o.metadata.at("step"));
  EXPECT_EQ(m.metadata.at("step"), std::to_string(f->step));
  EXPECT_FALSE(m.tensors.empty());
  return f->step;
}

std::map<int64_t, double> losses(const std::string& dir) {
  std::map<int64_t, double> out;
  std::ifstream f(dir + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) {
      json::Value v = json::parse(line);
      out[v.at("step").as_int()] = v.at("loss").as_double();
    }
  return out;
}

void expect_same_weights(const std::string& a, const std::string& b) {
  SafetensorsFile x = load_safetensors(a + "/model.safetensors"), y = load_safetensors(b + "/model.safetensors");
  ASSERT_EQ(x.tensors.size(), y.tensors.size());
  for (size_t i = 0; i < x.tensors.size(); ++i) {
    EXPECT_EQ(x.tensors[i].first, y.tensors[i].first);
    EXPECT_EQ(x.tensors[i].second.to_vector<float>(), y.tensors[i].second.to_vector<float>()) << x.tensors[i].first;
  }
}

// A save in progress: a checkpoint directory that checkpoint.json does not name yet.
bool save_in_progress(const std::string& dir) {
  std::error_code ec;
  std::optional<train::CheckpointFiles> f;
  try {
    f = train::find_checkpoint(dir);
  } catch (const Error&) {
    return false;
  }
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints", ec))
    if (!f || f->model.find(e.path().filename().string() + "/") == std::string::npos) return true;
  return false;
}

TEST_F(CrashSafety, SigkillAtRandomMomentsThenResumeIsBitIdentical) {
  const std::string ref = dir_ / "ref", run = dir_ / "killed";
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(run_to_end(fresh(ref), dir_ / "ref.log"), 0) << testing::read_file(dir_ / "ref.log");
  const double full_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  std::mt19937 rng(20261201);
  // Fewer under the sanitizers, where every run is several times slower.
  const int kills = kSanitized ? 6 : 24;
  int mid_save = 0, with_checkpoint = 0, finished = 0;
  for (int i = 0; i < kills; ++i) {
    const bool started = train::find_checkpoint(run).has_value();
    Spawned child = spawn(started ? resume(run) : fresh(run), dir_ / "kill.log");
    if (i % 2 == 0) {
      // A random moment of the run, start-up included.
      std::uniform_real_distribution<double> at(0.0, full_ms);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(at(rng)));
    } else {
      // The moment a save is seen in progress (or give up after the run's length).
      auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(full_ms);
      while (std::chrono::steady_clock::now() < until && !save_in_progress(run)) {
        if (::waitpid(child.pid, nullptr, WNOHANG) != 0) break;
      }
    }
    signal_child(child, SIGKILL);
    const int st = wait_status(child);
    if (WIFEXITED(st)) ++finished;
    // A save directory that the manifest does not name survived the kill: it hit a save.
    if (save_in_progress(run)) ++mid_save;
    // Whatever the moment, the run directory holds a complete checkpoint (or none yet).
    if (check_checkpoint(run) > 0) ++with_checkpoint;
    if (check_checkpoint(run) == 24) {  // it finished: go again from scratch
      fs::remove_all(run);
    }
  }
  std::cout << "[ crash    ] " << kills << " SIGKILLs (" << mid_save << " inside a checkpoint write, " << finished
            << " too late), full run " << static_cast<int>(full_ms) << " ms, " << with_checkpoint
            << " left a checkpoint\n";
  // Whether a random kill lands inside a write depends on this machine's timing: the
  // deterministic test above covers each point of the write; these are extra coverage.
  const bool started = train::find_checkpoint(run).has_value();
  ASSERT_EQ(run_to_end(started ? resume(run) : fresh(run), dir_ / "last.log"), 0)
      << testing::read_file(dir_ / "last.log");
  EXPECT_EQ(check_checkpoint(run), 24);
  expect_same_weights(ref, run);
  std::map<int64_t, double> a = losses(ref), b = losses(run);
  EXPECT_EQ(a.size(), 24u);
  EXPECT_EQ(a, b) << "the losses after kills and resumes differ from the uninterrupted run's";
  // Nothing left over: one checkpoint directory, no temporary files.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) entries += e.is_directory();
  EXPECT_EQ(entries, 1);
  for (const auto& e : fs::directory_iterator(run))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// The same without chance: the save's test hook (ALK_TEST_PAUSE_IN_SAVE, src/train/
// checkpoint.cpp) stops the CLI at each point inside a checkpoint write in turn, where the
// SIGKILL lands; after each kill the committed checkpoint is complete and the one before the
// interrupted save (or the save itself, once committed); resuming to the end is bit-identical.
TEST_F(CrashSafety, SigkillAtEachPointOfACheckpointWriteThenResumeIsBitIdentical) {
  const std::string ref = dir_ / "ref", run = dir_ / "paused", marker = dir_ / "paused.marker";
  ASSERT_EQ(run_to_end(fresh(ref), dir_ / "ref.log"), 0) << testing::read_file(dir_ / "ref.log");
  struct Point {
    const char* name;
    int step;
    bool committed;  // the interrupted save is the committed checkpoint
  };
  for (const Point& p : {Point{"optimizer", 5, false}, Point{"model", 9, false}, Point{"commit", 14, true}}) {
    SCOPED_TRACE(p.name);
    fs::remove(marker);
    ::setenv("ALK_TEST_PAUSE_IN_SAVE", (std::string(p.name) + "," + std::to_string(p.step) + "," + marker).c_str(), 1);
    const bool started = train::find_checkpoint(run).has_value();
    Spawned child = spawn(started ? resume(run) : fresh(run), dir_ / "paused.log");
    ::unsetenv("ALK_TEST_PAUSE_IN_SAVE");
    // The child stops itself at the point; this loop ends when it has (or when it exited,
    // which the test reports as a failure below). No time limit: ctest's timeout is the net.
    while (!fs::exists(marker) && ::waitpid(child.pid, nullptr, WNOHANG | WUNTRACED) == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(fs::exists(marker)) << "the run never reached the pause point:\n" << testing::read_file(dir_ / "paused.log");
    signal_child(child, SIGKILL);
    const int st = wait_status(child);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    EXPECT_EQ(check_checkpoint(run), p.committed ? p.step : p.step - 1);
    if (!p.committed) {
      EXPECT_TRUE(save_in_progress(run)) << "the interrupted save's directory is not left behind";
    }
  }
  ASSERT_EQ(run_to_end(resume(run), dir_ / "last.log"), 0) << testing::read_file(dir_ / "last.log");
  EXPECT_EQ(check_checkpoint(run), 24);
  expect_same_weights(ref, run);
  EXPECT_EQ(losses(ref), losses(run));
}

TEST_F(CrashSafety, SigtermSavesAndExitsCleanly) {
  const std::string ref = dir_ / "ref", run = dir_ / "term";
  ASSERT_EQ(run_to_end(fresh(ref, 24, 100), dir_ / "ref.log"), 0) << testing::read_file(dir_ / "ref.log");
  // The run stops itself inside its first checkpoint save (step 3; the save's test hook,
  // ALK_TEST_PAUSE_IN_SAVE), so SIGTERM reaches a run that has not finished, whatever this
  // machine's speed; it is delivered when the run continues.
  const std::string marker = dir_ / "term.marker";
  ::setenv("ALK_TEST_PAUSE_IN_SAVE", ("commit,3," + marker).c_str(), 1);
  Spawned child = spawn(fresh(run, 24, 3), dir_ / "term.log");
  ::unsetenv("ALK_TEST_PAUSE_IN_SAVE");
  while (!fs::exists(marker) && ::waitpid(child.pid, nullptr, WNOHANG | WUNTRACED) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  signal_child(child, SIGTERM);
  signal_child(child, SIGCONT);
  int st = wait_status(child);
  const std::string log = testing::read_file(dir_ / "term.log");
  ASSERT_TRUE(fs::exists(marker)) << "the run never reached its first save:\n" << log;
  ASSERT_TRUE(WIFEXITED(st)) << log;
  const int64_t saved = check_checkpoint(run);
  EXPECT_EQ(WEXITSTATUS(st), 143) << log;
  EXPECT_GE(saved, 3);
  EXPECT_LT(saved, 24);
  EXPECT_NE(log.find("interrupted: checkpoint saved"), std::string::npos) << log;
  ASSERT_EQ(run_to_end(resume(run), dir_ / "resume.log"), 0) << testing::read_file(dir_ / "resume.log");
  expect_same_weights(ref, run);
  EXPECT_EQ(losses(ref), losses(run));
}

TEST_F(CrashSafety, FullDiskDuringSaveKeepsThePreviousCheckpoint) {
  const std::string run = dir_ / "full";
  ASSERT_EQ(run_to_end(fresh(run, 6, 3), dir_ / "a.log"), 0) << testing::read_file(dir_ / "a.log");
  ASSERT_EQ(check_checkpoint(run), 6);
  const std::string model_before = testing::read_file(run + "/model.safetensors");
  // Continue to step 12 with files limited to 16 KB: the metrics lines fit, the checkpoint
  // files (about 40 and 80 KB) do not, as on a disk that fills up during the save.
  std::vector<std::string> more = resume(run);
  more.insert(more.end(), {"--steps", "12"});
  const int code = run_to_end(more, dir_ / "b.log", 16 * 1024);
  const std::string log = testing::read_file(dir_ / "b.log");
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("alk write_file: cannot write"), std::string::npos) << log;
  EXPECT_NE(log.find("File too large"), std::string::npos) << log;
  EXPECT_EQ(log.find("(at "), std::string::npos) << "an internal source location in a CLI error: " << log;
  EXPECT_EQ(check_checkpoint(run), 6);
  EXPECT_EQ(testing::read_file(run + "/model.safetensors"), model_before);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) entries += e.is_directory();
  EXPECT_EQ(entries, 1) << "the failed save left its directory behind";
  // With space again, the run continues from the old checkpoint.
  ASSERT_EQ(run_to_end(more, dir_ / "c.log"), 0) << testing::read_file(dir_ / "c.log");
  EXPECT_EQ(check_checkpoint(run), 12);
}

TEST_F(CrashSafety, CliErrorsHaveNoInternalPaths) {
  const std::vector<std::vector<std::string>> bad = {
      {"train", "--task", "mnist", "--data", dir_ / "no-mnist-here", "--out", dir_ / "m"},
      {"train", "--resume", dir_ / "no-run-here"},
      {"inspect", dir_ / "missing.safetensors"},
      {"sample", "--from", dir_ / "no-run-here", "--prompt", "x"},
      {"train", "--corpus", corpus_, "--ctx", "0", "--out", dir_ / "z"},
  };
  for (const auto& args : bad) {
    std::string line;
    for (const std::string& a : args) line += a + " ";
    SCOPED_TRACE(line);
    const int code = run_to_end(args, dir_ / "err.log");
    const std::string log = testing::read_file(dir_ / "err.log");
    EXPECT_NE(code, 0) << log;
    EXPECT_EQ(log.rfind("alk ", 0), 0u) << log;
    EXPECT_EQ(log.find(".cpp:"), std::string::npos) << log;
    EXPECT_EQ(log.find("(at "), std::string::npos) << log;
  }
  ::setenv("ALK_DEBUG", "errors", 1);
  const int code = run_to_end(bad[2], dir_ / "dbg.log");
  ::unsetenv("ALK_DEBUG");
  EXPECT_EQ(code, 1);
  EXPECT_NE(testing::read_file(dir_ / "dbg.log").find(".cpp:"), std::string::npos) << "ALK_DEBUG=errors keeps them";
}

// An empty, a tiny and a larger-than-memory corpus: each a one-line error, exit code 1.
TEST_F(CrashSafety, CorpusErrorsSayWhatIsWrong) {
  testing::write_file(dir_ / "empty.txt", "");
  testing::write_file(dir_ / "tiny.txt", "hello world\n");
  testing::write_file(dir_ / "big.txt", "In the beginning");
  ASSERT_EQ(::truncate((dir_ / "big.txt").c_str(), 300 << 20), 0);  // sparse: no real disk used
  struct Case {
    std::string corpus, want;
  };
  for (const Case& c : {Case{dir_ / "empty.txt", "' is empty"},
                        Case{dir_ / "tiny.txt", "' is too small: "},
                        Case{dir_ / "big.txt", "streaming is not implemented"}}) {
    SCOPED_TRACE(c.corpus);
    ::setenv("ALK_MEMORY_LIMIT", std::to_string(512 << 20).c_str(), 1);
    const int code = run_to_end({"train", "--corpus", c.corpus, "--out", dir_ / "c", "--steps", "2"}, dir_ / "c.log");
    ::unsetenv("ALK_MEMORY_LIMIT");
    const std::string log = testing::read_file(dir_ / "c.log");
    EXPECT_EQ(code, 1) << log;
    EXPECT_NE(log.find(c.want), std::string::npos) << log;
    EXPECT_NE(log.find("alk train: "), std::string::npos) << log;
  }
}

// --memory-budget (and memory_budget in config.json): a step that does not fit is refused
// before it allocates, naming the peak and the largest tensors; one that fits trains and
// reports its planned bytes.
TEST_F(CrashSafety, MemoryBudgetFromTheCommandLineAndConfig) {
  std::vector<std::string> tight = fresh(dir_ / "tight", 4, 100);
  tight.insert(tight.end(), {"--memory-budget", "300KB"});
  int code = run_to_end(tight, dir_ / "tight.log");
  std::string log = testing::read_file(dir_ / "tight.log");
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("memory budget 300KB (307200 bytes) refused the training step before allocating it"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("the plan needs a peak of "), std::string::npos) << log;
  EXPECT_NE(log.find("largest tensors: "), std::string::npos) << log;
  EXPECT_FALSE(train::find_checkpoint(dir_ / "tight").has_value());

  testing::write_file(dir_ / "config.json", "{\"memory_budget\": \"64MB\"}");
  std::vector<std::string> roomy = fresh(dir_ / "roomy", 4, 100);
  roomy.insert(roomy.end(), {"--config", dir_ / "config.json"});
  code = run_to_end(roomy, dir_ / "roomy.log");
  log = testing::read_file(dir_ / "roomy.log");
  EXPECT_EQ(code, 0) << log;
  EXPECT_NE(log.find("within the budget of 64.0 MB"), std::string::npos) << log;
  EXPECT_EQ(check_checkpoint(dir_ / "roomy"), 4);

  // The default model (dim 128, 4 layers, ctx 128, batch 8, vocab 1024) trains within 64 MB:
  // its compiled step plans 57.5 MB + 3.6 MB of parameters (it planned 70.6 MB before the
  // step's schedules shared one arena, backward freed the values its rules saved, leaf
  // gradients were copied out of packed results, the arena took best fits and clipped
  // gradients stayed lazy, fused into the optimizer's update).
  std::vector<std::string> standard = {"train", "--corpus", corpus_, "--out", dir_ / "standard", "--steps", "2",
                                       "--memory-budget", "64MB", "--eval-every", "100", "--sample-tokens", "0",
                                       "--log-every", "1"};
  code = run_to_end(standard, dir_ / "standard.log");
  log = testing::read_file(dir_ / "standard.log");
  EXPECT_EQ(code, 0) << log;
  EXPECT_NE(log.find("within the budget of 64.0 MB"), std::string::npos) << log;

  testing::write_file(dir_ / "bad.json", "{\"memory_budget\": \"64XB\"}");
  std::vector<std::string> bad = fresh(dir_ / "bad", 4, 100);
  bad.insert(bad.end(), {"--config", dir_ / "bad.json"});
  code = run_to_end(bad, dir_ / "bad.log");
  EXPECT_EQ(code, 1);
  EXPECT_NE(testing::read_file(dir_ / "bad.log").find("is not a positive size like 64MB"), std::string::npos);
}

}  // namespace
}  // namespace alk

#endif  // ALK_CLI_PATH
