# pier_add_test(NAME name SOURCES a.cpp ... LIBS lib ... [LABELS unit|model|gpu ...])
#
# Labels: `unit` tests need no model file and run again under the sanitizers in CI;
# `model` tests load the default model; `gpu` tests need a CUDA device and skip
# with a printed reason without one.
function(pier_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${T_NAME} PRIVATE
    PIER_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    PIER_DEFAULT_MODEL_PATH="${PIER_DEFAULT_MODELS_DIR}/${PIER_DEFAULT_MODEL_FILE}"
    PIER_MODELS_DIR="${PIER_DEFAULT_MODELS_DIR}")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT 600)
  # Model tests run the forward pass on every core: ctest must not run another test beside
  # them (two spinning thread pools on two cores slow each other down many times over).
  if("model" IN_LIST T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()
