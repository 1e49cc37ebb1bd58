#include "backend/cuda/driver.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "alk/error.h"

namespace alk::cuda {

namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The first library of `names` that dlopen finds ("" and nullptr when none).
void* open_first(const std::vector<std::string>& names, std::string& opened) {
  for (const std::string& n : names)
    if (void* h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      opened = n;
      return h;
    }
  return nullptr;
}

struct LoadedDriver {
  Driver api;
  bool ok = false;
  std::string why;
};

const LoadedDriver& loaded_driver() {
  static const LoadedDriver d = [] {
    LoadedDriver d;
    std::string opened;
    void* lib = open_first({"libcuda.so.1", "libcuda.so"}, opened);
    if (!lib) {
      d.why = "libcuda.so.1 not found (no NVIDIA driver)";
      return d;
    }
#define ALK_X(name, ret, args)                                                    \
  d.api.name = reinterpret_cast<ret(*) args>(::dlsym(lib, #name));                \
  if (!d.api.name) {                                                              \
    d.why = std::string(opened) + " has no " #name " (driver too old for CUDA 12)"; \
    return d;                                                                     \
  }
    ALK_CUDA_DRIVER_FNS(ALK_X)
#undef ALK_X
    if (CUresult r = d.api.cuInit(0); r != CUDA_SUCCESS) {
      const char* msg = nullptr;
      d.api.cuGetErrorString(r, &msg);
      d.why = "cuInit failed: " + std::string(msg ? msg : "error " + std::to_string(r));
      return d;
    }
    d.ok = true;
    return d;
  }();
  return d;
}

struct LoadedNvrtc {
  Nvrtc api;
  bool ok = false;
  std::string why;
};

const LoadedNvrtc& loaded_nvrtc() {
  static const LoadedNvrtc n = [] {
    LoadedNvrtc n;
    // ALK_CUDA_HOME, CUDA_HOME, then the usual toolkit place; the dynamic linker's own
    // search path first (ldconfig, LD_LIBRARY_PATH).
    std::vector<std::string> homes;
    for (const char* v : {"ALK_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"})
      if (const char* h = std::getenv(v); h && *h) homes.emplace_back(h);
    homes.emplace_back("/usr/local/cuda");
    std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    for (const std::string& h : homes)
      for (const char* lib : {"/lib64/libnvrtc.so", "/lib/libnvrtc.so", "/targets/x86_64-linux/lib/libnvrtc.so"})
        names.push_back(h + lib);
    std::string opened;
    void* lib = open_first(names, opened);
    if (!lib) {
      n.why = "libnvrtc.so not found (install the CUDA toolkit, or set ALK_CUDA_HOME)";
      return n;
    }
#define ALK_X(name, ret, args)                                     \
  n.api.name = reinterpret_cast<ret(*) args>(::dlsym(lib, #name)); \
  if (!n.api.name) {                                               \
    n.why = opened + " has no " #name;                             \
    return n;                                                      \
  }
    ALK_NVRTC_FNS(ALK_X)
#undef ALK_X
    for (const std::string& h : homes)
      if (is_dir(h + "/include") && ::access((h + "/include/cuda_fp16.h").c_str(), R_OK) == 0) {
        n.api.include_dir = h + "/include";
        break;
      }
    n.ok = true;
    return n;
  }();
  return n;
}

}  // namespace

const Driver* driver() { return loaded_driver().ok ? &loaded_driver().api : nullptr; }
const Nvrtc* nvrtc() { return loaded_nvrtc().ok ? &loaded_nvrtc().api : nullptr; }
std::string driver_unavailable_reason() { return loaded_driver().why; }
std::string nvrtc_unavailable_reason() { return loaded_nvrtc().why; }

void fail(const std::string& message) { throw Error("cuda", message, Loc::current()); }

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* msg = nullptr;
  if (const Driver* d = driver()) d->cuGetErrorString(r, &msg);
  fail(std::string(what) + " failed: " + (msg ? msg : "CUDA error " + std::to_string(r)));
}

}  // namespace alk::cuda
