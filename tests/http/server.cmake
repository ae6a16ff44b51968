# HttpServer tests (real sockets on 127.0.0.1; no model file).
pier_add_test(NAME server_test
              SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_test.cpp
                      ${CMAKE_CURRENT_LIST_DIR}/server_shutdown_test.cpp
              LIBS pier_http_server pier_http_client LABELS unit)
pier_add_test(NAME server_deferred_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_deferred_test.cpp
              LIBS pier_http_server pier_http_client LABELS unit)
