# CPU kernel benchmarks (MatMul on the default model's shapes, ThreadPool overhead).
# Included from bench/CMakeLists.txt after find_package(benchmark).
add_executable(pier_bench_kernels_cpu ${CMAKE_CURRENT_LIST_DIR}/kernels_cpu_bench.cpp)
target_link_libraries(pier_bench_kernels_cpu PRIVATE pier_kernels_cpu benchmark::benchmark)
