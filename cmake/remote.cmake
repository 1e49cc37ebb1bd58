# The remote layer (src/remote, docs/remote.md): the operations registry over gRPC, the server
# behind `alk serve --ops` and the `remote:HOST:PORT/DEVICE` device. ON when Debian's gRPC C++
# (libgrpc++-dev, found by pkg-config), its protoc plugin (protobuf-compiler-grpc) and protobuf
# are found; without them alk builds and the remote device is absent. Included at the end of
# the top-level CMakeLists.txt, after the CLI and the tests exist, so it can link into them.
find_package(Protobuf QUIET)
pkg_check_modules(ALK_GRPCPP QUIET IMPORTED_TARGET grpc++)
find_program(ALK_GRPC_CPP_PLUGIN grpc_cpp_plugin)
set(ALK_REMOTE_FOUND OFF)
if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE AND ALK_GRPCPP_FOUND AND ALK_GRPC_CPP_PLUGIN)
  set(ALK_REMOTE_FOUND ON)
endif()
option(ALK_REMOTE "the remote device and ops server over gRPC (needs libgrpc++-dev, protobuf-compiler-grpc)" ${ALK_REMOTE_FOUND})
if(ALK_REMOTE AND NOT ALK_REMOTE_FOUND)
  message(FATAL_ERROR "ALK_REMOTE=ON but gRPC was not found (apt-get install libgrpc++-dev protobuf-compiler-grpc)")
endif()
if(ALK_REMOTE)
  message(STATUS "alk: remote ON (gRPC ${ALK_GRPCPP_VERSION}, ${ALK_GRPC_CPP_PLUGIN})")
  set(_gen ${CMAKE_BINARY_DIR}/generated/remote)
  file(MAKE_DIRECTORY ${_gen})
  set(_generated ${_gen}/remote.pb.cc ${_gen}/remote.pb.h ${_gen}/remote.grpc.pb.cc ${_gen}/remote.grpc.pb.h)
  add_custom_command(
    OUTPUT ${_generated}
    COMMAND ${Protobuf_PROTOC_EXECUTABLE} --proto_path=${CMAKE_SOURCE_DIR}/src/remote --cpp_out=${_gen}
            --grpc_out=${_gen} --plugin=protoc-gen-grpc=${ALK_GRPC_CPP_PLUGIN} ${CMAKE_SOURCE_DIR}/src/remote/remote.proto
    DEPENDS ${CMAKE_SOURCE_DIR}/src/remote/remote.proto
    COMMENT "protoc + grpc_cpp_plugin: src/remote/remote.proto")
  # Generated code is not held to alk's warnings.
  set_source_files_properties(${_gen}/remote.pb.cc ${_gen}/remote.grpc.pb.cc PROPERTIES COMPILE_OPTIONS "-w")
  file(GLOB ALK_REMOTE_SOURCES CONFIGURE_DEPENDS src/remote/*.cpp)
  alk_layer(alk_remote SOURCES ${ALK_REMOTE_SOURCES} ${_gen}/remote.pb.cc ${_gen}/remote.grpc.pb.cc DEPS alk_opspecs)
  # "remote/remote.pb.h" for the layer's files and for the tests that speak the protocol.
  target_include_directories(alk_remote SYSTEM PUBLIC $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/generated>)
  target_compile_definitions(alk_remote PUBLIC ALK_HAVE_REMOTE)
  target_link_libraries(alk_remote PUBLIC PkgConfig::ALK_GRPCPP ${Protobuf_LIBRARIES})
  # Whole archive: the device kind registers itself from a static initializer.
  set(_whole "$<LINK_LIBRARY:WHOLE_ARCHIVE,alk_remote>")
  target_link_libraries(alk_cli PRIVATE ${_whole})
  if(TARGET alk_tests)
    target_link_libraries(alk_tests PRIVATE ${_whole})
    # The op-table parity suite on remote:127.0.0.1:PORT/cpu against the local CPU, through a
    # server started as its own process (tests/remote/parity_on_remote.sh).
    add_test(NAME Remote.ParityOnRemoteCpu
             COMMAND bash ${CMAKE_SOURCE_DIR}/tests/remote/parity_on_remote.sh $<TARGET_FILE:alk_cli> $<TARGET_FILE:alk_tests>)
    set_tests_properties(Remote.ParityOnRemoteCpu PROPERTIES TIMEOUT 900)
    if(ALK_VULKAN)
      # A GPU backend as the peer (lavapipe here): its kernels, compiled on the server.
      add_test(NAME Remote.ParityOnRemoteVulkan
               COMMAND bash ${CMAKE_SOURCE_DIR}/tests/remote/parity_on_remote.sh $<TARGET_FILE:alk_cli>
                       $<TARGET_FILE:alk_tests> vulkan:0)
      set_tests_properties(Remote.ParityOnRemoteVulkan PROPERTIES TIMEOUT 900)
    endif()
    # `alk train --device remote:...` against `alk serve --ops` processes: the local losses and
    # weights bit for bit, a server killed mid-run, a clean SIGTERM.
    add_test(NAME Remote.TrainOnRemoteCpu
             COMMAND bash ${CMAKE_SOURCE_DIR}/tests/remote/train_on_remote.sh $<TARGET_FILE:alk_cli> ${CMAKE_SOURCE_DIR})
    set_tests_properties(Remote.TrainOnRemoteCpu PROPERTIES TIMEOUT 300)
  endif()
  if(TARGET alk_python)
    # alk.remote in Python: the layer goes into the extension (a shared object) too.
    set_target_properties(alk_remote PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_link_libraries(alk_python PRIVATE ${_whole})
  endif()
  if(TARGET fuzz_remote_messages)
    target_link_libraries(fuzz_remote_messages PRIVATE alk_remote)  # the decoders of the server's messages
  endif()
  add_executable(bench_remote EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/remote/bench_remote.cpp)
  target_link_libraries(bench_remote PRIVATE alk_internals ${_whole})
else()
  message(STATUS "alk: remote OFF (libgrpc++-dev / protobuf-compiler-grpc not found)")
endif()
