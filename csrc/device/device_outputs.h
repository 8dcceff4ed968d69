// Device outputs (NCCL all-gather, reduce-scatter, all-to-all with device_output=True) come
// from the device's buffer pool (DeviceContext) and go back to it when the caller's array
// dies, instead of a cudaMalloc per request and a cudaFree per array (cudaFree waits for the
// whole device).
//
// Note [device outputs back to the pool]
// A pooled buffer is handed out again only once the event it was released with has
// completed. Released by the caller, that event is recorded on the stream its result was
// handed to (Work.wait()'s stream, the framework's current stream at the wait; the legacy
// default stream when there was none): every kernel the caller queued on that stream before
// dropping the array has finished before hvdlite writes into it again. Work the caller queued
// on another stream must be ordered as with PyTorch's caching allocator (record_stream, or a
// synchronize). Never handed to a caller (a failed request), it was used by hvdlite's stream
// alone, which the event is recorded on instead.
#pragma once

#include <cstddef>

#include "device/cuda_runtime.h"
#include "device/device_context.h"
#include "engine/handle.h"

namespace hvdlite {
namespace device {

// `bytes` of device memory on `context`'s device, from its pool; an OutOfMemory Error where
// the pool has none and cudaMalloc fails even after the free buffers were given back to CUDA.
OwnedBuffer take_device_output(DeviceContext& context, size_t bytes);

// The stream `output` (a take_device_output buffer) was handed to; its release waits for it.
void device_output_consumed_on(void* output, Stream consumer);

// Back to the pool (the OwnedBuffer's free function, and the DLPack capsule's deleter).
void give_back_device_output(void* output);

// Buffers taken and not given back, and those given back ever: what the tests check.
struct DeviceOutputCounts {
  size_t live = 0;
  size_t given_back = 0;
};
DeviceOutputCounts device_output_counts();

}  // namespace device
}  // namespace hvdlite
