#include "engine/sampling/deterministic_exp.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace pier::sampling {
namespace {

// ln 2 split so that k * kLn2Hi is exact for |k| < 2^11 (kLn2Hi has 32 trailing zero bits).
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kInvLn2 = 1.44269504088896338700e+00;
constexpr double kOverflow = 7.09782712893383973096e+02;
constexpr double kUnderflow = -7.45133219101941108420e+02;

constexpr int kDegree = 13;  // Estrin's scheme below is written out for this degree

// 1/n! for n = 0..kDegree, each rounded once from an exact integer n!.
constexpr std::array<double, kDegree + 1> kInvFactorial = [] {
  std::array<double, kDegree + 1> inv{};
  double factorial = 1.0;
  for (int n = 0; n <= kDegree; ++n) {
    if (n > 1) factorial *= n;
    inv[n] = 1.0 / factorial;
  }
  return inv;
}();

}  // namespace

double DeterministicExp(double x) {
  if (std::isnan(x)) return x;
  if (x > kOverflow) return std::numeric_limits<double>::infinity();
  if (x < kUnderflow) return 0.0;
  // x = k ln2 + r with |r| <= ln2 / 2; adding and removing 1.5 * 2^52 rounds to the nearest
  // integer (ties to even) in the default rounding mode, without a libm call.
  constexpr double kRound = 0x1.8p52;
  const double k = (x * kInvLn2 + kRound) - kRound;
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  // e^r by its Taylor series to r^13 (the next term is below 4e-18 relative), evaluated by
  // Estrin's scheme: a fixed order of operations with a short dependency chain.
  const double* c = kInvFactorial.data();
  const double r2 = r * r;
  const double r4 = r2 * r2;
  const double r8 = r4 * r4;
  const double a0 = c[0] + c[1] * r, a1 = c[2] + c[3] * r, a2 = c[4] + c[5] * r;
  const double a3 = c[6] + c[7] * r, a4 = c[8] + c[9] * r, a5 = c[10] + c[11] * r;
  const double a6 = c[12] + c[13] * r;
  const double b0 = a0 + a1 * r2, b1 = a2 + a3 * r2, b2 = a4 + a5 * r2;
  const double p = (b0 + b1 * r4) + (b2 + a6 * r4) * r8;
  // p * 2^k: exact when 2^k is a normal double; ldexp (also exact IEEE) for the rare rest.
  const int ki = static_cast<int>(k);
  if (ki < -1022 || ki > 1023) return std::ldexp(p, ki);
  return p * std::bit_cast<double>(static_cast<uint64_t>(ki + 1023) << 52);
}

}  // namespace pier::sampling
