// Copies whose destination is not read again soon: the results a large shared-memory
// all-reduce copies out of the area into a buffer larger than the caches.
//
// Note [streaming stores]
// An ordinary store first reads the line it writes (read for ownership): copying a piece of
// a 64 MiB result into place reads that piece of the destination from memory only to
// overwrite it, a third more memory traffic than the copy needs. A streaming
// (non-temporal) store writes whole lines without reading them and without keeping them in
// the cache, as glibc's memcpy does for copies larger than the cache. Streaming stores are
// not ordered with later stores: streaming_fence() (sfence) must follow them before anyone
// else, a peer, a copy engine or the thread the result is handed to, may read the
// destination. Where the processor has none (not x86-64), both are memcpy and nothing.
#pragma once

#include <cstddef>

namespace hvdlite {

void copy_streaming(void* dst, const void* src, size_t bytes);

// Orders every streaming store before it with every store after it.
void streaming_fence();

}  // namespace hvdlite
