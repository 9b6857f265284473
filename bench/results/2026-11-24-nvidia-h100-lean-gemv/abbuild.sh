#!/bin/sh
# Same-call A/B: bench binaries linked against build/libshardline.a (new) and a
# copy with the named .cu objects compiled from commit $1 (main).
# usage: sh .dev/abbuild.sh <commit> kernels/quant.cu ...  -> .dev/ab.tgz (ab/bench-{main,new})
set -e
C=$1; shift
W=/tmp/abold; rm -rf $W; mkdir -p $W/src $W/obj $W/ab
git archive $C kernels common node parallel | tar x -C $W/src
cp build/libshardline.a $W/lib.a
F="-std=c++17 -O3 -lineinfo -gencode arch=compute_90,code=sm_90 -I. -Icommon -Ikernels -Inode -Iparallel -Xcompiler -fPIC --expt-relaxed-constexpr -DSL_HAVE_CUDA"
for f in "$@"; do
	(cd $W/src && /usr/local/cuda/bin/nvcc $F -c $f -o $W/obj/$(basename $f).o) &
done
wait
ar r $W/lib.a $W/obj/*.o
L="-lcjson -lzmq -lprotobuf-c -lonig -lutf8proc -lmicrohttpd -L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi -fopenmp -lm -lpthread -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcublasLt -lcublas -lcurand -lnccl -lcudart -lstdc++ -ldl -lrt"
gcc build/obj/bench/decode.o $W/lib.a -o $W/ab/bench-main $L
gcc build/obj/bench/decode.o build/libshardline.a -o $W/ab/bench-new $L
rm -f .dev/ab.tgz && tar czf .dev/ab.tgz -C $W ab
ls -la .dev/ab.tgz
