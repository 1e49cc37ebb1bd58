// include/alk/cuda.h over the backend's context: the device's stream, and one side stream per
// device joined to it by two events (re-recorded at each join: a wait takes the latest record).
#include <map>
#include <mutex>

#include "alk/cuda.h"
#include "backend/cuda/context.h"
#include "backend/cuda/driver.h"

namespace alk::cuda {
namespace {

struct SideStream {
  CUstream stream = nullptr;
  CUevent alk_done = nullptr;   // recorded on alk's stream, waited for by the side stream
  CUevent side_done = nullptr;  // recorded on the side stream, waited for by alk's
};

std::mutex g_mutex;
std::map<int, SideStream>& side_streams() {
  static auto* streams = new std::map<int, SideStream>;  // kept for the process, like the contexts
  return *streams;
}

// cuda:index's side stream, made on first use; the context is current on return.
SideStream& side(int index) {
  Context::get(index).make_current();
  std::lock_guard lock(g_mutex);
  SideStream& s = side_streams()[index];
  if (!s.stream) {
    const Driver* d = driver();
    check(d->cuStreamCreate(&s.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(d->cuEventCreate(&s.alk_done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    check(d->cuEventCreate(&s.side_done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  return s;
}

}  // namespace

void* stream(int index) {
  const Context& c = Context::get(index);
  c.make_current();
  return c.stream();
}

void* side_stream(int index) { return side(index).stream; }

void side_stream_waits_for_alk(int index) {
  SideStream& s = side(index);
  check(driver()->cuEventRecord(s.alk_done, Context::get(index).stream()), "cuEventRecord");
  check(driver()->cuStreamWaitEvent(s.stream, s.alk_done, 0), "cuStreamWaitEvent");
}

void alk_waits_for_side_stream(int index) {
  SideStream& s = side(index);
  check(driver()->cuEventRecord(s.side_done, s.stream), "cuEventRecord");
  check(driver()->cuStreamWaitEvent(Context::get(index).stream(), s.side_done, 0), "cuStreamWaitEvent");
}

}  // namespace alk::cuda
