# Tests of the embedding front ends' helpers (embeddings_api.h, kserve_api.h,
# kserve_infer_request.h, kserve_token_ids.h).
pier_add_test(NAME http_embedding_inputs_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/embedding_inputs_test.cpp
          ${CMAKE_CURRENT_SOURCE_DIR}/kserve_token_ids_test.cpp
          ${CMAKE_CURRENT_SOURCE_DIR}/kserve_infer_request_test.cpp
  LIBS pier_http_api pier_model LABELS unit)
