#!/bin/sh
# R2: where prefill time goes: ncu source-level on the prefill attention kernel (2048 GQA bench case),
# nsys timeline of a 7B fp8 2048-token prefill (gaps between kernels)
rm -rf bundle && tar xzf .dev/a.tgz || exit 3
export LD_LIBRARY_PATH=$PWD/bundle/lib PATH=$PATH:/usr/local/cuda/bin
R=/tmp/r2; rm -rf $R; mkdir -p $R; t0=$(date +%s)
which nsys ncu > $R/which.txt 2>&1; ls /opt/nvidia /usr/local/cuda/ >> $R/which.txt 2>&1; cat $R/which.txt
SL_ATTN_BENCH=prefill CK_RUN_CASE=bench timeout 200 ncu --clock-control none -k regex:attn_prefill --launch-skip 30 --launch-count 1 \
  --set full --import-source yes -o $R/attn bundle/tests/test_attention > $R/ncu-attn.log 2>&1
echo "ncu rc=$? [$(( $(date +%s) - t0 )) s]"
ncu -i $R/attn.ncu-rep --page details > $R/attn-details.txt 2>&1
ncu -i $R/attn.ncu-rep --page source --csv --print-source sass > $R/attn-sass.csv 2>&1
ncu -i $R/attn.ncu-rep --page source --csv --print-source cuda > $R/attn-cuda.csv 2>&1
ls -la $R; grep -E "Duration|Issue Slots|Eligible|Local Memory" $R/attn-details.txt
B=bundle/bin/shardline-bench
NSYS=$(which nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  timeout 200 $NSYS profile -o $R/pf --trace cuda,nvtx --force-overwrite true $B --shape 7b --quant fp8 --batches 1 --prompt 16 --new 2 --prefill 2048 > $R/nsys.log 2>&1
  echo "nsys rc=$? [$(( $(date +%s) - t0 )) s]"
  $NSYS stats --report cuda_gpu_trace --format csv --output $R/trace $R/pf.nsys-rep > /dev/null 2>&1
  ls -la $R | grep trace; rm -f $R/pf.sqlite
fi
rm -f $R/attn.ncu-rep.bak
tar czf $OUT/r2.tgz -C /tmp r2
