# Writes a device prelude into a C++ source file as one raw string literal named VARIABLE.
file(READ "${INPUT}" text)
string(FIND "${text}" ")tnprelude\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )tnprelude\"")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT}; do not edit.\n"
  "namespace tilenorm::codegen {\n"
  "extern const char* const ${VARIABLE};\n"
  "const char* const ${VARIABLE} = R\"tnprelude(${text})tnprelude\";\n"
  "}  // namespace tilenorm::codegen\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
