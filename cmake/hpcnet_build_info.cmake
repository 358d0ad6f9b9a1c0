# Build facts for `hpcnet --version` and `hpcnet info` (src/cli/build_info.h), compiled into the
# hpcnet command: build_config.cpp is configured here, on every cmake run; git_revision.cpp is
# written by cmake/git_revision.cmake on every build and changes only when the revision does.
string(TOUPPER "${CMAKE_BUILD_TYPE}" _hpcnet_bt)
set(HPCNET_BI_FLAGS_VAR CMAKE_CXX_FLAGS_${_hpcnet_bt})
set(HPCNET_BI_FLAGS_TYPE "${CMAKE_CXX_FLAGS_${_hpcnet_bt}}")
if(HPCNET_NATIVE)
  set(HPCNET_BI_NATIVE true)
else()
  set(HPCNET_BI_NATIVE false)
endif()
if(HPCNET_MPI)
  set(HPCNET_BI_MPI true)
else()
  set(HPCNET_BI_MPI false)
endif()
if(HPCNET_CUDA)
  set(HPCNET_BI_CUDA "nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES}")
else()
  set(HPCNET_BI_CUDA "off")
endif()
set(_hpcnet_gen ${CMAKE_BINARY_DIR}/generated/cli)
configure_file(${CMAKE_SOURCE_DIR}/src/cli/build_config.cpp.in ${_hpcnet_gen}/build_config.cpp
               @ONLY)
add_custom_target(hpcnet_git_revision
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
          -DOUTPUT=${_hpcnet_gen}/git_revision.cpp -P ${CMAKE_SOURCE_DIR}/cmake/git_revision.cmake
  BYPRODUCTS ${_hpcnet_gen}/git_revision.cpp
  COMMENT "git revision for hpcnet --version" VERBATIM)
target_sources(hpcnet PRIVATE ${_hpcnet_gen}/build_config.cpp ${_hpcnet_gen}/git_revision.cpp)
add_dependencies(hpcnet hpcnet_git_revision)
