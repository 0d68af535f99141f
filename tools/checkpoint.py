#!/usr/bin/env python3
"""Read a gs-train checkpoint from Python, and convert it to safetensors.

    python3 tools/checkpoint.py CKPT                      # list the arrays and the state
    python3 tools/checkpoint.py CKPT --safetensors OUT    # write OUT.safetensors

As a module: ``load(path) -> (meta, {name: numpy array})``, every checksum verified.

The container (src/train/checkpoint.rs documents it) is little-endian: an 8-byte magic
``RSPLCKPT``, a u32 version (1), a reserved u32, the header length H (u64), the xxh3-64 of the
header (u64), H bytes of JSON ``{"format", "meta", "arrays": [{name, dtype, shape, offset,
bytes, xxh3}]}``, zero padding to a multiple of 8, then each array at its offset (8-aligned).
Parameters are stored pre-activation (log-scales, logit opacities, raw quaternions).

The safetensors output holds the same arrays under the same names (``params.means``,
``adam.exp_avg.sh``, ``stats.denom``, ...) and the state in its ``__metadata__``
(``ramsplat.meta``: the checkpoint's meta JSON), so ``safetensors.torch.load_file`` or
``safetensors.numpy.load_file`` opens a training state directly. safetensors has no checksums;
this tool verifies the checkpoint's before converting.

Requires numpy, and the ``xxhash`` package for the checksums (``pip install xxhash``);
``--no-verify`` reads without them.
"""

import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

MAGIC = b"RSPLCKPT"
VERSION = 1
PREAMBLE = 32
FORMAT = "ramsplat-checkpoint"
MAX_HEADER_BYTES = 16 << 20
DTYPES = {
    "f32": ("<f4", "F32"),
    "f64": ("<f8", "F64"),
    "u32": ("<u4", "U32"),
    "u64": ("<u8", "U64"),
    "u8": ("u1", "U8"),
}


class CheckpointError(Exception):
    """The file is not a readable checkpoint; the message names the file and the reason."""


def _xxh3(data):
    import xxhash  # imported here so --no-verify works without it

    return xxhash.xxh3_64_intdigest(data)


def load(path, verify=True):
    """Returns (meta, arrays): the state's JSON and {name: array of its dtype and shape}."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < PREAMBLE or blob[:8] != MAGIC:
        raise CheckpointError(f"{path}: not a gs-train checkpoint (no RSPLCKPT magic)")
    version, _reserved, hlen, hsum = struct.unpack_from("<IIQQ", blob, 8)
    if version != VERSION:
        raise CheckpointError(f"{path}: container version {version}, this tool reads {VERSION}")
    if hlen > MAX_HEADER_BYTES or PREAMBLE + hlen > len(blob):
        raise CheckpointError(f"{path}: header length {hlen} is impossible for this file")
    raw = blob[PREAMBLE : PREAMBLE + hlen]
    if verify and _xxh3(raw) != hsum:
        raise CheckpointError(f"{path}: the header fails its checksum")
    header = json.loads(raw)
    if header.get("format") != FORMAT:
        raise CheckpointError(f"{path}: header format is {header.get('format')!r}")
    data_start = (PREAMBLE + hlen + 7) // 8 * 8
    arrays = {}
    for e in header["arrays"]:
        name, dtype, shape = e["name"], e["dtype"], e["shape"]
        if dtype not in DTYPES:
            raise CheckpointError(f"{path}: array {name!r} has unknown dtype {dtype!r}")
        np_dtype = np.dtype(DTYPES[dtype][0])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        start = data_start + e["offset"]
        if count * np_dtype.itemsize != e["bytes"] or start + e["bytes"] > len(blob):
            raise CheckpointError(f"{path}: array {name!r} does not fit its shape or the file")
        chunk = blob[start : start + e["bytes"]]
        if verify and format(_xxh3(chunk), "016x") != e["xxh3"]:
            raise CheckpointError(f"{path}: array {name!r} fails its checksum")
        arrays[name] = np.frombuffer(chunk, dtype=np_dtype, count=count).reshape(shape)
    return header["meta"], arrays


def safetensors_bytes(meta, arrays):
    """The safetensors encoding of `arrays` (names kept), with `meta` in __metadata__."""
    header = {"__metadata__": {"format": FORMAT, "ramsplat.meta": json.dumps(meta)}}
    offset = 0
    for name, a in arrays.items():
        st_dtype = next(v[1] for v in DTYPES.values() if np.dtype(v[0]) == a.dtype)
        header[name] = {
            "dtype": st_dtype,
            "shape": list(a.shape),
            "data_offsets": [offset, offset + a.nbytes],
        }
        offset += a.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    # The format's convention: the header is space-padded so the data starts 8-aligned.
    raw += b" " * (-(8 + len(raw)) % 8)
    parts = [struct.pack("<Q", len(raw)), raw]
    parts += [np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes() for a in arrays.values()]
    return b"".join(parts)


def write_atomic(path, data):
    """Writes under a temporary name in the same directory, fsyncs, then renames."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--safetensors", metavar="OUT", help="write the arrays as safetensors")
    ap.add_argument("--no-verify", action="store_true", help="skip the xxh3 checksums")
    args = ap.parse_args()
    try:
        meta, arrays = load(args.checkpoint, verify=not args.no_verify)
    except (CheckpointError, OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as e:
        print(f"error: {e}: install it (pip install xxhash) or pass --no-verify", file=sys.stderr)
        return 1
    if args.safetensors:
        write_atomic(args.safetensors, safetensors_bytes(meta, arrays))
    else:
        print(f"step {meta.get('step')}, {meta.get('num_gaussians')} Gaussians, "
              f"SH degree {meta.get('sh_degree')}, made by {meta.get('created_by')}")
        for name, a in arrays.items():
            print(f"  {name:28} {str(a.dtype):8} {list(a.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
