# Installs the built library into a scratch prefix, runs the installed tools, then configures,
# builds and runs a tiny project that finds the package with find_package(tilenorm).
#
# The installed programs run with LD_LIBRARY_PATH unset and through the dynamic loader's
# --inhibit-cache, so /etc/ld.so.cache (ld.so.conf) is not consulted either: libtilenorm_* must be
# found through the binaries' RUNPATH ($ORIGIN/../lib) and NVRTC through the runtime library's
# RUNPATH to the CUDA toolkit. (libcuda.so.1 is dlopen'd only when a GPU is used, which none of
# these commands does.)
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(run_step)
  cmake_parse_arguments(STEP "" "EXPECT" "" ${ARGN})
  execute_process(COMMAND ${STEP_UNPARSED_ARGUMENTS}
    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "step failed (${result}): ${STEP_UNPARSED_ARGUMENTS}\n${out}\n${err}")
  endif()
  if(STEP_EXPECT AND NOT out MATCHES "${STEP_EXPECT}")
    message(FATAL_ERROR "step printed no '${STEP_EXPECT}': ${STEP_UNPARSED_ARGUMENTS}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

# The loader that runs a program without its cache, when this system has a glibc loader.
set(loader)
foreach(candidate /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-aarch64.so.1)
  if(EXISTS "${candidate}")
    set(loader "${candidate}" --inhibit-cache)
    break()
  endif()
endforeach()
set(isolated ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
  --unset=TILENORM_DISABLE_SHIPPED_DATABASES ${loader})

run_step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

set(bin "${prefix}/bin")
run_step(${isolated} "${bin}/tilenorm-dump" --help EXPECT "Usage: tilenorm-dump")
run_step(${isolated} "${bin}/tilenorm-dump" --version EXPECT "codegen version")
run_step(${isolated} "${bin}/tilenorm-dump" --kernel rms_norm --n 1024 --ir-only EXPECT "IR")
run_step(${isolated} "${bin}/tilenorm-tune" --help EXPECT "merge")
run_step(${isolated} "${bin}/tilenorm-tune" --version EXPECT "NVRTC [0-9]")
run_step(${isolated} "${bin}/tilenorm-tune" --dry-run --kernel rms_norm --dtype bf16 --n 4096
         --quiet EXPECT "candidates per shape")
run_step(${isolated} "${bin}/tilenorm-demo" --help EXPECT "Usage: tilenorm-demo")
# Without --db, show names the databases the runtime reads after the primary: the installed ones.
run_step(${CMAKE_COMMAND} -E env TILENORM_CACHE_DIR=${WORK_DIR}/cache --unset=TILENORM_TUNING_DB
         --unset=TILENORM_TUNING_DB_READONLY ${isolated} "${bin}/tilenorm-tune" show
         EXPECT "does not exist[^\n]*\nthen, at run time[^\n]*\n  shipped:   [^\n]*/prefix/share/tilenorm/databases/h100-bf16.json\n")

run_step(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/build" -G "${GENERATOR}"
         -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
# It compiles, and the installed library finds the databases under its own prefix.
run_step(${isolated} "${WORK_DIR}/build/consumer" EXPECT
  "consumer: compiled with NVRTC[^\n]*\nconsumer: [1-9][0-9]* shipped tuning databases in [^\n]*/prefix/share/tilenorm/databases\n")
