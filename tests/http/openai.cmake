# Tests of the OpenAI-compatible API (openai_request, openai_stream, openai_api).
pier_add_test(NAME openai_request_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/openai_request_test.cpp
          ${CMAKE_CURRENT_SOURCE_DIR}/openai_request_mutation_test.cpp
          ${CMAKE_CURRENT_SOURCE_DIR}/tool_calls_test.cpp
          ${CMAKE_CURRENT_SOURCE_DIR}/chat_messages_test.cpp
          ${CMAKE_CURRENT_SOURCE_DIR}/responses_test.cpp
          ${CMAKE_CURRENT_SOURCE_DIR}/json_shape_test.cpp
  LIBS pier_http_api nlohmann_json::nlohmann_json LABELS unit)
if(NOT PIER_UNIT_TESTS_ONLY)
  pier_add_test(NAME openai_api_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/openai_api_test.cpp
    LIBS pier_http_api nlohmann_json::nlohmann_json LABELS model)
endif()
pier_add_test(NAME openai_stream_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/openai_stream_test.cpp
  LIBS pier_http_api nlohmann_json::nlohmann_json LABELS unit)
