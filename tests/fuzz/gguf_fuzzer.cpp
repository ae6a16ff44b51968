// libFuzzer target: any byte string as a GGUF image.
//
// Opens the input with GgufFile::FromMemory and, when it opens, walks every
// metadata accessor, reads the model info and dequantizes the first row of each
// tensor (tests/model/gguf_walk.h). Built only with -DPIER_FUZZ=ON and clang:
//   build-fuzz/tests/fuzz/gguf_fuzzer -max_total_time=60 tests/fuzz/corpus/gguf
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "model/gguf_file.h"
#include "model/gguf_walk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an exact-size buffer so ASan reports any read past the end.
  std::unique_ptr<uint8_t[]> bytes(new uint8_t[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(bytes.get(), data, size);
  auto file = pier::model::GgufFile::FromMemory(bytes.get(), size, "fuzz.gguf");
  if (!file.ok()) return 0;
  volatile uint64_t sink = pier::model::testing::WalkGgufFile(**file);
  (void)sink;
  return 0;
}
