#!/usr/bin/env bash
# gpu-bundle.sh DIR: builds, on a machine WITH a Rust toolchain, everything the GPU
# verification (tools/gpu-verify.sh) runs on a machine with an NVIDIA GPU and NO Rust:
#
#   DIR/bin/      gs-pack, gs-render, gs-train (release, stripped)
#   DIR/tests/    cuda_parity and the library's unit tests (release test executables)
#   DIR/benches/  cuda (benches/cuda.rs, release)
#   DIR/data/fox  the fox photos (../shared/data/fox), if present, for the real-pack checks
#   DIR/wheels/   gsplat 1.5.3 (pure-Python wheel, its CUDA code JIT-compiled on first use) for
#                 tools/gpu-bench.sh's side-by-side; its dependencies (torch, numpy, ninja,
#                 jaxtyping, rich) are expected on the GPU machine. A failed download is
#                 reported loudly and leaves the rest of the bundle intact.
#   DIR/src/fused-ssim  the source of fused-ssim (MIT, github.com/rahul-goel/fused-ssim), the
#                 SSIM gsplat's simple_trainer.py trains with. It is not on PyPI, so it is taken
#                 from the git repository FUSED_SSIM_GIT names (a clone or bare mirror; its HEAD)
#                 when set, and compiled on the GPU machine by gpu-bench.sh; without it the
#                 gsplat harness uses the same SSIM formula in torch convolutions (slower).
#   DIR/BUILD     the commit and toolchain the bundle was built from (and the wheel's sha256,
#                 fused-ssim's commit)
#   DIR/.gs-gpu-bundle  the mark that this script made DIR: a later run replaces DIR whole,
#                 and refuses a DIR without it (or BUILD)
#
# Usage (from the repository root):
#   tools/gpu-bundle.sh .gpu            # then copy .gpu and tools/ to the GPU machine
#   tools/gpu-verify.sh .gpu OUTDIR     # there
#
# The executables are x86-64 Linux, dynamically linked against glibc only (CUDA is loaded at
# run time by cudarc), so they run on any x86-64 machine with the same or a newer glibc.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$1
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# DIR is replaced whole, so only an earlier bundle is: one marked as such when it was begun
# (or, from before the mark, one holding its BUILD). `tools/gpu-bundle.sh .` must never delete
# the repository.
marker=.gs-gpu-bundle
if [ -e "$dir" ] && [ ! -f "$dir/$marker" ] && [ ! -f "$dir/BUILD" ]; then
    echo "gpu-bundle: $dir exists and is not a bundle this script made (no $dir/$marker);" \
        "it was left as it was: name a new directory (e.g. .gpu), or remove it yourself" >&2
    exit 2
fi
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/tests" "$dir/benches" "$dir/data" "$dir/wheels"
echo "made by tools/gpu-bundle.sh, which replaces this directory whole" >"$dir/$marker"

echo "gpu-bundle: building release binaries, test and bench executables"
cargo build --release --bins
msgs=$(mktemp)
cargo test --release --no-run --lib --test cuda_parity --message-format=json >"$msgs"
cargo bench --no-run --bench cuda --message-format=json >>"$msgs"

python3 - "$msgs" "$dir" <<'PY'
import json, shutil, sys
msgs, out = sys.argv[1], sys.argv[2]
want = {("lib", "ramsplat"): "tests/ramsplat_lib", ("test", "cuda_parity"): "tests/cuda_parity",
        ("bench", "cuda"): "benches/cuda"}
found = {}
for line in open(msgs):
    try:
        m = json.loads(line)
    except json.JSONDecodeError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    key = (t["kind"][0], t["name"])
    if key in want:
        found[key] = m["executable"]
missing = [k for k in want if k not in found]
if missing:
    sys.exit(f"gpu-bundle: no executable built for {missing}")
for k, exe in found.items():
    shutil.copy2(exe, f"{out}/{want[k]}")
PY
rm -f "$msgs"
for b in gs-pack gs-render gs-train; do
    cp "target/release/$b" "$dir/bin/$b"
done
strip "$dir"/bin/* "$dir"/tests/* "$dir"/benches/* 2>/dev/null || true

if [ -d ../shared/data/fox ]; then
    cp -r ../shared/data/fox "$dir/data/fox"
fi
gsplat_version=1.5.3
wheel_note="gsplat $gsplat_version wheel: MISSING (download failed; tools/gpu-bench.sh fox-gsplat will fail)"
if python3 -m pip download --quiet --no-deps --only-binary=:all: "gsplat==$gsplat_version" \
        -d "$dir/wheels" >"$dir/wheels/pip.log" 2>&1; then
    wheel=$(ls "$dir"/wheels/gsplat-"$gsplat_version"-*.whl)
    wheel_note="$(basename "$wheel") sha256 $(sha256sum "$wheel" | cut -d' ' -f1)"
    rm -f "$dir/wheels/pip.log"
else
    echo "gpu-bundle: WARNING: could not download the gsplat $gsplat_version wheel (see" \
        "$dir/wheels/pip.log); the bundle is complete otherwise, but the gsplat side by side" \
        "(tools/gpu-bench.sh fox-gsplat) cannot run from it" >&2
fi
fused_note="fused-ssim: not bundled (FUSED_SSIM_GIT unset; gsplat's SSIM falls back to torch)"
if [ -n "${FUSED_SSIM_GIT:-}" ]; then
    mkdir -p "$dir/src"
    if fused_rev=$(git --git-dir "$FUSED_SSIM_GIT" rev-parse HEAD 2>/dev/null ||
                   git -C "$FUSED_SSIM_GIT" rev-parse HEAD) &&
       { git --git-dir "$FUSED_SSIM_GIT" archive --prefix=fused-ssim/ HEAD 2>/dev/null ||
         git -C "$FUSED_SSIM_GIT" archive --prefix=fused-ssim/ HEAD; } | tar -x -C "$dir/src" &&
       [ -f "$dir/src/fused-ssim/setup.py" ]; then
        # The benchmark plots are 2.6 MB of the repository and nothing builds them.
        rm -rf "$dir/src/fused-ssim/images"
        fused_note="fused-ssim $fused_rev"
    else
        rm -rf "$dir/src/fused-ssim"
        echo "gpu-bundle: WARNING: FUSED_SSIM_GIT=$FUSED_SSIM_GIT is not a fused-ssim git" \
            "repository; bundled without it" >&2
        fused_note="fused-ssim: MISSING (FUSED_SSIM_GIT unreadable)"
    fi
fi
{
    echo "commit $(git rev-parse HEAD)$(git diff --quiet || echo ' (with uncommitted changes)')"
    rustc --version
    date -u +%Y-%m-%dT%H:%M:%SZ
    echo "$wheel_note"
    echo "$fused_note"
} >"$dir/BUILD"
du -sh "$dir"
echo "gpu-bundle: ready in $dir"
