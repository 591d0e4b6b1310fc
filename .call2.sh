export CXXFLAGS=-Wno-error=dangling-reference TILENORM_GPU_TESTS=quick TAIL_LINES=6
export TESTS_REGEX='clusters|backward_runtime|gpu.layer_norm$|gpu.backward.layer_norm$|gpu.rms_norm$'
export BENCH_SHAPES=4094x16392,5436x12345,3355x20000,1677x40000,671x100000,2048x32768,1024x65536,512x131072,256x262144
export PROFILE_OPS=layer_norm PROFILE_PASS=forward PROFILE_SHAPE=4094x16392
scripts/device-run tests bench baseline profile
OUT=$OUT/sub PROFILE_SHAPE=4096x16384 scripts/device-run profile >/dev/null 2>&1
grep -E "Duration|Executed Ipc|Issue Slots Busy|DRAM Throughput|Registers Per|Achieved Occ|Theoretical Occ|Stall|Warp Cycles Per Issued|Executed Instructions  " $OUT/logs.txt $OUT/sub/logs.txt | grep -v "^--" | head -60
