#!/usr/bin/env bash
# nvrtc-setup.sh DIR: fetches the pinned CUDA 13.0 wheels from PyPI and unpacks the NVRTC
# shared libraries, the CUDA headers and the PTX assembler into DIR, so the CUDA kernels can be
# compiled and assembled (not run) on a machine without a GPU or a CUDA toolkit (CI,
# tests/nvrtc_compile.rs).
#
#   tools/nvrtc-setup.sh /tmp/nvrtc-root
#   export LD_LIBRARY_PATH=/tmp/nvrtc-root/lib:$LD_LIBRARY_PATH GS_PTXAS=/tmp/nvrtc-root/bin/ptxas
#   GS_REQUIRE_NVRTC=1 cargo test --test nvrtc_compile
#
# Layout produced: DIR/lib/{libnvrtc.so.13,libnvrtc.so,libnvrtc-builtins.so.13.0},
# DIR/include/* (cuda_runtime / cccl headers, for NVRTC's --include-path if ever needed),
# DIR/bin/ptxas (what the GPU driver runs on our PTX when it loads a module: the test assembles
# every kernel with it and checks registers and shared memory against the launch shapes),
# DIR/wheels/*.whl (the download cache).
#
# Versions are pinned to 13.0.x on purpose: newer NVRTC emits PTX that the 580-series driver
# on the GPU machines cannot load. Idempotent: wheels already in DIR/wheels are
# not downloaded again and the unpacked files are simply overwritten.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$1
mkdir -p "$dir/wheels" "$dir/lib" "$dir/include"
dir=$(cd "$dir" && pwd)

pins=(nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
      nvidia-cuda-nvcc==13.0.88)
need=0
for p in nvidia_cuda_nvrtc-13.0.88 nvidia_cuda_runtime-13.0.96 nvidia_cuda_cccl-13.0.85 \
         nvidia_cuda_nvcc-13.0.88; do
    ls "$dir/wheels/$p"-*.whl >/dev/null 2>&1 || need=1
done
if [ "$need" = 1 ]; then
    echo "nvrtc-setup: downloading ${pins[*]} into $dir/wheels"
    python3 -m pip download -q --disable-pip-version-check --no-deps \
        --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3 \
        -d "$dir/wheels" "${pins[@]}"
fi

python3 - "$dir" <<'PY'
import pathlib, shutil, sys, zipfile
root = pathlib.Path(sys.argv[1])
libs = {"libnvrtc.so.13", "libnvrtc-builtins.so.13.0"}
tools = {"ptxas"}
found = set()
for whl in sorted((root / "wheels").glob("*.whl")):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if name.endswith("/"):
                continue
            base = name.rsplit("/", 1)[-1]
            if name.startswith("nvidia/cu13/lib/") and base in libs:
                target = root / "lib" / base
            elif name.startswith("nvidia/cu13/include/"):
                target = root / "include" / name[len("nvidia/cu13/include/"):]
            elif name.startswith("nvidia/cu13/bin/") and base in tools:
                target = root / "bin" / base
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(name) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            if base in tools:
                target.chmod(0o755)
            if base in libs or base in tools:
                found.add(base)
missing = (libs | tools) - found
if missing:
    sys.exit(f"nvrtc-setup: the wheels in {root/'wheels'} lack {sorted(missing)}")
PY
# cudarc's dynamic loader also tries the unversioned name.
ln -sf libnvrtc.so.13 "$dir/lib/libnvrtc.so"
echo "nvrtc-setup: NVRTC 13.0.88 ready in $dir/lib, ptxas in $dir/bin"
echo "export LD_LIBRARY_PATH=$dir/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} GS_PTXAS=$dir/bin/ptxas"
