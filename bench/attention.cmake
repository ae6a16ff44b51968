# Paged attention benchmarks (decode and prefill on SmolLM2-135M's attention shapes, f32,
# f16 and q8_0 K/V, 1 and 2 threads). Included from bench/CMakeLists.txt after
# find_package(benchmark).
add_executable(pier_bench_attention ${CMAKE_CURRENT_LIST_DIR}/attention_bench.cpp)
target_link_libraries(pier_bench_attention PRIVATE pier_engine pier_device benchmark::benchmark)
