"""Pure-Python copy of hpcnet's RNG (include/hpcnet/rng.h, src/core/rng.cpp).

xoshiro256** seeded through splitmix64, Fisher-Yates permutations and mix_seed, bit for bit
as the C++ computes them, so Python scripts in bench/ reproduce hpcnet's data splits exactly.
All arithmetic is on Python ints masked to 64 bits (uint64_t wrap-around).

Run `python3 bench/hpcnet_rng.py` to print the reference values that the C++ check compares.
"""

import math

MASK64 = (1 << 64) - 1

# The seed and stream hpcnet uses for the train/validation split.
SPLIT_SEED = 0x5EED5EED
SPLIT_STREAM = 0


def _splitmix64(x):
    """One splitmix64 step from state x. Returns (new_state, output)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return x, z ^ (z >> 31)


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK64


class Rng:
    """xoshiro256**; same sequence as hpcnet::Rng(seed, stream)."""

    __slots__ = ("s",)

    def __init__(self, seed=0, stream=0):
        x = (seed ^ ((stream * 0xD1B54A32D192ED03) & MASK64)) & MASK64
        s = []
        for _ in range(4):
            x, v = _splitmix64(x)
            s.append(v)
        self.s = s

    def next_u64(self):
        s = self.s
        result = (_rotl((s[1] * 5) & MASK64, 7) * 9) & MASK64
        t = (s[1] << 17) & MASK64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = _rotl(s[3], 45)
        return result

    def uniform(self):
        """Uniform in [0, 1) with 53 random bits."""
        return (self.next_u64() >> 11) * (2.0 ** -53)

    def randint(self, n):
        """Integer in [0, n): next_u64() % n."""
        return self.next_u64() % n

    def normal(self):
        """Box-Muller, as Rng::normal."""
        u1 = self.uniform()
        u2 = self.uniform()
        if u1 < 1e-300:
            u1 = 1e-300
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def state(self):
        return tuple(self.s)

    def set_state(self, s):
        self.s = list(s)


def random_permutation(n, rng):
    """Fisher-Yates: for i = n-1 down to 1, swap(p[i], p[randint(i + 1)])."""
    p = list(range(n))
    nxt = rng.next_u64
    for i in range(n - 1, 0, -1):
        j = nxt() % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def mix_seed(a, b, c=0):
    """Mixes several 64-bit values into one seed (splitmix64 chain)."""
    _, h = _splitmix64(a & MASK64)
    _, h = _splitmix64(h ^ (b & MASK64))
    _, h = _splitmix64(h ^ (c & MASK64))
    return h


def split_train_val(n_total, n_val):
    """hpcnet's train/validation split of indices 0..n_total-1.

    perm = random_permutation(n_total, Rng(0x5EED5EED, 0)); the last n_val entries are the
    validation set. Returns (train, val), each sorted ascending.
    """
    if not 0 <= n_val <= n_total:
        raise ValueError(f"n_val={n_val} must be in [0, n_total={n_total}]")
    perm = random_permutation(n_total, Rng(SPLIT_SEED, SPLIT_STREAM))
    n_train = n_total - n_val
    return sorted(perm[:n_train]), sorted(perm[n_train:])


def _reference_lines():
    """The values the C++ cross-check prints, one per line."""
    lines = []
    r = Rng(0, 0)
    lines.append("rng(0,0): " + " ".join(str(r.next_u64()) for _ in range(5)))
    r = Rng(42, 7)
    lines.append("rng(42,7): " + " ".join(str(r.next_u64()) for _ in range(5)))
    r = Rng(5, 0)
    lines.append("perm(10,seed5): " + " ".join(str(v) for v in random_permutation(10, r)))
    lines.append("mix_seed(1,2,3): " + str(mix_seed(1, 2, 3)))
    lines.append("mix_seed(1,2): " + str(mix_seed(1, 2)))
    r = Rng(123, 1)
    lines.append("uniform(123,1): " + " ".join("%.17g" % r.uniform() for _ in range(3)))
    r = Rng(SPLIT_SEED, SPLIT_STREAM)
    lines.append("perm(50000,split)[:8]: " +
                 " ".join(str(v) for v in random_permutation(50000, r)[:8]))
    _, val = split_train_val(50000, 5000)
    lines.append("val(50000,5000)[:8]: " + " ".join(str(v) for v in val[:8]))
    return lines


if __name__ == "__main__":
    print("\n".join(_reference_lines()))
