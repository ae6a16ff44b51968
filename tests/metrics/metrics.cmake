# Tests of the Prometheus registry and exposition (the serving metrics are tests/serving's).
pier_add_test(NAME metrics_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/registry_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/exposition_reader_test.cpp
  LIBS pier_metrics LABELS unit)
target_include_directories(metrics_test PRIVATE ${PROJECT_SOURCE_DIR}/tests)

# GPU telemetry through a stand-in libnvidia-ml.so.1, loaded by the same dlopen name as
# NVIDIA's: ctest puts the stand-in's folder on LD_LIBRARY_PATH. A second build without the
# _v2 entry points plays a driver too old to use.
add_library(fake_nvml SHARED ${CMAKE_CURRENT_LIST_DIR}/fake_nvml.cpp)
set_target_properties(fake_nvml PROPERTIES PREFIX "lib" OUTPUT_NAME "nvidia-ml" SUFFIX ".so.1"
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake_nvml)
add_library(fake_nvml_old SHARED ${CMAKE_CURRENT_LIST_DIR}/fake_nvml.cpp)
target_compile_definitions(fake_nvml_old PRIVATE FAKE_NVML_OLD)
set_target_properties(fake_nvml_old PROPERTIES PREFIX "lib" OUTPUT_NAME "nvidia-ml" SUFFIX ".so.1"
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake_nvml_old)
set(PIER_FAKE_NVML_DIR ${CMAKE_CURRENT_BINARY_DIR}/fake_nvml CACHE INTERNAL
  "The stand-in libnvidia-ml.so.1's folder (GPU telemetry tests)")
pier_add_test(NAME gpu_telemetry_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpu_telemetry_test.cpp
  LIBS pier_metrics LABELS unit)
target_include_directories(gpu_telemetry_test PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_compile_definitions(gpu_telemetry_test PRIVATE
  FAKE_NVML_OLD_PATH="${CMAKE_CURRENT_BINARY_DIR}/fake_nvml_old/libnvidia-ml.so.1")
add_dependencies(gpu_telemetry_test fake_nvml fake_nvml_old)
set_tests_properties(gpu_telemetry_test PROPERTIES
  ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake_nvml")

# NVIDIA's own NVML through Pier's declarations, on a GPU machine (scripts/gpu-check carries
# it there): only the loader and Status, so the binary needs nothing beyond glibc.
add_executable(nvml_gpu_test ${CMAKE_CURRENT_LIST_DIR}/nvml_gpu_test.cpp
  ${PROJECT_SOURCE_DIR}/src/metrics/nvml_library.cpp ${PROJECT_SOURCE_DIR}/src/common/status.cpp)
target_include_directories(nvml_gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(nvml_gpu_test PRIVATE GTest::gtest GTest::gtest_main ${CMAKE_DL_LIBS})
add_test(NAME nvml_gpu_test COMMAND nvml_gpu_test)
set_tests_properties(nvml_gpu_test PROPERTIES LABELS gpu
  SKIP_REGULAR_EXPRESSION "no usable GPU, skipped")
