# Runs COMMAND with the ;-separated ARGS and passes when it exits non-zero and its stderr contains
# EXPECT (a plain string, not a regular expression).
#   cmake -DCOMMAND=spyre-sim "-DARGS=gemm;--dtype;f8" "-DEXPECT=spyre-sim: ..." -P expect_failure.cmake
execute_process(COMMAND ${COMMAND} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a failure, but '${COMMAND} ${ARGS}' exited 0:\n${out}${err}")
endif()
string(FIND "${err}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "exit status ${rc}, but stderr does not contain '${EXPECT}':\n${err}")
endif()
message(STATUS "exit status ${rc}, as expected: ${err}")
