# ctest script: install layerinit into a scratch prefix, move the prefix (so nothing can point back at
# where it was installed), check that no installed file names the build or source tree, then
# configure, build and run examples/consumer against the moved prefix with find_package.
# Arguments: BIN (build dir), SRC (source dir), WORK.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BIN} --prefix ${WORK}/staging RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
file(RENAME ${WORK}/staging ${WORK}/prefix)

# The installed tree stands alone: no path into the build or source tree, headers only under
# include/layerinit/, nothing called detail.
file(GLOB_RECURSE installed LIST_DIRECTORIES false RELATIVE ${WORK}/prefix ${WORK}/prefix/*)
foreach(f IN LISTS installed)
  if(f MATCHES "\\.(hpp|h|cmake)$")
    file(READ ${WORK}/prefix/${f} text)
    foreach(dir ${BIN} ${SRC})
      string(FIND "${text}" "${dir}" at)
      if(NOT at EQUAL -1)
        message(FATAL_ERROR "installed ${f} names ${dir}")
      endif()
    endforeach()
  endif()
  if(f MATCHES "\\.hpp$" AND NOT f MATCHES "^include/layerinit/")
    message(FATAL_ERROR "installed header outside include/layerinit/: ${f}")
  endif()
  if(f MATCHES "detail")
    message(FATAL_ERROR "installed an internal file: ${f}")
  endif()
endforeach()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC}/examples/consumer -B ${WORK}/build -DCMAKE_PREFIX_PATH=${WORK}/prefix
                        -DCMAKE_BUILD_TYPE=Release RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${WORK}/build/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()
