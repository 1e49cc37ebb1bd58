// The CUDA backend's surface for code that queues CUDA work of its own in order with alk's:
// NCCL collectives (alk::dist), a user's kernels (PyTorch: torch.cuda.current_stream,
// torch.cuda.Stream and Event). Handles are the driver's (a CUstream) as void*; device
// memory's addresses come from Device::address. Defined only where alk was built with the
// CUDA backend (ALK_HAVE_CUDA); each call raises alk::Error when cuda:`index` cannot be opened.
#pragma once

namespace alk::cuda {

// The stream alk queues the work of cuda:`index` on, with the device's context made current on
// the calling thread: work queued there runs in order with alk's kernels and copies.
void* stream(int index);

// A second stream of cuda:`index` (made on first use, kept for the process) for work that runs
// beside alk's: an all-reduce of the gradients the backward has made while it makes the rest.
// The device's context is made current on the calling thread.
void* side_stream(int index);
// Work queued on the side stream from now on starts after everything alk has queued so far.
void side_stream_waits_for_alk(int index);
// alk's work queued from now on starts after everything queued on the side stream so far.
void alk_waits_for_side_stream(int index);

}  // namespace alk::cuda
