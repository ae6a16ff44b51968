# Engine throughput benchmark (issue 5): offline continuous batching on the default model through
# a ModelHost, mixed request lengths at several concurrencies, or llama-batched-bench's fixed
# PP/TG layout; scripts/bench-engine-vs-llamacpp runs it beside llama-batched-bench. Included
# from bench/CMakeLists.txt after the pier_benchmarks target.
add_executable(pier_bench_engine ${CMAKE_CURRENT_LIST_DIR}/engine_throughput.cpp)
target_link_libraries(pier_bench_engine PRIVATE pier_serving CLI11::CLI11)
target_compile_definitions(pier_bench_engine PRIVATE
  PIER_DEFAULT_MODEL_PATH="${PIER_DEFAULT_MODELS_DIR}/${PIER_DEFAULT_MODEL_FILE}")
add_dependencies(pier_benchmarks pier_bench_engine)
