// Seedable, portable random numbers: xoshiro256** seeded through splitmix64. The sequence depends
// only on (seed, stream), never on the platform or the standard library, so data order and
// augmentation are reproducible everywhere (bench/ scripts reimplement it in Python).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace hpcnet {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0);
  uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits: (next_u64() >> 11) * 2^-53.
  double uniform();
  float uniform(float lo, float hi) { return lo + static_cast<float>(uniform()) * (hi - lo); }
  // Integer in [0, n): next_u64() % n.
  uint64_t randint(uint64_t n) { return next_u64() % n; }
  double normal();  // Box-Muller

  using State = std::array<uint64_t, 4>;
  State state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  State s_;
};

// Fisher-Yates permutation of 0..n-1: for i = n-1 down to 1, swap(p[i], p[randint(i + 1)]).
std::vector<int64_t> random_permutation(int64_t n, Rng& rng);

// Mixes several 64-bit values into one seed (splitmix64 chain), e.g. (seed, epoch, index).
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

}  // namespace hpcnet

namespace hpcnet {
// The process-wide generator used for parameter initialisation (torch.manual_seed's analogue).
Rng& default_rng();
void manual_seed(uint64_t seed);
}  // namespace hpcnet
