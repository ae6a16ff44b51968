# Tests of the Prometheus registry and the serving metrics of `pier serve`.
pier_add_test(NAME metrics_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/registry_test.cpp ${CMAKE_CURRENT_LIST_DIR}/serving_metrics_test.cpp
  LIBS pier_metrics LABELS unit)
target_include_directories(metrics_test PRIVATE ${PROJECT_SOURCE_DIR}/tests)
