# Forward-pass benchmark (pp512 / tg128 tokens/s, peak RSS) of the CPU runner on the default
# model, in llama-bench's output layout; scripts/bench-forward-vs-llamacpp runs it beside
# llama.cpp's llama-bench. Included from bench/CMakeLists.txt.
add_executable(pier_bench_forward ${CMAKE_CURRENT_LIST_DIR}/forward_bench.cpp)
target_link_libraries(pier_bench_forward PRIVATE pier_serving CLI11::CLI11)
target_compile_definitions(pier_bench_forward PRIVATE
  PIER_DEFAULT_MODEL_PATH="${PIER_DEFAULT_MODELS_DIR}/${PIER_DEFAULT_MODEL_FILE}")
