# Writes the device prelude into a C++ source file as one raw string literal.
file(READ "${INPUT}" text)
string(FIND "${text}" ")tnprelude\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )tnprelude\"")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT}; do not edit.\n"
  "namespace tilenorm::codegen {\n"
  "extern const char* const kDevicePrelude;\n"
  "const char* const kDevicePrelude = R\"tnprelude(${text})tnprelude\";\n"
  "}  // namespace tilenorm::codegen\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
