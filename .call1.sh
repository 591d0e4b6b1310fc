export CXXFLAGS=-Wno-error=dangling-reference
export TAIL_LINES=3
scripts/device-run none > /tmp/build.txt 2>&1 || { echo build failed; exit 1; }
ncu=/usr/local/cuda/bin/ncu; command -v ncu >/dev/null && ncu=$(command -v ncu)
prof() {  # name kernel-regex shape op pass
  timeout 120 $ncu -k "regex:^$2\$" --launch-skip 3 --launch-count 1 --section SourceCounters --section InstructionStats \
    --section WarpStateStats --section SpeedOfLight --import-source no -o /tmp/$1 -f \
    build/bench/tilenorm-bench --shapes $3 --ops $4 --pass $5 --repeats 1 --no-tuning-db >> $OUT/details.txt 2>&1
  $ncu -i /tmp/$1.ncu-rep --page source --csv --print-source sass > $OUT/$1-sass.csv 2>&1
  $ncu -i /tmp/$1.ncu-rep --page details >> $OUT/details.txt 2>&1
}
prof rmsfwd tilenorm_rms_norm 1024x65536 rms_norm forward
prof lnfwd tilenorm_layer_norm 1024x65536 layer_norm forward
prof rmsbwd tilenorm_rms_norm_backward 8192x8192 rms_norm backward
prof lnbwd tilenorm_layer_norm_backward 8192x8192 layer_norm backward
rm -f $OUT/logs.txt; ls -la $OUT
