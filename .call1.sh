export CXXFLAGS=-Wno-error=dangling-reference
export TAIL_LINES=12
TILENORM_GPU_TESTS=quick TESTS_REGEX='clusters|backward_runtime|storage' TESTS_LIMIT=240 TUNE_LIMIT=300 \
TUNE_ARGS="--kernel layer_norm,rms_norm --pass forward,backward,recompute --dtype bf16 --n 32768,65536,131072,262144 --show-candidates" \
  scripts/device-run tests tune
