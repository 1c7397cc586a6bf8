#!/usr/bin/env bash
# build-llama.sh: llama-bench, llama-quantize and llama-server from the llama.cpp source that
# node-llama-cpp 3.21.1 bundles (llama/gitRelease.bundle), CPU only, with
# OpenMP, tuned for this machine (GGML_NATIVE), into a cache folder outside the
# repository. This is the same-run speed peer for scripts/bench-peer.sh: the
# prebuilt node-llama-cpp binary has no OpenMP and spins in a thread barrier at
# 2 threads, so it is no fair peer for multi-threaded figures.
#
#   scripts/peer/build-llama.sh [--out DIR] [--jobs N]
#
# DIR defaults to $LLAMA_BUILD_DIR or /work/llama-build. The source is cloned
# from the bundle under DIR/src; the binaries land in DIR/bin. A second run
# with the binaries present and the same source commit does nothing.
#
# Needs cmake (Debian: apt-get install -y cmake), a C/C++ compiler with OpenMP
# (gcc's libgomp), git, and node-llama-cpp installed in scripts/peer or at
# $PEER_DIR. It takes about 25 minutes on 2 cores, so it is not part of CI;
# run it in the background under `nice -n 19`.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${LLAMA_BUILD_DIR:-/work/llama-build}
jobs=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) echo "usage: $0 [--out DIR] [--jobs N]" >&2; exit 2 ;;
  esac
done
peer=${PEER_DIR:-scripts/peer}
bundle=$peer/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [ ! -f "$bundle" ]; then
  echo "no llama.cpp bundle at $bundle: install node-llama-cpp (scripts/peer/README.md) or set PEER_DIR" >&2
  exit 1
fi
for tool in cmake git cc c++; do
  command -v "$tool" > /dev/null || { echo "$tool is missing (Debian: apt-get install -y cmake build-essential git)" >&2; exit 1; }
done
case "$(cd "$(dirname "$out")" 2>/dev/null && pwd)/" in
  "$(pwd)"/*) echo "refusing to build inside the repository: $out" >&2; exit 1 ;;
esac

mkdir -p "$out"
src=$out/src
if [ ! -d "$src/.git" ]; then
  git clone --quiet "$bundle" "$src"
fi
commit=$(git -C "$src" rev-parse HEAD)
if [ -x "$out/bin/llama-bench" ] && [ -x "$out/bin/llama-quantize" ] && [ -x "$out/bin/llama-server" ] &&
  [ "$(cat "$out/bin/COMMIT" 2>/dev/null)" = "$commit" ]; then
  echo "llama-bench, llama-quantize and llama-server are up to date in $out/bin ($commit)"
  exit 0
fi

cmake -S "$src" -B "$out/build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=ON \
  -DGGML_OPENMP=ON \
  -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
  -DGGML_BLAS=OFF -DGGML_RPC=OFF \
  -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON
cmake --build "$out/build" --target llama-bench llama-quantize llama-server -j "$jobs"
mkdir -p "$out/bin"
cp "$out/build/bin/llama-bench" "$out/build/bin/llama-quantize" "$out/build/bin/llama-server" "$out/bin/"
echo "$commit" > "$out/bin/COMMIT"
"$out/bin/llama-bench" --help > /dev/null
echo "built llama-bench, llama-quantize and llama-server in $out/bin (llama.cpp $commit, OpenMP, native CPU)"
