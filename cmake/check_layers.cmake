# Include check for the layering (run by the build: the `layer_includes` target).
# Every public header belongs to a layer; a file may include headers of its own
# layer and of the layers below it, never above. Usage:
#   cmake -DROOT=<source dir> -P cmake/check_layers.cmake
# The table below is the design (docs/ARCHITECTURE.md); the link-level half of
# the check is GEARBOX_LAYER_CHECK in src/CMakeLists.txt.

cmake_minimum_required(VERSION 3.25)

# Layers, each followed by the layers it may use (transitively closed).
set(uses_common "")
set(uses_core common)
set(uses_stats core common)
set(uses_planners core common)
set(uses_policy stats planners core common)
set(uses_config policy stats planners core common)
set(uses_runtime policy stats planners core common)
set(uses_executor runtime policy stats planners core common)
set(uses_sim config executor runtime policy stats planners core common)
set(uses_backends executor runtime policy stats planners core common)
set(uses_umbrella sim config executor runtime policy stats planners core common)

# Public headers by layer (a header not listed fails the check: add it here).
set(headers_common export.h log.h)
set(headers_core gear_set.h options.h plan.h tensor_ops.h graph_key.h memory_probe.h
    host_memory_probe.h memory_model.h)
set(headers_stats stats.h)
set(headers_planners planners.h server_config.h)
set(headers_policy policy.h replan_policy.h update_record.h)
set(headers_config config.h)
set(headers_runtime runtime.h snapshot.h clock.h resource_pool.h update_worker.h)
set(headers_executor executor.h backend.h)
set(headers_sim replay.h replay_summary.h executed_replay.h trace.h trace_convert.h trace_synth.h)
set(headers_backends backends/builtin.h backends/onednn.h backends/cuda_graph.h)
set(headers_umbrella gearbox.h)
set(all_layers common core stats planners policy config runtime executor sim backends umbrella)

function(layer_of_header header out)
  foreach(layer IN LISTS all_layers)
    if(header IN_LIST headers_${layer})
      set(${out} ${layer} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

set(problems "")
function(check_file file layer)
  file(STRINGS ${file} lines REGEX "^#include \"(gearbox|src)/")
  set(allowed ${layer} ${uses_${layer}})
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^#include \"([^\"]*)\".*" "\\1" inc "${line}")
    if(inc MATCHES "^gearbox/(.*)$")
      layer_of_header(${CMAKE_MATCH_1} target)
      if(NOT target)
        list(APPEND problems "${file}: ${inc} is in no layer (cmake/check_layers.cmake)")
      endif()
    elseif(inc MATCHES "^src/([a-z]+)/")
      set(target ${CMAKE_MATCH_1})
      if(target STREQUAL "backends")
        set(target backends)
      endif()
    endif()
    if(target AND NOT target IN_LIST allowed)
      list(APPEND problems "${file}: layer ${layer} includes ${inc} of layer ${target}")
    endif()
  endforeach()
  set(problems ${problems} PARENT_SCOPE)
endfunction()

# Public headers.
file(GLOB_RECURSE public RELATIVE ${ROOT}/include/gearbox ${ROOT}/include/gearbox/*.h)
foreach(header IN LISTS public)
  layer_of_header(${header} layer)
  if(NOT layer)
    list(APPEND problems "include/gearbox/${header} is in no layer (cmake/check_layers.cmake)")
  else()
    check_file(${ROOT}/include/gearbox/${header} ${layer})
  endif()
endforeach()
# Sources: the folder names the layer.
file(GLOB_RECURSE sources ${ROOT}/src/*.cc ${ROOT}/src/*.h ${ROOT}/src/*.cu)
foreach(source IN LISTS sources)
  file(RELATIVE_PATH rel ${ROOT}/src ${source})
  string(REGEX REPLACE "/.*" "" layer "${rel}")
  check_file(${source} ${layer})
endforeach()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "layering: an include crosses an arrow the design forbids:\n  ${text}")
endif()
