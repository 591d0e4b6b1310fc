# Compiles SOURCE and passes only if the compiler rejects it with the text given in the
# file's "// expect: <text>" line.
file(STRINGS "${SOURCE}" expect_lines REGEX "^// expect: ")
if(NOT expect_lines)
  message(FATAL_ERROR "${SOURCE} has no '// expect: <message>' line")
endif()
list(GET expect_lines 0 expect_line)
string(REGEX REPLACE "^// expect: " "" expected "${expect_line}")
set(include_flags)
foreach(dir IN LISTS INCLUDES)
  list(APPEND include_flags "-I${dir}")
endforeach()
execute_process(
  COMMAND ${COMPILER} -std=c++20 -fsyntax-only ${include_flags} ${SOURCE}
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must fail with: ${expected}")
endif()
string(FIND "${out}${err}" "${expected}" found)
if(found EQUAL -1)
  message(FATAL_ERROR "${SOURCE} failed without the expected message '${expected}'. Compiler said:\n${err}")
endif()
message(STATUS "rejected as expected: ${expected}")
