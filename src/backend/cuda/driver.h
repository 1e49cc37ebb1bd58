// The CUDA driver API and NVRTC, loaded at run time: libcuda.so.1 and libnvrtc are
// opened with dlopen, so alk links neither, needs no CUDA headers to build, and every
// binary starts on machines without a GPU or a toolkit. The handful of types and
// constants the backend uses are declared here from the driver API's documentation
// (their values are part of the stable ABI).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace alk::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr int CU_STREAM_NON_BLOCKING = 1;
constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;
constexpr int CU_EVENT_DISABLE_TIMING = 2;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
constexpr int CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// X(name, return, arguments): the entry points, by their exported (versioned) names.
#define ALK_CUDA_DRIVER_FNS(X)                                                                      \
  X(cuInit, CUresult, (unsigned))                                                                   \
  X(cuDriverGetVersion, CUresult, (int*))                                                           \
  X(cuGetErrorString, CUresult, (CUresult, const char**))                                           \
  X(cuDeviceGetCount, CUresult, (int*))                                                             \
  X(cuDeviceGet, CUresult, (CUdevice*, int))                                                        \
  X(cuDeviceGetName, CUresult, (char*, int, CUdevice))                                              \
  X(cuDeviceGetAttribute, CUresult, (int*, int, CUdevice))                                          \
  X(cuDeviceTotalMem_v2, CUresult, (size_t*, CUdevice))                                             \
  X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext*, CUdevice))                                     \
  X(cuCtxSetCurrent, CUresult, (CUcontext))                                                         \
  X(cuMemGetInfo_v2, CUresult, (size_t*, size_t*))                                                  \
  X(cuMemAlloc_v2, CUresult, (CUdeviceptr*, size_t))                                                \
  X(cuMemFree_v2, CUresult, (CUdeviceptr))                                                          \
  X(cuMemHostAlloc, CUresult, (void**, size_t, unsigned))                                           \
  X(cuMemFreeHost, CUresult, (void*))                                                               \
  X(cuMemcpyHtoDAsync_v2, CUresult, (CUdeviceptr, const void*, size_t, CUstream))                   \
  X(cuMemcpyDtoHAsync_v2, CUresult, (void*, CUdeviceptr, size_t, CUstream))                         \
  X(cuMemcpyDtoDAsync_v2, CUresult, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                   \
  X(cuMemsetD8Async, CUresult, (CUdeviceptr, unsigned char, size_t, CUstream))                      \
  X(cuStreamCreate, CUresult, (CUstream*, unsigned))                                                \
  X(cuStreamSynchronize, CUresult, (CUstream))                                                      \
  X(cuEventCreate, CUresult, (CUevent*, unsigned))                                                  \
  X(cuEventRecord, CUresult, (CUevent, CUstream))                                                   \
  X(cuEventSynchronize, CUresult, (CUevent))                                                        \
  X(cuStreamWaitEvent, CUresult, (CUstream, CUevent, unsigned))                                     \
  X(cuEventQuery, CUresult, (CUevent))                                                              \
  X(cuEventDestroy_v2, CUresult, (CUevent))                                                         \
  X(cuEventElapsedTime, CUresult, (float*, CUevent, CUevent))                                        \
  X(cuModuleLoadData, CUresult, (CUmodule*, const void*))                                           \
  X(cuModuleGetFunction, CUresult, (CUfunction*, CUmodule, const char*))                            \
  X(cuFuncSetAttribute, CUresult, (CUfunction, int, int))                                           \
  X(cuLaunchKernel, CUresult,                                                                       \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**)) \
  X(cuStreamBeginCapture_v2, CUresult, (CUstream, int))                                             \
  X(cuStreamEndCapture, CUresult, (CUstream, CUgraph*))                                             \
  X(cuGraphInstantiateWithFlags, CUresult, (CUgraphExec*, CUgraph, unsigned long long))             \
  X(cuGraphLaunch, CUresult, (CUgraphExec, CUstream))                                               \
  X(cuGraphExecDestroy, CUresult, (CUgraphExec))                                                    \
  X(cuGraphDestroy, CUresult, (CUgraph))                                                           \
  X(cuTensorMapEncodeTiled, CUresult,                                                               \
    (void*, int, unsigned, void*, const uint64_t*, const uint64_t*, const unsigned*, const unsigned*, int, int, int, int))

#define ALK_NVRTC_FNS(X)                                                                            \
  X(nvrtcVersion, nvrtcResult, (int*, int*))                                                        \
  X(nvrtcGetErrorString, const char*, (nvrtcResult))                                                \
  X(nvrtcCreateProgram, nvrtcResult,                                                                \
    (nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*))         \
  X(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram*))                                              \
  X(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram, int, const char* const*))                      \
  X(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram, size_t*))                                   \
  X(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram, char*))                                         \
  X(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram, size_t*))                                        \
  X(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram, char*))

struct Driver {
#define ALK_X(name, ret, args) ret(*name) args = nullptr;
  ALK_CUDA_DRIVER_FNS(ALK_X)
#undef ALK_X
};
struct Nvrtc {
#define ALK_X(name, ret, args) ret(*name) args = nullptr;
  ALK_NVRTC_FNS(ALK_X)
#undef ALK_X
  std::string include_dir;  // the toolkit's include/ (cuda_fp16.h, cuda_bf16.h), "" if none found
};

// The driver, initialized (cuInit), or nullptr; why_not() then says why.
const Driver* driver();
// NVRTC, or nullptr (why_not() says why). Needs no driver: kernels compile without a GPU.
const Nvrtc* nvrtc();
std::string driver_unavailable_reason();
std::string nvrtc_unavailable_reason();

[[noreturn]] void fail(const std::string& message);  // alk::Error("cuda", message)
// Throws alk::Error naming the call and the driver's message when r is not CUDA_SUCCESS.
void check(CUresult r, const char* what);

}  // namespace alk::cuda
