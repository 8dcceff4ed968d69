#include "algorithms/streaming_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define HVDLITE_STREAMING_STORES 1
#endif

namespace hvdlite {

void copy_streaming(void* dst, const void* src, size_t bytes) {
#ifdef HVDLITE_STREAMING_STORES
  constexpr size_t kLine = 64;
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // Ordinary stores up to the destination's first line boundary, whole lines streamed, the
  // rest ordinary again: a streamed partial line would cost more than it saves.
  const size_t head = std::min(bytes, (kLine - reinterpret_cast<uintptr_t>(d) % kLine) % kLine);
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  const size_t lines = bytes / kLine * kLine;
  for (size_t i = 0; i < lines; i += kLine) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + lines, s + lines, bytes - lines);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void streaming_fence() {
#ifdef HVDLITE_STREAMING_STORES
  _mm_sfence();
#endif
}

}  // namespace hvdlite
