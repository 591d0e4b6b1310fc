export CXXFLAGS=-Wno-error=dangling-reference TILENORM_GPU_TESTS=quick TAIL_LINES=4
export TESTS_REGEX='clusters|gpu.layer_norm$|gpu.runtime$'
export BENCH_SHAPES=4094x16392,5436x12345,3355x20000,1677x40000,671x100000,4096x16384,2048x32768,23301x2880
export BENCH_PASSES=forward,backward
scripts/device-run tests bench
T=build/tools/tilenorm-tune
for spec in "layer_norm forward 40000 1677" "layer_norm forward 100000 671" "layer_norm forward 16392 4094" "layer_norm backward 40000 1677" "layer_norm forward 2880 23301"; do
  set -- $spec
  echo "=== tune $spec" | tee -a $OUT/tune.txt
  timeout 100 $T --quiet --show-candidates --kernel $1 --pass $2 --dtype bf16 --n $3 --m $4 --db $OUT/tuning.json >> $OUT/tune.txt 2>&1
  echo "exit $?"
done
