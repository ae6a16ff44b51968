# ONNX Runtime for tensor models (issue #44): headers at build time, the library at run time.
#
# scripts/bootstrap (step 3f) unpacks both into deps/onnxruntime/: include/ holds the C API
# headers of Debian 13's libonnxruntime-dev 1.21, lib/libonnxruntime.so.1 the library of the
# PyPI wheel onnxruntime 1.32 (the C API is append-only, so the older headers drive the newer
# library). Nothing links against the library: Pier loads it with dlopen, as it loads NVML and
# its CUDA plugin, so a build runs without it and only ONNX models are refused then.
#
# Gives:
#   pier_onnxruntime_headers  INTERFACE target: the headers as a SYSTEM include directory (their
#                             own warnings stay out of -Wall -Wextra -Werror)
#   PIER_ONNXRUNTIME_LIBRARY  absolute path of the library, for the code that dlopens it (as a
#                             compile definition of the same name: a build finds the library
#                             without environment variables)
set(PIER_ONNXRUNTIME_ROOT "${PROJECT_SOURCE_DIR}/deps/onnxruntime" CACHE PATH
    "ONNX Runtime's headers (include/) and library (lib/libonnxruntime.so.1): scripts/bootstrap")

# A relative path is the checkout's: the library's path must be absolute for dlopen.
get_filename_component(PIER_ONNXRUNTIME_ROOT "${PIER_ONNXRUNTIME_ROOT}" ABSOLUTE
                       BASE_DIR "${PROJECT_SOURCE_DIR}")
if(NOT EXISTS "${PIER_ONNXRUNTIME_ROOT}/include/onnxruntime_c_api.h")
  message(FATAL_ERROR "${PIER_ONNXRUNTIME_ROOT}/include/onnxruntime_c_api.h is missing: run "
                      "scripts/bootstrap (it fetches ONNX Runtime into deps/onnxruntime/), or "
                      "point PIER_ONNXRUNTIME_ROOT at a folder with include/ and lib/")
endif()

add_library(pier_onnxruntime_headers INTERFACE)
target_include_directories(pier_onnxruntime_headers SYSTEM INTERFACE
                           "${PIER_ONNXRUNTIME_ROOT}/include")

set(PIER_ONNXRUNTIME_LIBRARY "${PIER_ONNXRUNTIME_ROOT}/lib/libonnxruntime.so.1")
if(NOT EXISTS "${PIER_ONNXRUNTIME_LIBRARY}")
  message(STATUS "ONNX Runtime: ${PIER_ONNXRUNTIME_LIBRARY} is missing (run scripts/bootstrap); "
                 "ONNX models will be refused at run time unless --onnxruntime-library names one")
endif()
