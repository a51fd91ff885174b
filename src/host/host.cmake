# host.cmake - the `moonrl` executable: LuaJIT + libuv/luv + the engine.
#
# Included by the top CMakeLists.txt when src/host/*.c exist; it expects a
# `moonrl_engine` target. LuaJIT, luv and libuv are linked statically so the
# binary can be carried to a machine without them (the GPU machine has none).
# Symbols are exported (-Wl,-E) and the engine is linked whole, so LuaJIT's FFI
# (engine.lua) and C Lua modules loaded at run time find every mr_* and lua_*
# function in the executable itself. The Lua library (as bytecode) and the
# config files are compiled in as well, so a copied binary runs on its own.

get_filename_component(MOONRL_ROOT "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

set(MOONRL_LUAJIT_INCLUDE /usr/include/luajit-2.1 CACHE PATH "LuaJIT headers")
set(MOONRL_LUAJIT_LIB /usr/lib/x86_64-linux-gnu/libluajit-5.1.a CACHE FILEPATH "LuaJIT static library")
set(MOONRL_LUV_INCLUDE /usr/include/lua5.1/luv CACHE PATH "luv headers")
set(MOONRL_LUV_LIB /usr/lib/x86_64-linux-gnu/liblua5.1-luv.a CACHE FILEPATH "luv static library (Lua 5.1 ABI = LuaJIT's)")
find_library(MOONRL_UV_LIB NAMES libuv_a.a libuv.a uv_a PATHS /usr/lib/x86_64-linux-gnu)
# the dashboard's HTTP request parser (lua_http.c), linked statically like libuv
set(MOONRL_HTTP_PARSER_LIB /usr/lib/x86_64-linux-gnu/libhttp_parser.a CACHE FILEPATH "http_parser static library")
foreach(dep MOONRL_LUAJIT_LIB MOONRL_LUV_LIB MOONRL_UV_LIB MOONRL_HTTP_PARSER_LIB)
  if(NOT EXISTS "${${dep}}")
    message(FATAL_ERROR "moonrl host: ${dep} not found (${${dep}}): install libluajit-5.1-dev, lua-luv-dev, libuv1-dev and libhttp-parser-dev (make deps does)")
  endif()
endforeach()
if(NOT EXISTS "${MOONRL_LUAJIT_INCLUDE}/luajit.h" OR NOT EXISTS "${MOONRL_LUV_INCLUDE}/luv.h")
  message(FATAL_ERROR "moonrl host: LuaJIT or luv headers missing: install libluajit-5.1-dev and lua-luv-dev")
endif()

# ---- FFI declarations of moonrl.h, generated from the header itself.
# The preprocessor resolves every macro (MR_MAX_CONV, MR_ERROR_LEN) into the
# declarations LuaJIT's ffi.cdef understands; empty stddef.h/stdint.h stand in
# for the system ones because LuaJIT already knows size_t and the intN_t types.
set(MOONRL_CDEF_SHIM "${CMAKE_CURRENT_BINARY_DIR}/cdef_shim")
file(MAKE_DIRECTORY "${MOONRL_CDEF_SHIM}")
file(WRITE "${MOONRL_CDEF_SHIM}/stddef.h" "")
file(WRITE "${MOONRL_CDEF_SHIM}/stdint.h" "")
set(MOONRL_HEADER "${MOONRL_ROOT}/src/engine/moonrl.h")
set(MOONRL_CDEF_I "${CMAKE_CURRENT_BINARY_DIR}/moonrl_cdef.h")
set(MOONRL_CDEF_C "${CMAKE_CURRENT_BINARY_DIR}/moonrl_cdef.c")
add_custom_command(
  OUTPUT "${MOONRL_CDEF_I}" "${MOONRL_CDEF_C}"
  COMMAND ${CMAKE_C_COMPILER} -E -P -nostdinc -undef -x c -I "${MOONRL_CDEF_SHIM}"
          "${MOONRL_HEADER}" -o "${MOONRL_CDEF_I}"
  COMMAND ${CMAKE_COMMAND} -DIN=${MOONRL_CDEF_I} -DOUT=${MOONRL_CDEF_C}
          -P "${MOONRL_ROOT}/src/host/embed_cdef.cmake"
  DEPENDS "${MOONRL_HEADER}" "${MOONRL_ROOT}/src/engine/hot_keys.h" "${MOONRL_ROOT}/src/host/embed_cdef.cmake"
  COMMENT "moonrl: FFI declarations from moonrl.h"
  VERBATIM)

# ---- The Lua library and configs, embedded (embed_lua.lua; lua_library.c serves them).
# lua/moonrl/**.lua become LuaJIT bytecode with debug info, configs/**.lua stay
# text. The globs are re-checked by every build (CONFIGURE_DEPENDS), so an
# added or removed file re-runs CMake; the manifest it writes changes only
# then, and an edited file is a DEPENDS of its own: either re-embeds.
find_program(MOONRL_LUAJIT_EXE luajit)
if(NOT MOONRL_LUAJIT_EXE)
  message(FATAL_ERROR "moonrl host: the luajit executable (which compiles lua/moonrl to bytecode) "
                      "was not found: install luajit (make deps does)")
endif()
# Bytecode loads only into the LuaJIT it was made by (same version, same GC64
# choice): the executable and the linked library should be one release.
execute_process(COMMAND "${MOONRL_LUAJIT_EXE}" -v OUTPUT_VARIABLE MOONRL_LUAJIT_EXE_VERSION ERROR_QUIET)
file(STRINGS "${MOONRL_LUAJIT_INCLUDE}/luajit.h" MOONRL_LUAJIT_H_VERSION REGEX "#define LUAJIT_VERSION[ \t]")
string(REGEX MATCH "LuaJIT [^\"]+" MOONRL_LUAJIT_H_VERSION "${MOONRL_LUAJIT_H_VERSION}")
if(NOT MOONRL_LUAJIT_EXE_VERSION MATCHES "^${MOONRL_LUAJIT_H_VERSION} ")
  message(WARNING "moonrl host: ${MOONRL_LUAJIT_EXE} is '${MOONRL_LUAJIT_EXE_VERSION}' but the headers are "
                  "'${MOONRL_LUAJIT_H_VERSION}': the embedded bytecode may not load (install matching luajit and libluajit-5.1-dev)")
endif()
file(GLOB_RECURSE MOONRL_EMBED_FILES CONFIGURE_DEPENDS RELATIVE "${MOONRL_ROOT}"
  "${MOONRL_ROOT}/lua/moonrl/*.lua" "${MOONRL_ROOT}/configs/*.lua")
list(FILTER MOONRL_EMBED_FILES EXCLUDE REGEX "(^|/)\\.")   # editors' .#x.lua and other hidden files
list(SORT MOONRL_EMBED_FILES)
if(NOT "lua/moonrl/init.lua" IN_LIST MOONRL_EMBED_FILES)
  message(FATAL_ERROR "moonrl host: ${MOONRL_ROOT}/lua/moonrl/init.lua is missing: nothing to embed")
endif()
# The dashboard's page (lua/moonrl/dashboard/page/: HTML, JS, CSS, as text) and
# Debian's dygraphs chart library (libjs-dygraphs) under the same folder's name,
# so a copied binary serves the whole page without a network fetch.
file(GLOB MOONRL_PAGE_FILES CONFIGURE_DEPENDS RELATIVE "${MOONRL_ROOT}"
  "${MOONRL_ROOT}/lua/moonrl/dashboard/page/*.html" "${MOONRL_ROOT}/lua/moonrl/dashboard/page/*.js"
  "${MOONRL_ROOT}/lua/moonrl/dashboard/page/*.css")
list(SORT MOONRL_PAGE_FILES)
set(MOONRL_DYGRAPHS_DIR /usr/share/javascript/dygraphs CACHE PATH "libjs-dygraphs (the dashboard's charts)")
if(NOT EXISTS "${MOONRL_DYGRAPHS_DIR}/dygraph.min.js")
  message(FATAL_ERROR "moonrl host: ${MOONRL_DYGRAPHS_DIR}/dygraph.min.js not found: install libjs-dygraphs (make deps does)")
endif()
list(APPEND MOONRL_EMBED_FILES ${MOONRL_PAGE_FILES})
list(TRANSFORM MOONRL_EMBED_FILES PREPEND "${MOONRL_ROOT}/" OUTPUT_VARIABLE MOONRL_EMBED_DEPENDS)
list(APPEND MOONRL_EMBED_DEPENDS "${MOONRL_DYGRAPHS_DIR}/dygraph.min.js" "${MOONRL_DYGRAPHS_DIR}/dygraph.min.css")
list(APPEND MOONRL_EMBED_FILES
  "lua/moonrl/dashboard/page/dygraph.min.js\t${MOONRL_DYGRAPHS_DIR}/dygraph.min.js"
  "lua/moonrl/dashboard/page/dygraph.min.css\t${MOONRL_DYGRAPHS_DIR}/dygraph.min.css")
string(REPLACE ";" "\n" MOONRL_EMBED_LIST "${MOONRL_EMBED_FILES}")
set(MOONRL_EMBED_MANIFEST "${CMAKE_CURRENT_BINARY_DIR}/embedded_files.txt")
file(CONFIGURE OUTPUT "${MOONRL_EMBED_MANIFEST}" CONTENT "${MOONRL_EMBED_LIST}\n" @ONLY)
set(MOONRL_EMBED_C "${CMAKE_CURRENT_BINARY_DIR}/embedded_lua.c")
add_custom_command(
  OUTPUT "${MOONRL_EMBED_C}"
  COMMAND "${MOONRL_LUAJIT_EXE}" "${MOONRL_ROOT}/src/host/embed_lua.lua"
          "${MOONRL_ROOT}" "${MOONRL_EMBED_MANIFEST}" "${MOONRL_EMBED_C}"
  DEPENDS ${MOONRL_EMBED_DEPENDS} "${MOONRL_EMBED_MANIFEST}" "${MOONRL_ROOT}/src/host/embed_lua.lua"
  COMMENT "moonrl: embedding lua/moonrl (bytecode) and configs"
  VERBATIM)

file(GLOB MOONRL_HOST_SOURCES CONFIGURE_DEPENDS "${MOONRL_ROOT}/src/host/*.c")
list(FILTER MOONRL_HOST_SOURCES EXCLUDE REGEX "ranks_nccl\\.c$")   # below, where NCCL is
add_executable(moonrl ${MOONRL_HOST_SOURCES} "${MOONRL_CDEF_C}" "${MOONRL_EMBED_C}")
target_include_directories(moonrl PRIVATE
  "${MOONRL_ROOT}/src/host" "${MOONRL_LUAJIT_INCLUDE}" "${MOONRL_LUV_INCLUDE}")
target_compile_definitions(moonrl PRIVATE MOONRL_SOURCE_DIR="${MOONRL_ROOT}" _GNU_SOURCE)
# luv.h declares functions with the empty-parameter style; keep -Wextra quiet about it.
target_compile_options(moonrl PRIVATE -Wno-strict-prototypes)
target_link_libraries(moonrl PRIVATE
  -Wl,--whole-archive moonrl_engine "${MOONRL_LUAJIT_LIB}" -Wl,--no-whole-archive
  "${MOONRL_LUV_LIB}" "${MOONRL_UV_LIB}" "${MOONRL_HTTP_PARSER_LIB}"
  Threads::Threads ${CMAKE_DL_LIBS} m rt)
target_link_options(moonrl PRIVATE -Wl,-E)
# Data-parallel ranks (ranks.c) on Open MPI, when it is installed (make
# installs libopenmpi-dev); without it a launch of several tasks is refused.
find_package(MPI COMPONENTS C QUIET)
if(MPI_C_FOUND)
  target_link_libraries(moonrl PRIVATE MPI::MPI_C)
  target_compile_definitions(moonrl PRIVATE MOONRL_HAVE_MPI=1)
  # GPU ranks average their gradient on NCCL (ranks_nccl.c), where the CUDA
  # toolkit has it: compiled in CI, run on a lent GPU (bench/gpu_session.sh).
  if(CUDAToolkit_FOUND)
    # Its header at build time; the library is dlopen'ed when GPU ranks start.
    find_path(MOONRL_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(MOONRL_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
    if(MOONRL_NCCL_INCLUDE AND MOONRL_NCCL_LIB)
      get_filename_component(MOONRL_NCCL_LIBDIR "${MOONRL_NCCL_LIB}" DIRECTORY)
      target_sources(moonrl PRIVATE "${MOONRL_ROOT}/src/host/ranks_nccl.c")
      target_include_directories(moonrl PRIVATE "${MOONRL_NCCL_INCLUDE}" ${CUDAToolkit_INCLUDE_DIRS})
      target_compile_definitions(moonrl PRIVATE MOONRL_HAVE_NCCL=1 MR_NCCL_LIBDIR="${MOONRL_NCCL_LIBDIR}")
    else()
      message(STATUS "moonrl host: NCCL not found beside the CUDA toolkit: GPU ranks are refused")
    endif()
  endif()
endif()
set_target_properties(moonrl PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}")
