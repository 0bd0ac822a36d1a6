# Shared build settings for the project's own targets.

# Warnings are errors only where the project asks for it (scripts/test, i.e. `make
# test`, turns INFERA_WERROR on): a user's or a distribution's build with another
# compiler or build type must not fail on a new warning.
option(INFERA_WERROR "Treat warnings of the project's own targets as errors" OFF)
set(INFERA_WARNINGS -Wall -Wextra)
if(INFERA_WERROR)
  list(APPEND INFERA_WARNINGS -Werror)
endif()
list(APPEND INFERA_WARNINGS -Wno-unused-parameter)
# Unity builds (scripts/test turns CMAKE_UNITY_BUILD on: a cold build of the tree
# costs about half as much CPU when heavy headers are parsed once per batch of
# sources). g++ then sees each source's anonymous-namespace types as if they came
# from a header included by the unity file and warns on every class that holds one
# (-Wsubobject-linkage); those types are still local to one object file.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND INFERA_WARNINGS -Wno-subobject-linkage)
endif()
# g++ 12 at -O3 reports false -Wrestrict on `"literal" + std::string` (GCC bug 105329;
# seen in src/template and src/tokenizer in a Release build).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND INFERA_WARNINGS $<$<CONFIG:Release>:-Wno-restrict>)
endif()

if(INFERA_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
# The fuzz configuration instruments every target, not only each fuzzer's own file: the
# libraries under test (tokenizer, template, events, discovery, core) need libFuzzer's
# coverage counters to guide the search and ASan+UBSan to report what it finds.
# (-fsanitize=fuzzer-no-link: coverage without libFuzzer's main; the fuzzers link it.)
if(INFERA_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(INFERA_TSAN)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()

# infera_library(NAME SOURCES ... DEPS ...): a library with our warnings.
function(infera_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${INFERA_WARNINGS})
  target_link_libraries(${name} PUBLIC ${A_DEPS})
endfunction()

# INFERA_UNIT_TESTS=OFF leaves the unit tests (infera_test) out of a configuration:
# scripts/test builds and runs them in the ASan+UBSan build only, and its Release build
# (binaries, benches, integration tests) skips about a third of the tree's compile
# (doc/build.md). A test marked UNSANITIZED is built anyway: it checks something only an
# uninstrumented build can (e.g. heap accounting through mallinfo2, which reads 0 under
# the sanitizers' allocators), so it must run in the Release build too.
option(INFERA_UNIT_TESTS "Build the unit tests (infera_test)" ON)

# infera_test(NAME SOURCES ... DEPS ... [LABELS ...] [UNSANITIZED]): a GoogleTest binary,
# one ctest each.
function(infera_test name)
  cmake_parse_arguments(A "UNSANITIZED" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT INFERA_UNIT_TESTS AND NOT A_UNSANITIZED)
    return()
  endif()
  add_executable(${name} ${A_SOURCES})
  target_compile_options(${name} PRIVATE ${INFERA_WARNINGS})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${A_TIMEOUT} LABELS "unit;${A_LABELS}")
endfunction()

# Adds every immediate subfolder of the current folder that has a CMakeLists.txt
# (apps/<binary>, bench/<area>, fuzz/<area>, tests/integration/<area>), so areas
# can be added without editing a shared list.
function(infera_add_subfolders)
  file(GLOB children RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT children)
  foreach(child ${children})
    if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${child}
       AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${child}/CMakeLists.txt)
      add_subdirectory(${child})
    endif()
  endforeach()
endfunction()

# infera_integration_test(NAME COMMAND ... [TIMEOUT s]): a test that starts real processes.
function(infera_integration_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "COMMAND" ${ARGN})
  add_test(NAME ${name} COMMAND ${A_COMMAND})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  # RUN_SERIAL: integration tests bind ports and start servers; keep them apart so a
  # 2-core CI machine does not time them out.
  set_tests_properties(${name} PROPERTIES TIMEOUT ${A_TIMEOUT} LABELS integration RUN_SERIAL TRUE)
endfunction()

# infera_fuzz(NAME SOURCES ... DEPS ... CORPUS dir [SECONDS n]): a libFuzzer target,
# run by ctest for a bounded time on a scratch copy of its seed corpus.
function(infera_fuzz name)
  cmake_parse_arguments(A "" "CORPUS;SECONDS" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_compile_options(${name} PRIVATE ${INFERA_WARNINGS} -fsanitize=fuzzer,address,undefined)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${name} PRIVATE ${A_DEPS})
  if(NOT A_SECONDS)
    set(A_SECONDS 20)
  endif()
  set(work ${CMAKE_CURRENT_BINARY_DIR}/${name}_corpus)
  add_test(NAME ${name}
    COMMAND sh -c "rm -rf '${work}' && mkdir -p '${work}' && cp -r '${A_CORPUS}'/. '${work}'/ && \
exec '$<TARGET_FILE:${name}>' -max_total_time=${A_SECONDS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 '${work}'")
  set_tests_properties(${name} PROPERTIES TIMEOUT 600 LABELS fuzz)
endfunction()

# Precompiled headers (INFERA_PCH, off by default and in scripts/test: measured in
# session 8, it saved about 1 % of a cold build's CPU, doc/build.md). One PCH of
# Boost.Asio/Beast, nlohmann/json, spdlog and absl (cmake/infera_pch.h), built once per
# build directory by the carrier target infera_pch and reused (REUSE_FROM) by every
# target named in infera_use_pch. (A PCH saves reading and declaring those headers, not
# instantiating their templates, which -fsyntax-only also counts.) The consumers share the carrier's flags: same
# build type and sanitizers (one build directory), and the spdlog/fmt macros, which
# they all get from infera_http or infera_discovery. g++ silently ignores a PCH whose
# flags do not match (and parses the headers instead), so a mismatch costs time, not
# correctness; -Winvalid-pch shows it. At -O3, g++ 12 inlines differently with the PCH
# and reports false -Wstringop-overflow/-Warray-bounds on `std::string + ...` in
# src/router/admin/admin_views.cc (the GCC 12 family of -Wrestrict above), and the PCH saves
# next to nothing there (doc/build.md). Kept as an option to re-measure when the
# network-facing targets grow.
option(INFERA_PCH "Precompile the heavy third-party headers of the network-facing targets" OFF)

# infera_use_pch(TARGET ...): the named targets that exist in this configuration use
# the shared PCH. The unit-only configurations (fuzz) have none of them.
function(infera_use_pch)
  if(NOT INFERA_PCH)
    return()
  endif()
  find_package(absl REQUIRED)
  find_package(spdlog REQUIRED)
  find_package(nlohmann_json REQUIRED)
  set(pch_flags)
  # g++ 12's false -Wmismatched-new-delete on Asio's coroutine frames is silenced by a
  # pragma in src/http/asio.h; from a PCH, Asio's code comes before that pragma, so the
  # consumers turn the warning off on the command line instead.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND pch_flags -Wno-mismatched-new-delete)
  endif()
  foreach(t ${ARGN})
    if(NOT TARGET ${t})
      continue()
    endif()
    if(NOT TARGET infera_pch)
      file(WRITE ${PROJECT_BINARY_DIR}/infera_pch.cc "// The carrier of the shared PCH (cmake/infera.cmake).\n")
      add_library(infera_pch OBJECT ${PROJECT_BINARY_DIR}/infera_pch.cc)
      target_compile_options(infera_pch PRIVATE ${INFERA_WARNINGS} ${pch_flags})
      target_link_libraries(infera_pch PRIVATE absl::status absl::statusor absl::flat_hash_map
                            spdlog::spdlog nlohmann_json::nlohmann_json Threads::Threads)
      target_precompile_headers(infera_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/infera_pch.h)
    endif()
    target_precompile_headers(${t} REUSE_FROM infera_pch)
    target_compile_options(${t} PRIVATE ${pch_flags})
  endforeach()
endfunction()
