// The evaluator's compiled tier (jit.h): source generation, the compile worker, the disk
// cache. The generated text spells each IR node exactly as eval_impl.inc computes it;
// keep the two in step (tests/backend/cpu/test_jit.cpp compares them bit for bit).
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

#include "backend/cpu/eval.h"
#include "backend/cpu/vec_tanh.inc"
#include "runtime/disk_cache.h"

extern char** environ;

namespace alk::cpu::jit {

namespace {

using expr::Fn;
using expr::Node;
using expr::Type;

bool debug() {
  static const bool on = [] {
    const char* v = std::getenv("ALK_DEBUG");
    return v && (std::strstr(v, "jit") || std::strstr(v, "all"));
  }();
  return on;
}

// ---- source generation ----

bool is_float(Type t) { return t == Type::F32 || t == Type::F64; }
std::string type_name(Type t) { return t == Type::F32 ? "float" : t == Type::F64 ? "double" : "int64_t"; }

// The functions the interpreter takes from libmvec (eval_impl.inc's vector_math).
const char* vector_math_name(Fn f) {
  switch (f) {
    case Fn::Exp: return "exp";
    case Fn::Log: return "log";
    case Fn::Log1p: return "log1p";
    case Fn::Expm1: return "expm1";
    case Fn::Sin: return "sin";
    case Fn::Cos: return "cos";
    case Fn::Tanh: return "tanh";
    case Fn::Erf: return "erf";
    default: return nullptr;
  }
}

int lanes(Isa isa) { return isa == Isa::Avx512 ? 16 : 8; }

// f32 tanh's source, pasted into the kernels that use it (the interpreter expands the same
// macro, vec_tanh.inc).
constexpr const char* kTanhSource256 = ALK_STRINGIFY(ALK_VEC_TANH_SOURCE(ALK_VFMA_256));
constexpr const char* kTanhSource512 = ALK_STRINGIFY(ALK_VEC_TANH_SOURCE(ALK_VFMA_512));

enum class Kind { Const, Scalar, Array, Body };

class Generator {
 public:
  Generator(const expr::Expr& e, const std::vector<bool>& uniform, Isa isa)
      : e_(e), uniform_(uniform), isa_(isa), lanes_(lanes(isa)) {}

  // Empty when some node has no compiled spelling.
  std::string source() {
    const size_t last = e_.nodes.size() - 1;
    if (e_.nodes[last].fn == Fn::Input || e_.nodes[last].fn == Fn::Const) return "";
    std::string decls, body;
    for (size_t i = 0; i < e_.nodes.size(); ++i) {
      const Node& nd = e_.nodes[i];
      const std::string t = type_name(nd.type), id = std::to_string(i);
      switch (kind(i)) {
        case Kind::Const: {
          uint64_t bits;
          std::memcpy(&bits, &nd.value, sizeof bits);
          char shown[32];  // the exact bits are the value; the comment is for the reader
          std::snprintf(shown, sizeof shown, "%.9g", nd.value);
          decls += "  const " + t + " c" + id + " = static_cast<" + t + ">(__builtin_bit_cast(double, 0x" + hex(bits) +
                   "ull));  // " + shown + "\n";
          break;
        }
        case Kind::Scalar:
          decls += "  const " + t + " s" + id + " = *static_cast<const " + t + "*>(leaves[" + id + "]);\n";
          break;
        case Kind::Array:
          decls += "  const " + t + "* a" + id + " = static_cast<const " + t + "*>(leaves[" + id + "]);\n";
          break;
        case Kind::Body: {
          std::string stmt = statement(i);
          if (stmt.empty()) return "";
          body += stmt;
          break;
        }
      }
    }
    const std::string rt = type_name(e_.nodes[last].type), L = std::to_string(lanes_);
    std::string src = prelude();
    src += "extern \"C\" void alk_block(const void* const* leaves, void* out_) {\n" + decls;
    src += "  " + rt + "* out = static_cast<" + rt + "*>(out_);\n";
    src += "  for (int c = 0; c < " + std::to_string(kBlock) + "; c += " + L + ") {\n" + body;
    src += "    for (int l = 0; l < " + L + "; ++l) out[c + l] = v" + std::to_string(last) + "[l];\n  }\n}\n";
    return src;
  }

 private:
  static std::string hex(uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
  }

  Kind kind(size_t i) const {
    const Node& nd = e_.nodes[i];
    if (nd.fn == Fn::Const) return Kind::Const;
    if (uniform_[i] && i != e_.nodes.size() - 1) return Kind::Scalar;
    return nd.fn == Fn::Input ? Kind::Array : Kind::Body;
  }

  // Node k's value in lane l of the current chunk.
  std::string lane(int k) const {
    const std::string id = std::to_string(k);
    switch (kind(static_cast<size_t>(k))) {
      case Kind::Const: return "c" + id;
      case Kind::Scalar: return "s" + id;
      case Kind::Array: return "a" + id + "[c + l]";
      case Kind::Body: break;
    }
    return "v" + id + "[l]";
  }

  std::string statement(size_t i) {
    const Node& nd = e_.nodes[i];
    const std::string t = type_name(nd.type), v = "v" + std::to_string(i), L = std::to_string(lanes_);
    const bool flt = is_float(nd.type), f32 = nd.type == Type::F32;
    std::string a = nd.args[0] >= 0 ? lane(nd.args[0]) : "", b = nd.args[1] >= 0 ? lane(nd.args[1]) : "",
                c = nd.args[2] >= 0 ? lane(nd.args[2]) : "";
    if (const char* vm = vector_math_name(nd.fn)) {
      if (!flt) return "";  // the interpreter goes through double for these: not compiled
      used_math_.push_back(std::string(vm) + (f32 ? "_f" : "_d"));
      std::string src, pre;
      const int k = nd.args[0];
      switch (kind(static_cast<size_t>(k))) {
        case Kind::Array: src = "a" + std::to_string(k) + " + c"; break;
        case Kind::Body: src = "v" + std::to_string(k); break;
        default:
          src = "t" + std::to_string(i);
          pre = "    " + t + " " + src + "[" + L + "];\n    for (int l = 0; l < " + L + "; ++l) " + src + "[l] = " + a + ";\n";
      }
      return pre + "    " + t + " " + v + "[" + L + "];\n    alk_vm_" + vm + (f32 ? "_f(" : "_d(") + src + ", " + v + ");\n";
    }
    std::string x;
    switch (nd.fn) {
      case Fn::Cast: x = nd.type == Type::Bool ? "(" + a + " != 0)" : "static_cast<" + t + ">(" + a + ")"; break;
      case Fn::Lt: x = "(" + a + " < " + b + ")"; break;
      case Fn::Le: x = "(" + a + " <= " + b + ")"; break;
      case Fn::Gt: x = "(" + a + " > " + b + ")"; break;
      case Fn::Ge: x = "(" + a + " >= " + b + ")"; break;
      case Fn::Eq: x = "(" + a + " == " + b + ")"; break;
      case Fn::Ne: x = "(" + a + " != " + b + ")"; break;
      case Fn::Select:  // both values loaded first: see And below
        return "    " + t + " " + v + "[" + L + "];\n    for (int l = 0; l < " + L + "; ++l) {\n      const " + t +
               " x = " + b + ", y = " + c + ";\n      " + v + "[l] = " + a + " ? x : y;\n    }\n";
      case Fn::Add: x = flt ? "(" + a + " + " + b + ")" : "alk_wrap_add(" + a + ", " + b + ")"; break;
      case Fn::Sub: x = flt ? "(" + a + " - " + b + ")" : "alk_wrap_sub(" + a + ", " + b + ")"; break;
      case Fn::Mul: x = flt ? "(" + a + " * " + b + ")" : "alk_wrap_mul(" + a + ", " + b + ")"; break;
      case Fn::Div: x = flt ? "(" + a + " / " + b + ")" : "alk_int_div(" + a + ", " + b + ")"; break;
      case Fn::Pow:
        x = !flt ? "static_cast<int64_t>(pow(static_cast<double>(" + a + "), static_cast<double>(" + b + ")))"
                 : (f32 ? "powf(" : "pow(") + a + ", " + b + ")";
        break;
      case Fn::Max: x = "alk_max(" + a + ", " + b + ")"; break;
      case Fn::Min: x = "alk_min(" + a + ", " + b + ")"; break;
      // & and |, not && and ||: the same values, and no short circuit for GCC to turn into
      // masked loads (GCC 12 reuses one mask for both halves of 16 int64 lanes with AVX-512).
      case Fn::And: x = "static_cast<" + t + ">((" + a + " != 0) & (" + b + " != 0))"; break;
      case Fn::Or: x = "static_cast<" + t + ">((" + a + " != 0) | (" + b + " != 0))"; break;
      case Fn::Neg: x = flt ? "(-" + a + ")" : "alk_wrap_sub(0, " + a + ")"; break;
      case Fn::Not: x = "static_cast<" + t + ">(!" + a + ")"; break;
      case Fn::Abs:
        x = flt ? (f32 ? "__builtin_fabsf(" : "__builtin_fabs(") + a + ")"
                : "(" + a + " < 0 ? alk_wrap_sub(0, " + a + ") : " + a + ")";
        break;
      case Fn::Floor: x = flt ? (f32 ? "__builtin_floorf(" : "__builtin_floor(") + a + ")" : a; break;
      case Fn::Ceil: x = flt ? (f32 ? "__builtin_ceilf(" : "__builtin_ceil(") + a + ")" : a; break;
      case Fn::Round: x = flt ? (f32 ? "__builtin_nearbyintf(" : "__builtin_nearbyint(") + a + ")" : a; break;
      case Fn::RoundBf16:
        if (!f32) return "";
        x = "alk_round_bf16(" + a + ")";
        break;
      case Fn::Sqrt:
        if (!flt) return "";
        x = (f32 ? "__builtin_sqrtf(" : "__builtin_sqrt(") + a + ")";
        break;
      case Fn::Rsqrt:
        if (!flt) return "";
        x = f32 ? "(1.0f / __builtin_sqrtf(" + a + "))" : "(1.0 / __builtin_sqrt(" + a + "))";
        break;
      default: return "";
    }
    return "    " + t + " " + v + "[" + L + "];\n    for (int l = 0; l < " + L + "; ++l) " + v + "[l] = " + x + ";\n";
  }

  std::string prelude() const {
    const bool avx512 = isa_ == Isa::Avx512;
    const std::string bytes = avx512 ? "64" : "32", fl = avx512 ? "16" : "8", dl = avx512 ? "8" : "4",
                      tag = avx512 ? "e" : "d", L = std::to_string(lanes_);
    std::string p =
        "// alk: a fused expression's block body (src/backend/cpu/jit.cpp)\n"
        "typedef __INT64_TYPE__ int64_t;\n"
        "typedef __UINT64_TYPE__ uint64_t;\n"
        "extern \"C\" float powf(float, float);\n"
        "extern \"C\" double pow(double, double);\n"
        "static inline int64_t alk_wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }\n"
        "static inline int64_t alk_wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }\n"
        "static inline int64_t alk_wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }\n"
        "static inline int64_t alk_int_div(int64_t a, int64_t b) {\n"
        "  return b == 0 || (b == -1 && a == -9223372036854775807LL - 1) ? 0 : a / b;\n}\n"
        "template <class T> static inline T alk_max(T a, T b) { return (a != a || a > b) ? a : b; }\n"
        "static inline float alk_round_bf16(float x) {  // to the nearest bf16, ties to even\n"
        "  const unsigned u = __builtin_bit_cast(unsigned, x);\n"
        "  return x != x ? x : __builtin_bit_cast(float, (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);\n}\n"
        "template <class T> static inline T alk_min(T a, T b) { return (a != a || a < b) ? a : b; }\n"
        "typedef float alk_vf __attribute__((vector_size(" + bytes + ")));\n"
        "typedef double alk_vd __attribute__((vector_size(" + bytes + ")));\n";
    std::vector<std::string> done;
    for (const std::string& m : used_math_) {
      if (std::find(done.begin(), done.end(), m) != done.end()) continue;
      done.push_back(m);
      const bool f32 = m.back() == 'f';
      if (m == "tanh_f") {  // alk's own, the interpreter's source (vec_tanh.inc): the same bits
        p += "typedef int alk_vi __attribute__((vector_size(" + bytes + ")));\n";
        p += avx512 ? kTanhSource512 : kTanhSource256;
        p += "\nstatic inline void alk_vm_tanh_f(const float* a, float* o) {\n  alk_vf x;\n  __builtin_memcpy(&x, a, " +
             bytes + ");\n  x = alk_tanh_vf(x);\n  __builtin_memcpy(o, &x, " + bytes + ");\n}\n";
        continue;
      }
      const std::string name = m.substr(0, m.size() - 2), et = f32 ? "float" : "double", vt = f32 ? "alk_vf" : "alk_vd",
                        step = f32 ? fl : dl, sym = "_ZGV" + tag + "N" + step + "v_" + name + (f32 ? "f" : "");
      p += "extern \"C\" " + vt + " " + sym + "(" + vt + ");\n";
      p += "static inline void alk_vm_" + m + "(const " + et + "* a, " + et + "* o) {\n  for (int k = 0; k < " + L +
           "; k += " + step + ") {\n    " + vt + " x;\n    __builtin_memcpy(&x, a + k, " + bytes + ");\n    x = " + sym +
           "(x);\n    __builtin_memcpy(o + k, &x, " + bytes + ");\n  }\n}\n";
    }
    return p;
  }

  const expr::Expr& e_;
  const std::vector<bool>& uniform_;
  Isa isa_;
  int lanes_;
  std::vector<std::string> used_math_;
};

// Rough cost of the nodes the body computes: a libmvec call or pow counts as 8.
int work_of(const expr::Expr& e, const std::vector<bool>& uniform) {
  int w = 0;
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& nd = e.nodes[i];
    if (nd.fn == Fn::Input || nd.fn == Fn::Const || (uniform[i] && i + 1 != e.nodes.size())) continue;
    w += vector_math_name(nd.fn) || nd.fn == Fn::Pow ? 8 : 1;
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
  if (isa == Isa::Avx512)
    for (const char* m : {"-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mprefer-vector-width=512"})
      f.emplace_back(m);
  else
    for (const char* m : {"-mavx2", "-mfma"}) f.emplace_back(m);
  return f;
}

uint64_t fnv(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  auto p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
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
    uint64_t h = fnv(&isa, sizeof isa);
    for (const Node& nd : e.nodes) {
      h = fnv(&nd.fn, sizeof nd.fn, h);
      h = fnv(&nd.type, sizeof nd.type, h);
      h = fnv(&nd.slot, sizeof nd.slot, h);
      h = fnv(&nd.value, sizeof nd.value, h);
      h = fnv(nd.args, sizeof nd.args, h);
    }
    for (bool u : uniform) h = fnv(&u, 1, h);
    std::shared_ptr<Entry> entry;
    {
      std::unique_lock lock(mu_);
      auto& slot = entries_[h];
      for (auto& x : slot)
        if (x->isa == isa && x->uniform == uniform && x->nodes == e.nodes) entry = x;
      if (entry && entry->queued) return entry->fn.load(std::memory_order_acquire);
      // Worth compiling? Long enough a chain, over enough elements (a kernel over fewer
      // elements than one thread's grain costs less to interpret than to compile).
      if (elements < min_elements || work_of(e, uniform) < min_work) return nullptr;
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
    expr::Expr e{entry.nodes};
    const std::string src = Generator(e, entry.uniform, entry.isa).source();
    if (src.empty()) {
      count(&Stats::failed);
      return;
    }
    std::vector<std::string> args{compiler()};
    for (std::string& f : flags(entry.isa)) args.push_back(std::move(f));
    std::string key = src;
    for (const std::string& a : args) key += "\n" + a;
    char name[32];
    std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(fnv(key.data(), key.size())));
    const std::string so = cache_dir() + "/" + name + ".so";
    const auto t0 = std::chrono::steady_clock::now();
    if (::access(so.c_str(), R_OK) == 0 && load(entry, so)) {
      count(&Stats::from_disk);
      if (debug()) std::fprintf(stderr, "alk jit: %s loaded from the cache (%zu nodes)\n", so.c_str(), entry.nodes.size());
      return;
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
        fail(entry, "cannot write " + cpp);
        return;
      }
    }
    args.push_back(cpp);
    args.push_back("-o");
    args.push_back(tmp);
    args.push_back("-lmvec");
    args.push_back("-lm");
    if (!run_compiler(args, log)) {
      fail(entry, std::string("the compiler (") + compiler() + ") failed on " + cpp + "; its output: " + log);
      return;
    }
    if (debug())  // kept for reading: the source beside the cached object
      std::rename(cpp.c_str(), (cache_dir() + "/" + name + ".cpp").c_str());
    else
      std::remove(cpp.c_str());
    std::remove(log.c_str());
    if (std::rename(tmp.c_str(), so.c_str()) != 0 || !load(entry, so)) {
      std::remove(tmp.c_str());
      fail(entry, "cannot load " + so);
      return;
    }
    count(&Stats::compiled);
    if (debug())
      std::fprintf(stderr, "alk jit: %s compiled in %.0f ms (%zu nodes)\n", so.c_str(),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                   entry.nodes.size());
  }

  static bool load(Entry& entry, const std::string& so) {
    void* handle = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open: the code runs until exit
    if (!handle) return false;
    auto fn = reinterpret_cast<BlockFn>(::dlsym(handle, "alk_block"));
    if (!fn) return false;
    entry.fn.store(fn, std::memory_order_release);
    return true;
  }

  void fail(Entry&, const std::string& why) {
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

std::string block_source(const expr::Expr& e, const std::vector<bool>& uniform, Isa isa) {
  if (isa == Isa::Generic) return "";
  return Generator(e, uniform, isa).source();
}

Stats stats() { return Jit::get().stats(); }
void wait_idle() { Jit::get().wait_idle(); }

}  // namespace alk::cpu::jit
