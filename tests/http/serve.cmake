# Tests of the serve helper's parts of src/http: API keys and the admin routes (health,
# readiness, metrics, models, tokenize). Unit tests: no model file, no sockets.
pier_add_test(NAME http_api_keys_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/api_keys_test.cpp
  LIBS pier_http_api nlohmann_json::nlohmann_json)
if(TARGET pier_metrics)
  pier_add_test(NAME http_admin_routes_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/admin_routes_test.cpp
    LIBS pier_http_api pier_metrics nlohmann_json::nlohmann_json)
endif()
