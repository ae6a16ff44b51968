// The one switch from a runtime weight type to a kernel instantiated for it, shared by the
// three quantized products (quant_matmul.cu, packed_matmul.cu, mma_matmul.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <type_traits>

#include "kernels/cuda/quant_dot.h"

namespace pier::cuda {

template <quant::QuantType kType>
using QuantTypeTag = std::integral_constant<quant::QuantType, kType>;

// launch(QuantTypeTag<T>{}) for the T that `type` names. A product that has no kernel for
// some types skips them itself (`if constexpr` on the tag), so none is instantiated for them.
// cudaErrorInvalidValue for a number that is no quant_dot.h type.
template <typename Launch>
cudaError_t DispatchQuantType(int32_t type, Launch&& launch) {
  using quant::QuantType;
  switch (static_cast<QuantType>(type)) {
    case QuantType::kQ4_0:
      return launch(QuantTypeTag<QuantType::kQ4_0>{});
    case QuantType::kQ4_1:
      return launch(QuantTypeTag<QuantType::kQ4_1>{});
    case QuantType::kQ5_0:
      return launch(QuantTypeTag<QuantType::kQ5_0>{});
    case QuantType::kQ5_1:
      return launch(QuantTypeTag<QuantType::kQ5_1>{});
    case QuantType::kQ8_0:
      return launch(QuantTypeTag<QuantType::kQ8_0>{});
    case QuantType::kQ4_K:
      return launch(QuantTypeTag<QuantType::kQ4_K>{});
    case QuantType::kQ5_K:
      return launch(QuantTypeTag<QuantType::kQ5_K>{});
    case QuantType::kQ6_K:
      return launch(QuantTypeTag<QuantType::kQ6_K>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace pier::cuda
