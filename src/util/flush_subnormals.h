// flush_subnormals.h: FlushSubnormals, a scope in which this thread's SSE/AVX arithmetic flushes
// subnormal results to zero and reads subnormal inputs as zero (MXCSR's FTZ and DAZ bits).
//
// Every operation on a subnormal float (below 1.2e-38; double: 2.2e-308) takes a microcode assist on
// Intel and AMD cores, tens to hundreds of cycles. Two places meet them in training: mhc's Sinkhorn
// reverse (the alternating normalizations damp the parts of a gradient the projection removes
// geometrically, below 1e-38 within the 39 steps of 20 iterations: it ran 2.3 times slower) and
// AdamW's second moments of gradients below 1e-19 (train/optimizer.cpp). What is flushed moves no
// parameter: AdamW divides by sqrt(v) + eps, eps >= 1e-8 far above a subnormal's square root.
#pragma once

#include <xmmintrin.h>

namespace normlab {

class FlushSubnormals {
 public:
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtzDaz); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  static constexpr unsigned kFtzDaz = 0x8040;  // FTZ (bit 15) | DAZ (bit 6)
  unsigned saved_;
};

}  // namespace normlab
