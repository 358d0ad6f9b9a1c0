# hpcnet as an installed library: libhpcnet.a and libhpcnet.so linked from hpcnet_lib's one set of
# position-independent objects, the public headers, hpcnetConfig.cmake (imported targets
# hpcnet::hpcnet and hpcnet::hpcnet_static) and hpcnet.pc. `cmake --install build --prefix P`.
# Invariant: what the installed targets need is derived from what hpcnet_lib links, read at the
# end of configuration (cmake_language(DEFER)), so a dependency added anywhere lands in the package.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Third-party libraries whose headers the public headers include (include/hpcnet/io.h and task.h
# include nlohmann/json): every consumer compiles against them. The rest are private to the library.
set(HPCNET_PUBLIC_DEPS nlohmann_json::nlohmann_json)
set(HPCNET_PC_REQUIRES nlohmann_json)  # their pkg-config names

# 0.x: every minor version may change the ABI, so it is part of the SONAME (libhpcnet.so.0.1).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(HPCNET_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
else()
  set(HPCNET_SOVERSION ${PROJECT_VERSION_MAJOR})
endif()

add_library(hpcnet_static STATIC)
add_library(hpcnet_shared SHARED)
set_target_properties(hpcnet_static PROPERTIES OUTPUT_NAME hpcnet EXPORT_NAME hpcnet_static)
set_target_properties(hpcnet_shared PROPERTIES OUTPUT_NAME hpcnet EXPORT_NAME hpcnet
  VERSION ${PROJECT_VERSION} SOVERSION ${HPCNET_SOVERSION}
  # Installed, it still finds what it was linked against outside the system's paths (CUDA, MPI).
  INSTALL_RPATH_USE_LINK_PATH ON)
# In the build tree both carry everything hpcnet_lib does (its objects, src/ headers, every
# dependency): the hpcnet command, the tests and the benchmarks link the static one.
target_link_libraries(hpcnet_static PUBLIC $<BUILD_INTERFACE:hpcnet_lib>)
target_link_libraries(hpcnet_shared PRIVATE $<BUILD_INTERFACE:hpcnet_lib>)
foreach(t hpcnet_static hpcnet_shared)
  target_include_directories(${t} INTERFACE
    $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${t} PUBLIC ${HPCNET_PUBLIC_DEPS})
  target_compile_features(${t} INTERFACE cxx_std_20)  # the headers use C++20
endforeach()

install(TARGETS hpcnet_shared hpcnet_static EXPORT hpcnetTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/hpcnet DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
set(HPCNET_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hpcnet)
install(EXPORT hpcnetTargets NAMESPACE hpcnet:: DESTINATION ${HPCNET_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/hpcnetConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/hpcnetConfig.cmake ${CMAKE_BINARY_DIR}/hpcnetConfigVersion.cmake
        DESTINATION ${HPCNET_CMAKE_DIR})
install(FILES ${CMAKE_BINARY_DIR}/hpcnet.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# find_package arguments beyond the name, for packages that need them.
set(_hpcnet_find_args_MPI "COMPONENTS CXX")
# Namespaces that are not their package's name.
set(_hpcnet_package_of_CUDA CUDAToolkit)

# The package whose find_package() made imported target `tgt`, or "" when none is known: a
# config-mode package whose files declare it (add_library(tgt ...)), else the one named like the
# target's namespace (PNG::PNG -> PNG, protobuf::libprotobuf -> Protobuf). PkgConfig:: targets are
# made by pkg_check_modules, not by a package.
function(_hpcnet_package_of tgt out)
  set(${out} "" PARENT_SCOPE)
  get_property(found GLOBAL PROPERTY PACKAGES_FOUND)
  string(REGEX REPLACE "([][+.*()^$?|\\])" "\\\\\\1" tgt_re "${tgt}")
  foreach(pkg IN LISTS found)
    if(${pkg}_DIR AND IS_DIRECTORY "${${pkg}_DIR}")
      file(GLOB files "${${pkg}_DIR}/*.cmake")
      foreach(f IN LISTS files)
        file(STRINGS "${f}" hit REGEX "add_library\\(${tgt_re} ")
        if(hit)
          set(${out} ${pkg} PARENT_SCOPE)
          return()
        endif()
      endforeach()
    endif()
  endforeach()
  if(NOT tgt MATCHES "^([^:]+)::")
    return()
  endif()
  set(ns ${CMAKE_MATCH_1})
  if(ns STREQUAL "PkgConfig")
    return()
  endif()
  if(DEFINED _hpcnet_package_of_${ns})
    set(${out} ${_hpcnet_package_of_${ns}} PARENT_SCOPE)
    return()
  endif()
  string(TOLOWER ${ns} ns_lower)
  foreach(pkg IN LISTS found)
    string(TOLOWER ${pkg} pkg_lower)
    if(pkg_lower STREQUAL ns_lower)
      set(${out} ${pkg} PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

# Appends to ${out} what linking `item` puts on a link line: files, -l and -pthread style flags,
# following imported targets' INTERFACE_LINK_LIBRARIES (pkg-config's Libs.private, and the
# static target's stand-in for a target no package recreates).
function(_hpcnet_link_items item out)
  set(items ${${out}})
  if(item MATCHES "^\\$<LINK_ONLY:(.*)>$")
    set(item ${CMAKE_MATCH_1})
  endif()
  if(item MATCHES "^\\$<" OR item MATCHES "^::@")  # other generator expressions; scope markers
    return()
  endif()
  if(TARGET ${item})
    get_target_property(real ${item} ALIASED_TARGET)
    if(real)
      set(item ${real})
    endif()
    get_property(seen GLOBAL PROPERTY _hpcnet_link_seen)
    if(item IN_LIST seen)
      return()
    endif()
    set_property(GLOBAL APPEND PROPERTY _hpcnet_link_seen ${item})
    get_target_property(type ${item} TYPE)
    get_target_property(imported ${item} IMPORTED)
    if(imported AND NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(cfgs ${item} IMPORTED_CONFIGURATIONS)
      set(loc "")
      foreach(cfg IN LISTS cfgs)  # the Release build's file where there are several
        string(TOUPPER "${cfg}" cfg)
        get_target_property(l ${item} IMPORTED_LOCATION_${cfg})
        if(l AND (NOT loc OR cfg STREQUAL "RELEASE"))
          set(loc ${l})
        endif()
      endforeach()
      if(NOT loc)
        get_target_property(loc ${item} IMPORTED_LOCATION)
      endif()
      if(loc)
        list(APPEND items ${loc})
      endif()
    elseif(NOT imported AND type MATCHES "STATIC_LIBRARY|SHARED_LIBRARY")
      list(APPEND items -l$<TARGET_FILE_BASE_NAME:${item}>)
    endif()
    get_target_property(deps ${item} INTERFACE_LINK_LIBRARIES)
    foreach(d IN LISTS deps)
      if(d)
        _hpcnet_link_items(${d} items)
      endif()
    endforeach()
  elseif(item MATCHES "^-" OR IS_ABSOLUTE "${item}")
    list(APPEND items ${item})
  elseif(item)
    list(APPEND items -l${item})
  endif()
  set(${out} ${items} PARENT_SCOPE)
endfunction()

# Runs once the whole project is configured: gives hpcnet::hpcnet_static hpcnet_lib's link
# dependencies, writes hpcnetConfig.cmake with a find_dependency() for each package they come
# from, and hpcnet.pc with Libs.private.
function(_hpcnet_finish_package)
  get_target_property(libs hpcnet_lib LINK_LIBRARIES)
  get_target_property(ilibs hpcnet_lib INTERFACE_LINK_LIBRARIES)
  foreach(l IN LISTS ilibs)  # INTERFACE-only items are in INTERFACE_LINK_LIBRARIES alone
    if(l MATCHES "^\\$<LINK_ONLY:(.*)>$")
      set(l ${CMAKE_MATCH_1})
    endif()
    list(APPEND libs ${l})
  endforeach()
  list(REMOVE_DUPLICATES libs)
  set(packages "")
  set(pc_private "")
  set_property(GLOBAL PROPERTY _hpcnet_link_seen "")
  foreach(item IN LISTS libs)
    if(NOT item OR item MATCHES "^::@")
      continue()
    endif()
    _hpcnet_link_items(${item} pc_private)
    set(exported ${item})
    if(TARGET ${item})
      get_target_property(imported ${item} IMPORTED)
      get_target_property(type ${item} TYPE)
      if(NOT imported)
        # A library built here: installed beside libhpcnet.a (the shared library contains it).
        if(NOT type MATCHES "STATIC_LIBRARY|SHARED_LIBRARY|INTERFACE_LIBRARY")
          message(FATAL_ERROR "hpcnet_lib links ${item} (${type}), which the installed package "
                  "cannot carry: link it into hpcnet_lib's objects instead")
        endif()
        install(TARGETS ${item} EXPORT hpcnetTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
                LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
      else()
        _hpcnet_package_of(${item} pkg)
        if(pkg)
          list(APPEND packages ${pkg})
        else()
          # No package makes this target again for a consumer: link what it resolves to.
          set(files "")
          set_property(GLOBAL PROPERTY _hpcnet_link_seen "")
          _hpcnet_link_items(${item} files)
          set(exported ${files})
          message(STATUS "hpcnet package: ${item} exported as ${files}")
        endif()
      endif()
    endif()
    foreach(e IN LISTS exported)
      target_link_libraries(hpcnet_static INTERFACE "$<INSTALL_INTERFACE:$<LINK_ONLY:${e}>>")
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES packages)
  set(HPCNET_FIND_DEPENDENCIES "")
  foreach(pkg IN LISTS packages)
    string(APPEND HPCNET_FIND_DEPENDENCIES "find_dependency(${pkg} ${_hpcnet_find_args_${pkg}})\n")
  endforeach()
  configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/hpcnetConfig.cmake.in
                                ${CMAKE_BINARY_DIR}/hpcnetConfig.cmake
                                INSTALL_DESTINATION ${HPCNET_CMAKE_DIR})

  # pkg-config: relocatable (prefix from the .pc file's own place), shared by default; `pkg-config
  # --static` adds what libhpcnet.a needs.
  file(RELATIVE_PATH pc_to_prefix "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" pc_to_prefix "${pc_to_prefix}")
  list(REMOVE_DUPLICATES pc_private)
  list(JOIN pc_private " " HPCNET_PC_LIBS_PRIVATE)
  list(JOIN HPCNET_PC_REQUIRES ", " pc_requires)
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/hpcnet.pc CONTENT
"prefix=\${pcfiledir}/${pc_to_prefix}
libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}
includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}

Name: hpcnet
Description: Train convolutional networks on CPUs (oneDNN) and NVIDIA GPUs (cuDNN); C++20 headers
Version: ${PROJECT_VERSION}
Requires: ${pc_requires}
Libs: -L\${libdir} -lhpcnet
Libs.private: ${HPCNET_PC_LIBS_PRIVATE}
Cflags: -I\${includedir}
")
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _hpcnet_finish_package)
