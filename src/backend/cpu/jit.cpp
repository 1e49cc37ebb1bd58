// The evaluator's compiled tier (jit.h): what is worth compiling, the compile worker, the
// disk cache. The text is the C++ emitter's (expr::emit_cpu_block, src/expr/emit_cpp.cpp),
// which spells each IR node exactly as eval_impl.inc computes it; keep the two in step
// (tests/backend/cpu/test_jit.cpp compares them bit for bit).
#include "backend/cpu/jit.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "alk/error.h"
#include "backend/cpu/eval.h"
#include "expr/emit.h"
#include "runtime/disk_cache.h"

extern char** environ;

namespace alk::cpu::jit {

namespace {

using expr::Fn;
using expr::Node;
using expr::Type;

static_assert(kBlock == expr::kCpuBlockElements, "the evaluator's block is the body's");

bool debug() {
  static const bool on = [] {
    const char* v = std::getenv("ALK_DEBUG");
    return v && (std::strstr(v, "jit") || std::strstr(v, "all"));
  }();
  return on;
}

// Rough cost of the nodes the body computes: a libmvec call or pow counts as 8.
int work_of(const expr::Expr& e, const std::vector<bool>& uniform) {
  int w = 0;
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& nd = e.nodes[i];
    if (nd.fn == Fn::Input || nd.fn == Fn::Const || (uniform[i] && i + 1 != e.nodes.size())) continue;
    w += expr::is_transcendental(nd.fn) ? 8 : 1;
  }
  return w;
}

// ---- compiling and loading ----

const char* compiler() {
  static const std::string cxx = [] {
    if (const char* env = std::getenv("ALK_CXX")) return std::string(env);
#ifdef ALK_BUILD_CXX
    if (::access(ALK_BUILD_CXX, X_OK) == 0) return std::string(ALK_BUILD_CXX);
#endif
    return std::string("c++");
  }();
  return cxx.c_str();
}

std::vector<std::string> flags(Isa isa) {
  std::vector<std::string> f{"-x", "c++", "-std=c++20", "-O3", "-w", "-fPIC", "-shared", "-fno-builtin",
                             "-ffp-contract=off", "-fno-math-errno", "-fno-exceptions", "-fno-rtti"};
  if (isa == Isa::Generic) return f;  // a user kernel's code on a machine without AVX2
  if (isa == Isa::Avx512)
    for (const char* m : {"-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mprefer-vector-width=512"})
      f.emplace_back(m);
  else
    for (const char* m : {"-mavx2", "-mfma"}) f.emplace_back(m);
  return f;
}

constexpr std::string_view kMagic{"ALKJIT01", 8};  // a .key entry: the text and command of the .so beside it

template <class T>
uint64_t hash_bytes(const T& v, uint64_t h) {
  return fnv1a(std::string_view(reinterpret_cast<const char*>(&v), sizeof v), h);
}

const std::string& cache_dir() {
  static const std::string dir = [] {
    if (std::string jit = alk::cache_dir("jit"); !jit.empty()) return jit;
    // No writable cache: a directory of this process's own, removed at exit (the loaded
    // objects stay mapped after their files are gone).
    static char tmpl[] = "/tmp/alk-jit-XXXXXX";
    if (!::mkdtemp(tmpl)) return std::string("/tmp");
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(tmpl, ec);
    });
    return std::string(tmpl);
  }();
  return dir;
}

// Runs the compiler; its output goes to `log`. True on exit status 0.
bool run_compiler(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Whether the body has anything to compute: a root that is an input or a literal is the
// evaluator's to copy or fill (it hands over no leaf for the root).
bool computes(const expr::Expr& e) { return e.nodes.back().fn != Fn::Input && e.nodes.back().fn != Fn::Const; }

// The emitter's text for e, whose node i is uniform where uniform[i] (eval_impl.inc's Plan):
// the emitter is told which inputs are uniform and derives the same uniform nodes from them
// (every node it takes as a uniform leaf is one the Plan hands over).
std::string source_of(const expr::Expr& e, const std::vector<bool>& uniform) {
  std::vector<bool> uniform_inputs(static_cast<size_t>(e.num_inputs()), false);
  for (size_t i = 0; i + 1 < e.nodes.size(); ++i)
    if (e.nodes[i].fn == Fn::Input && uniform[i]) uniform_inputs[static_cast<size_t>(e.nodes[i].slot)] = true;
  return expr::emit_cpu_block(e, uniform_inputs);
}

struct Entry {
  std::vector<Node> nodes;
  std::vector<bool> uniform;
  Isa isa = Isa::Avx512;
  std::atomic<BlockFn> fn{nullptr};
  bool queued = false;
};

class Jit {
 public:
  static Jit& get() {
    static Jit* j = new Jit;  // never destroyed: the worker may outlive static destructors
    return *j;
  }

  std::atomic<Mode> mode{[] {
    const char* v = std::getenv("ALK_JIT");
    if (!v) return Mode::Async;
    if (!std::strcmp(v, "off") || !std::strcmp(v, "0")) return Mode::Off;
    return !std::strcmp(v, "sync") ? Mode::Sync : Mode::Async;
  }()};
  std::atomic<int64_t> min_elements{16384};
  std::atomic<int> min_work{4};

  BlockFn find(const expr::Expr& e, const std::vector<bool>& uniform, int64_t elements, Isa isa) {
    uint64_t h = hash_bytes(isa, fnv1a(""));
    for (const Node& nd : e.nodes) {
      h = hash_bytes(nd.fn, h);
      h = hash_bytes(nd.type, h);
      h = hash_bytes(nd.slot, h);
      h = hash_bytes(nd.value, h);
      h = hash_bytes(nd.args, h);
    }
    for (bool u : uniform) h = hash_bytes(u, h);
    std::shared_ptr<Entry> entry;
    {
      std::unique_lock lock(mu_);
      auto& slot = entries_[h];
      for (auto& x : slot)
        if (x->isa == isa && x->uniform == uniform && x->nodes == e.nodes) entry = x;
      if (entry && entry->queued) return entry->fn.load(std::memory_order_acquire);
      // Worth compiling? Long enough a chain, over enough elements (a kernel over fewer
      // elements than one thread's grain costs less to interpret than to compile).
      if (elements < min_elements || work_of(e, uniform) < min_work || !computes(e)) return nullptr;
      if (!entry) {
        entry = std::make_shared<Entry>();
        entry->nodes = e.nodes;
        entry->uniform = uniform;
        entry->isa = isa;
        slot.push_back(entry);
      }
      entry->queued = true;
      if (mode == Mode::Async) {
        queue_.push_back(entry);
        if (!worker_.joinable()) {
          worker_ = std::thread([this] { work(); });
          std::atexit([] { Jit::get().stop(); });
        }
        cv_.notify_all();
        return nullptr;
      }
    }
    build(*entry);  // Sync: compile now (a concurrent caller finds it queued and interprets meanwhile)
    return entry->fn.load(std::memory_order_acquire);
  }

  void wait_idle() {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }

  Stats stats() {
    std::unique_lock lock(mu_);
    return stats_;
  }

 private:
  void work() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      std::shared_ptr<Entry> next = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      build(*next);
      lock.lock();
      busy_ = false;
      idle_cv_.notify_all();
    }
  }

  void stop() {
    {
      std::unique_lock lock(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
  }

  void build(Entry& entry) {
    const expr::Expr e{entry.nodes};
    std::string src;
    try {
      src = source_of(e, entry.uniform);
    } catch (const Error& err) {  // a node the body has no spelling for: interpreted
      fail(err.what());
      return;
    }
    entry.fn.store(reinterpret_cast<BlockFn>(compile(src, entry.isa, e.nodes.size(), "alk_block", nullptr)),
                   std::memory_order_release);
  }

 public:
  // The body of `src` built for isa (from the disk cache when it is there), or nullptr.
  // An object on disk is used only when the entry beside it (<hash>.key, runtime/disk_cache.h's
  // verified format) holds the full source and command it was built from, written once the
  // object is in place: a file-name collision or an object without its entry (a crash, an
  // older alk) costs a recompile, never a wrong kernel.
  // `symbol`: the function to return. With `error_log`, a failed compile leaves the compiler's
  // output there (a user kernel's error) instead of being reported once on stderr.
  void* compile(const std::string& src, Isa isa, size_t nodes, const char* symbol, std::string* error_log) {
    std::vector<std::string> args{compiler()};
    for (std::string& f : flags(isa)) args.push_back(std::move(f));
    std::string key = src;
    for (const std::string& a : args) key += "\n" + a;
    char name[32];
    std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(fnv1a(key)));
    const std::string so = cache_dir() + "/" + name + ".so", key_entry = cache_dir() + "/" + name + ".key";
    const auto t0 = std::chrono::steady_clock::now();
    if (read_cache_entry(key_entry, kMagic, key) && ::access(so.c_str(), R_OK) == 0) {
      if (void* fn = load(so, symbol)) {
        count(&Stats::from_disk);
        if (debug()) std::fprintf(stderr, "alk jit: %s loaded from the cache (%zu nodes)\n", so.c_str(), nodes);
        return fn;
      }
    }
    // Build beside the cache entry under a unique name, then rename: a concurrent process
    // building the same kernel never loads a half-written file.
    static std::atomic<int> serial{0};
    const std::string stem = cache_dir() + "/" + name + "." + std::to_string(::getpid()) + "." + std::to_string(serial++);
    const std::string cpp = stem + ".cpp", tmp = stem + ".so", log = stem + ".log";
    {
      std::ofstream f(cpp, std::ios::binary);
      f << src;
      if (!f.flush()) {
        fail("cannot write " + cpp);
        return nullptr;
      }
    }
    args.push_back(cpp);
    args.push_back("-o");
    args.push_back(tmp);
    args.push_back("-lmvec");
    args.push_back("-lm");
    if (!run_compiler(args, log)) {
      if (error_log) {
        std::ifstream in(log, std::ios::binary);
        error_log->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        if (error_log->empty()) *error_log = std::string("the compiler (") + compiler() + ") could not be run";
        std::remove(cpp.c_str());
        std::remove(log.c_str());
        count(&Stats::failed);
        return nullptr;
      }
      fail(std::string("the compiler (") + compiler() + ") failed on " + cpp + "; its output: " + log);
      return nullptr;
    }
    if (debug())  // kept for reading: the source beside the cached object
      std::rename(cpp.c_str(), (cache_dir() + "/" + name + ".cpp").c_str());
    else
      std::remove(cpp.c_str());
    std::remove(log.c_str());
    void* fn = std::rename(tmp.c_str(), so.c_str()) == 0 ? load(so, symbol) : nullptr;
    if (!fn) {
      std::remove(tmp.c_str());
      fail("cannot load " + so);
      return nullptr;
    }
    write_cache_entry(key_entry, kMagic, key, "");
    count(&Stats::compiled);
    if (debug())
      std::fprintf(stderr, "alk jit: %s compiled in %.0f ms (%zu nodes)\n", so.c_str(),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), nodes);
    return fn;
  }

 private:
  static void* load(const std::string& so, const char* symbol) {
    void* handle = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open: the code runs until exit
    return handle ? ::dlsym(handle, symbol) : nullptr;
  }

  void fail(const std::string& why) {
    count(&Stats::failed);
    // Once per process: a machine without a working compiler interprets everything.
    static std::atomic<bool> told{false};
    if (!told.exchange(true) || debug()) std::fprintf(stderr, "alk jit: %s; interpreting\n", why.c_str());
  }

  void count(int64_t Stats::*field) {
    std::unique_lock lock(mu_);
    ++(stats_.*field);
  }

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::unordered_map<uint64_t, std::vector<std::shared_ptr<Entry>>> entries_;
  std::deque<std::shared_ptr<Entry>> queue_;
  std::thread worker_;
  bool busy_ = false, stopping_ = false;
  Stats stats_;
};

}  // namespace

Mode mode() { return Jit::get().mode; }
void set_mode(Mode m) { Jit::get().mode = m; }
void set_thresholds(int64_t min_elements, int min_work) {
  Jit::get().min_elements = min_elements;
  Jit::get().min_work = min_work;
}

BlockFn block_body(const expr::Expr& e, const std::vector<bool>& uniform, int64_t elements, Isa isa) {
  if (isa == Isa::Generic) return nullptr;
  Jit& j = Jit::get();
  if (j.mode == Mode::Off) return nullptr;
  return j.find(e, uniform, elements, isa);
}

BlockFn compile(const std::string& source, Isa isa) {
  return isa == Isa::Generic ? nullptr : reinterpret_cast<BlockFn>(Jit::get().compile(source, isa, 0, "alk_block", nullptr));
}

void* compile_function(const std::string& source, const char* symbol, Isa isa, std::string& error_log) {
  error_log.clear();
  void* fn = Jit::get().compile(source, isa, 0, symbol, &error_log);
  if (!fn && error_log.empty()) error_log = "the compiled object has no function " + std::string(symbol);
  return fn;
}

Stats stats() { return Jit::get().stats(); }
void wait_idle() { Jit::get().wait_idle(); }

}  // namespace alk::cpu::jit
