# check_layers.cmake - proves the engine's layer rule (docs/architecture.md):
# each layer is compiled with only the include paths it may use, so a file
# that includes another layer's header does not compile. Run by ctest
# (test_layers) as `cmake -P` with CC, ENGINE, KERNELS, OUT and the layers'
# include lists (INC_SHARED, INC_CORE, INC_CPU, INC_KERNELS; '|' separated).
# Each probe is a small C file in OUT compiled with -fsyntax-only and one
# layer's paths: the allowed includes must compile (so a failure below is
# the include, not the setup), the forbidden ones must fail with "No such
# file". Then no engine source may include a quoted path with a folder in
# it ("../cpu/policy.h", "cpu/policy.h"), the one way around the paths.
cmake_minimum_required(VERSION 3.20)
set(failures 0)

function(probe layer expect header)
  string(MAKE_C_IDENTIFIER "${layer}_${header}" id)
  set(src ${OUT}/${id}.c)
  file(WRITE ${src} "#include \"${header}\"\nint mr_layer_probe;\n")
  set(flags "")
  string(REPLACE "|" ";" dirs "${INC_${layer}}")
  foreach(d ${dirs})
    list(APPEND flags "-I${d}")
  endforeach()
  execute_process(COMMAND ${CC} -std=c11 -fsyntax-only -fopenmp ${flags} ${src}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(expect STREQUAL "ok" AND NOT rc EQUAL 0)
    message(SEND_ERROR "${layer} should reach \"${header}\" but does not:\n${out}")
    math(EXPR f "${failures} + 1")
    set(failures ${f} PARENT_SCOPE)
  elseif(expect STREQUAL "refused")
    if(rc EQUAL 0 OR NOT out MATCHES "No such file")
      message(SEND_ERROR "${layer} reaches \"${header}\": the layer rule is not enforced\n${out}")
      math(EXPR f "${failures} + 1")
      set(failures ${f} PARENT_SCOPE)
    else()
      message(STATUS "${layer} including \"${header}\": refused, as it must be")
    endif()
  else()
    message(STATUS "${layer} including \"${header}\": compiles")
  endif()
endfunction()

file(MAKE_DIRECTORY ${OUT})
# shared: below everything
probe(SHARED ok net_layout.h)
probe(SHARED ok ppo_loss_math.h)
probe(SHARED refused backend.h)      # core's interface
probe(SHARED refused trainer.h)      # core
probe(SHARED refused policy.h)       # cpu
probe(SHARED refused policy_cuda.h)  # kernels
# core: shared, the interface and its own files; no backend's
probe(CORE ok trainer.h)
probe(CORE ok backend.h)
probe(CORE refused policy.h)         # cpu/policy.h
probe(CORE refused ppo.h)            # cpu/ppo.h
probe(CORE refused env_cpu.h)        # cpu/env_cpu.h
probe(CORE refused policy_cuda.h)    # kernels/policy_cuda.h
# cpu: shared and the interface; not core's internals, not kernels
probe(CPU ok backend.h)
probe(CPU ok policy.h)
probe(CPU refused trainer.h)
probe(CPU refused env.h)
probe(CPU refused policy_cuda.h)
# kernels: shared and the interface; not core's internals, not cpu
probe(KERNELS ok backend.h)
probe(KERNELS ok policy_math.h)
probe(KERNELS refused trainer.h)
probe(KERNELS refused policy.h)
probe(KERNELS refused ppo.h)

# no quoted include names a folder
file(GLOB_RECURSE sources ${ENGINE}/*.c ${ENGINE}/*.h ${KERNELS}/*.c ${KERNELS}/*.h ${KERNELS}/*.cu)
foreach(f ${sources})
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]*/")
  if(lines)
    message(SEND_ERROR "${f} includes through a folder: ${lines}")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()

if(failures GREATER 0)
  message(FATAL_ERROR "layer rule: ${failures} failure(s)")
endif()
message(STATUS "layer rule holds")
