# Runs the command on the check file's first line ("// RUN: tilefuse ARGS") and pipes its
# output through FileCheck.
file(STRINGS ${CHECK} run_line LIMIT_COUNT 1 REGEX "^// RUN: tilefuse ")
string(REGEX REPLACE "^// RUN: tilefuse " "" args "${run_line}")
separate_arguments(args UNIX_COMMAND "${args}")
execute_process(COMMAND ${TOOL} ${args} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tilefuse ${args} exited ${rc}")
endif()
file(WRITE ${OUT} "${out}")
execute_process(COMMAND ${FILECHECK} ${CHECK} --input-file ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "FileCheck ${CHECK} failed")
endif()
