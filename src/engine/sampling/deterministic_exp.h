// DeterministicExp: e^x computed with the same bits on every machine.
//
// The sampler turns logits into probabilities with it. libm's exp() may differ in the last bit
// between library versions and between the FMA and non-FMA code paths glibc picks at run time,
// which could move a sampled token across a boundary on another machine. This one uses only
// IEEE-754 additions, multiplications and ldexp in a fixed order (its file is compiled with
// -ffp-contract=off so no FMA is fused in). Within about 2 ulps of libm for normal results.
// Thread-safety: a pure function.
#pragma once

namespace pier::sampling {

// e^x for any double; 0 below about -745, +inf above about 709.78, NaN for NaN.
double DeterministicExp(double x);

}  // namespace pier::sampling
