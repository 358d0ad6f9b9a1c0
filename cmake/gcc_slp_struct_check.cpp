// Configure-time check (CMakeLists.txt): GCC 12.2 (Debian 12.2.0-14) at -O2 -march=native
// miscompiles a struct with constant member initialisers passed by value: its SLP vectoriser
// stores the argument's copy from the wrong vector register (here pad_h arrives as 1). Exit 0
// when the compiler gets it right, 1 when it shows the bug (the build then adds
// -fno-tree-slp-vectorize).
#include <cstdint>

struct Params {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
  bool flag = false;
};

__attribute__((noinline)) int64_t pads(Params p, int k) { return p.pad_h + p.pad_w + k * 0; }

int main() {
  Params p;
  const int64_t a = pads(p, 1);
  const int64_t b = pads(Params{}, 2);
  return a == 0 && b == 0 ? 0 : 1;
}
