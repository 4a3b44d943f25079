// rng.h: a small, fully specified random number generator (xoshiro256** seeded by splitmix64), so
// that seeded runs give the same numbers with any compiler and standard library.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace normlab {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t stream = 0) {
    uint64_t sm = seed ^ (stream * 0xd1b54a32d192ed03ULL);
    for (auto& w : s_) w = splitmix64(sm);
  }
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }  // [0, 1)
  // integer in [0, n)
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next_u64() % n; }
  // The whole generator state, for checkpoints: a generator set to a saved state draws exactly
  // the numbers the saved one would have drawn next.
  std::array<uint64_t, 4> state() const { return {s_[0], s_[1], s_[2], s_[3]}; }
  void set_state(const std::array<uint64_t, 4>& s) {
    for (int i = 0; i < 4; i++) s_[i] = s[size_t(i)];
  }
  double normal() {  // Box-Muller, one value per call
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace normlab
