#!/usr/bin/env bash
# cuda-standin.sh [--release]: runs the crate's CUDA code path without a GPU, against the CUDA
# stand-in (cuda-standin/: a libcuda.so and libnvrtc.so that execute the kernels on the host
# emulation, with lazy streams, context, bounds and sticky-fault checks; see its README.md).
#
# Builds the stand-in, links it under target/cuda-standin-<profile>/ as libcuda.so and
# libnvrtc.so, and with only that directory on LD_LIBRARY_PATH and GS_REQUIRE_GPU=1 runs:
#   1. the stand-in's own tests;
#   2. under each stream schedule (lazy, copies-first, kernels-first): the device layer's and
#      the device engines' unit tests and tests/cuda_parity.rs, on "GPU 0" = the stand-in;
#   3. gs-train --demo, 10 iterations (each about a second on the emulation, whose fibers make
#      the rasterizer's warp reductions slow): on the device engine under each schedule, its
#      steps 3-4 and 7-8 profiled by CUDA events (--profile-at), and on the sharded engine over
#      two stand-in devices (lazy schedule).
# CI runs it (.ci/run) after `cargo test`, whose build it reuses: 2 min 54 s on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=debug
flag=()
if [ "${1:-}" = "--release" ]; then
    profile=release
    flag=(--release)
fi

cargo build "${flag[@]}" -p gs-cuda-standin --quiet
dir="$PWD/target/cuda-standin-$profile"
mkdir -p "$dir"
for n in libcuda.so libcuda.so.1 libnvrtc.so libnvrtc.so.13; do
    ln -sf "../$profile/libgs_cuda_standin.so" "$dir/$n"
done
work=$(mktemp -d /tmp/gs-standin.XXXXXX)
trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH="$dir"
export GS_REQUIRE_GPU=1
export GS_KERNEL_CACHE="$work/cache"
unset GS_CUDA_EMULATE

echo "== the stand-in's own tests"
cargo test "${flag[@]}" -p gs-cuda-standin --quiet

# The stand-in prints every fault and leak on stderr, prefixed "cuda stand-in:"; the crate's
# code must cause none (the stand-in's own tests above cause them on purpose).
complaints="$work/complaints.txt"
: >"$complaints"
run() {
    local rc=0
    "$@" 2>"$work/stderr.txt" || rc=$?
    cat "$work/stderr.txt" >&2
    grep -h '^cuda stand-in:' "$work/stderr.txt" >>"$complaints" || true
    return $rc
}

for schedule in lazy copies-first kernels-first; do
    echo "== CUDA path, schedule $schedule: device layer and device engines"
    GS_STANDIN_SCHEDULE=$schedule run cargo test "${flag[@]}" --lib --quiet -- device:: train::device_
    echo "== CUDA path, schedule $schedule: tests/cuda_parity.rs"
    GS_STANDIN_SCHEDULE=$schedule run cargo test "${flag[@]}" --test cuda_parity --quiet
done

echo "== gs-train --demo --backend cuda on the stand-in (one device under each schedule, then two)"
cargo build "${flag[@]}" --bin gs-train --quiet
bin="target/$profile/gs-train"
for schedule in lazy copies-first kernels-first; do
    GS_STANDIN_SCHEDULE=$schedule "$bin" --demo --backend cuda --iterations 10 \
        --profile-steps 2 --profile-at 3 7 -o "$work/one-$schedule" 2>"$work/stderr.txt"
    echo "$schedule: $(tail -n 2 "$work/stderr.txt" | head -n 1)"
    grep -h '^cuda stand-in:' "$work/stderr.txt" >>"$complaints" || true
    grep -q '"backend": "device (ramsplat CUDA stand-in 0' "$work/one-$schedule/report.json"
    # Both windows, timed by the driver's events (the emulation's in-process path uses clocks).
    for from in 3 7; do
        grep -q "2 steps from iteration $from, device queue (CUDA events); " "$work/stderr.txt" ||
            { echo "no profile window from iteration $from (CUDA events):" >&2; \
              grep phases "$work/stderr.txt" >&2; exit 1; }
    done
done
GS_STANDIN_DEVICES=2 "$bin" --demo --backend cuda --devices 2 --iterations 10 -o "$work/two" \
    2>"$work/stderr.txt"
echo "two devices: $(tail -n 2 "$work/stderr.txt" | head -n 1)"
grep -h '^cuda stand-in:' "$work/stderr.txt" >>"$complaints" || true
grep -q '"backend": "2 devices (ramsplat CUDA stand-in 0' "$work/two/report.json"
if [ -s "$complaints" ]; then
    echo "== CUDA stand-in: the crate's code caused these faults or leaks:" >&2
    sort "$complaints" | uniq -c >&2
    exit 1
fi
echo "== CUDA stand-in: all passed, no faults or leaks"
