//! Damaged and hostile PCD files against the importer (`ramsplat::import::pcd`), as
//! tests/model_files_hostile.rs holds the model readers. What the importer promises, and what
//! this test holds it to:
//!
//! - it never panics: a damaged file is an `Err` naming what is wrong, or a cloud;
//! - a cloud it accepts streams exactly [`PointSource::declared_len`] points, every coordinate
//!   finite;
//! - a cut file is refused, except where the cut leaves a valid file (an ASCII file cut inside
//!   its last number, which reads that number's prefix);
//! - nothing is allocated by what the file *claims*: a header declaring 2^32 points, a COUNT of
//!   10^12 or a compressed block declaring 4 GB costs no more than a small file. Measured by a
//!   counting global allocator on the reading thread: the largest single allocation, and the
//!   peak of live heap while importing and streaming;
//! - binary_compressed data is never decompressed whole: a cloud of 60 MB uncompressed (and a
//!   real Kinect frame, when the shared data is there) imports and streams in chunks of 4,096
//!   points with under half a megabyte of live heap (about 220 KB measured: five field
//!   decoders and a chunk).
//!
//! The corruptions are seeded (the failing case is printed), so any failure replays.

use std::path::Path;

use ramsplat::dataset::PointSource;
use ramsplat::import::pcd::{cloud_from_bytes, import};
use ramsplat::import::{ImportError, ImportOptions};
use ramsplat::rng::Rng;

#[path = "common/heap.rs"]
mod heap;
use heap::measured;

#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

/// Streams a source to its end in chunks of `chunk` points, checking each; returns the points.
fn stream(src: &mut dyn PointSource<Error = ImportError>, chunk: usize) -> Result<u64, String> {
    let mut n = 0u64;
    while let Some(c) = src.next_chunk(chunk).map_err(|e| e.to_string())? {
        if c.is_empty() || c.len() > chunk || !c.is_consistent() {
            return Err(format!("a bad chunk of {} points", c.len()));
        }
        if !c.xyz.iter().flatten().all(|v| v.is_finite()) {
            return Err("a non-finite coordinate was delivered".into());
        }
        n += c.len() as u64;
    }
    Ok(n)
}

/// Opens `bytes` and streams them: `Ok(points)` or the import's error, as text.
fn read(bytes: &[u8], chunk: usize) -> Result<u64, String> {
    let mut warnings = Vec::new();
    let mut src = cloud_from_bytes(
        bytes.to_vec(),
        Path::new("h.pcd"),
        "h",
        &ImportOptions::default(),
        &mut warnings,
    )
    .map_err(|e| e.to_string())?;
    let n = stream(src.as_mut(), chunk)?;
    if Some(n) != src.declared_len() {
        return Err(format!(
            "PROMISE: declared {:?} points but streamed {n}",
            src.declared_len()
        ));
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

const KINDS: [&str; 3] = ["ascii", "binary", "binary_compressed"];

/// `FIELDS label x y z rgba` (the mOSD scans' layout) for `n` points.
fn header(kind: &str, n: u64) -> String {
    format!(
        "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS label x y z rgba\nSIZE 4 4 4 4 4\nTYPE U F F F U\nCOUNT 1 1 1 1 1\nWIDTH {n}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA {kind}\n"
    )
}

/// Literal-only LZF (liblzf's format: runs of at most 32 bytes, each after its length − 1).
fn lzf_literals(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + data.len() / 32 + 1);
    for run in data.chunks(32) {
        out.push(run.len() as u8 - 1);
        out.extend_from_slice(run);
    }
    out
}

/// A small cloud of `n` points (every fifth without a measurement: NaN coordinates).
fn small(kind: &str, n: usize) -> Vec<u8> {
    let mut r = Rng::new(n as u64);
    let rows: Vec<[u32; 5]> = (0..n)
        .map(|i| {
            let c = |v: f64| (v as f32).to_bits();
            let x = if i % 5 == 0 {
                f32::NAN.to_bits()
            } else {
                c(r.uniform(-1.0, 1.0))
            };
            [
                r.below(200) as u32,
                x,
                c(r.uniform(-1.0, 1.0)),
                c(r.uniform(0.5, 2.0)),
                r.below(1 << 24) as u32,
            ]
        })
        .collect();
    let mut out = header(kind, n as u64).into_bytes();
    match kind {
        "ascii" => {
            for row in &rows {
                let f = |b: u32| {
                    let v = f32::from_bits(b);
                    if v.is_nan() {
                        "nan".to_owned()
                    } else {
                        v.to_string()
                    }
                };
                out.extend(
                    format!(
                        "{} {} {} {} {}\n",
                        row[0],
                        f(row[1]),
                        f(row[2]),
                        f(row[3]),
                        row[4]
                    )
                    .bytes(),
                );
            }
        }
        "binary" => {
            for row in &rows {
                row.iter().for_each(|v| out.extend(v.to_le_bytes()));
            }
        }
        _ => {
            let mut data = Vec::new();
            for k in 0..5 {
                rows.iter()
                    .for_each(|row| data.extend(row[k].to_le_bytes()));
            }
            let block = lzf_literals(&data);
            out.extend((block.len() as u32).to_le_bytes());
            out.extend((data.len() as u32).to_le_bytes());
            out.extend(block);
        }
    }
    out
}

/// Reads `bytes`, checking the promises; `Ok(accepted)`, or `Err` saying which broke.
fn check(bytes: &[u8], may_pass: bool) -> Result<bool, String> {
    let (out, heap) = measured(|| read(bytes, 1000));
    let bound = (1 << 20) + 64 * bytes.len();
    if heap.largest > bound {
        return Err(format!(
            "one allocation of {} bytes for a {}-byte file (bound {bound})",
            heap.largest,
            bytes.len()
        ));
    }
    match out {
        Err(panic) => Err(format!("panicked: {panic}")),
        Ok(Err(e)) if e.starts_with("PROMISE") || e.contains("non-finite") => Err(e),
        Ok(Err(_)) => Ok(false),
        Ok(Ok(_)) if !may_pass => Err("accepted".into()),
        Ok(Ok(_)) => Ok(true),
    }
}

#[test]
fn every_cut_of_every_kind_is_refused_without_a_panic() {
    for kind in KINDS {
        let bytes = small(kind, 12);
        assert_eq!(read(&bytes, 5), Ok(12 - 3), "{kind}: the uncut file");
        let last_number = bytes
            .trim_ascii_end()
            .iter()
            .rposition(|&b| b == b' ')
            .unwrap()
            + 1;
        for cut in 0..bytes.len() {
            let valid = kind == "ascii" && cut > last_number;
            if let Err(e) = check(&bytes[..cut], valid) {
                panic!("{kind}: cut at {cut} of {}: {e}", bytes.len());
            }
        }
    }
}

#[test]
fn a_cut_file_on_disk_is_refused_at_import_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = small("binary_compressed", 40);
    let path = dir.path().join("cut.pcd");
    std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    let e = import(&path, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cut.pcd") && e.contains("the file is truncated"),
        "{e}"
    );
}

#[test]
fn seeded_corruptions_never_panic_over_allocate_or_miscount() {
    let mut accepted = 0;
    for kind in KINDS {
        let bytes = small(kind, 40);
        let mut r = Rng::new(7);
        for case in 0..1_500 {
            let mut b = bytes.clone();
            for _ in 0..1 + r.below(4) {
                let i = r.below(b.len() as u64) as usize;
                // Digits and spaces as often as any byte: they keep ASCII files parseable.
                b[i] = match r.below(3) {
                    0 => b"0123456789 "[r.below(11) as usize],
                    _ => r.below(256) as u8,
                };
            }
            match check(&b, true) {
                Ok(ok) => accepted += usize::from(ok),
                Err(e) => panic!("{kind}, case {case}: {e}"),
            }
        }
    }
    // Some corruptions leave a readable cloud (a changed value, a flipped colour bit).
    assert!(accepted > 0);
}

#[test]
fn absurd_declared_sizes_allocate_nothing_for_them() {
    let huge = 1u64 << 32;
    let compressed_lie = {
        // 357,913,941 points × 12 bytes ≈ 4 GB uncompressed, fitting the u32 size, from a
        // 10-byte block.
        let n = 357_913_941u64;
        let mut b =
            "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nPOINTS 357913941\nDATA binary_compressed\n"
                .as_bytes()
                .to_vec();
        b.extend(10u32.to_le_bytes());
        b.extend(((n * 12) as u32).to_le_bytes());
        b.extend([0xE0, 255, 0].repeat(3));
        b.push(0);
        b
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "binary, POINTS 2^32",
            [header("binary", huge).as_bytes(), &[0; 100]].concat(),
            "ends inside point 5",
        ),
        (
            "ascii, POINTS 2^32",
            [header("ascii", huge).as_bytes(), b"1 0 0 1 5\n"].concat(),
            "ends after 1 of its 4294967296 points",
        ),
        (
            "binary_compressed, POINTS 2^32",
            [header("binary_compressed", huge).as_bytes(), &[0; 8]].concat(),
            "declares 0 uncompressed bytes, but 4294967296 points of 20 bytes",
        ),
        ("binary_compressed, a 4 GB block from 10 bytes", compressed_lie, "before the start"),
        (
            "binary, a COUNT of 10^12",
            b"FIELDS x y z _\nSIZE 4 4 4 1\nTYPE F F F U\nCOUNT 1 1 1 1000000000000\nWIDTH 2\nDATA binary\n\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec(),
            "ends inside point 0",
        ),
        (
            "WIDTH × HEIGHT at u64's limit",
            b"FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 4294967296\nHEIGHT 4294967295\nDATA binary\n".to_vec(),
            "ends inside point 0",
        ),
    ];
    for (what, bytes, want) in cases {
        let (out, heap) = measured(|| read(&bytes, 1000));
        let e = out.unwrap().unwrap_err();
        assert!(e.contains(want), "{what}: {e} should contain {want:?}");
        assert!(
            heap.largest < 256 << 10 && heap.peak < 1 << 20,
            "{what}: {heap:?}"
        );
    }
}

/// An LZF block of `count` repeats of `pattern` (at most 32 bytes): the pattern as a literal,
/// then back-references of 264 bytes from `pattern.len()` back (each overlapping itself).
fn lzf_repeat(pattern: &[u8], count: usize, out: &mut Vec<u8>) {
    let p = pattern.len();
    out.push(p as u8 - 1);
    out.extend_from_slice(pattern);
    let mut left = p * (count - 1);
    let off = p - 1;
    while left > 0 {
        let len = left.min(264);
        if len < 3 {
            out.push(len as u8 - 1);
            out.extend_from_slice(&pattern[..len]);
        } else if len - 2 < 7 {
            out.extend([(((len - 2) << 5) | (off >> 8)) as u8, (off & 255) as u8]);
        } else {
            out.extend([
                (7 << 5 | (off >> 8)) as u8,
                (len - 9) as u8,
                (off & 255) as u8,
            ]);
        }
        left -= len;
    }
}

#[test]
fn a_60_mb_compressed_cloud_streams_in_under_half_a_megabyte() {
    // 3,000,000 points, two alternating ones (the second without a measurement), field-major:
    // 60 MB uncompressed in a ~0.9 MB block.
    let n = 3_000_000usize;
    let pairs = n / 2;
    let mut block = Vec::new();
    let f = |v: f32| v.to_bits().to_le_bytes();
    let two = |a: [u8; 4], b: [u8; 4]| [a, b].concat();
    lzf_repeat(
        &two(7u32.to_le_bytes(), 9u32.to_le_bytes()),
        pairs,
        &mut block,
    );
    lzf_repeat(&two(f(0.5), f(f32::NAN)), pairs, &mut block);
    lzf_repeat(&two(f(-0.25), f(f32::NAN)), pairs, &mut block);
    lzf_repeat(&two(f(1.5), f(f32::NAN)), pairs, &mut block);
    lzf_repeat(&two(0x00FF8040u32.to_le_bytes(), [0; 4]), pairs, &mut block);
    let mut bytes = header("binary_compressed", n as u64).into_bytes();
    bytes.extend((block.len() as u32).to_le_bytes());
    bytes.extend(((n * 20) as u32).to_le_bytes());
    bytes.extend(&block);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pcd");
    std::fs::write(&path, &bytes).unwrap();
    drop(bytes);

    let (out, heap) = measured(|| -> Result<(u64, Vec<String>), String> {
        let mut scene = import(&path, &ImportOptions::default()).map_err(|e| e.to_string())?;
        let declared = scene.clouds[0].declared_len();
        let got = stream(scene.clouds[0].as_mut(), 4096)?;
        assert_eq!(Some(got), declared);
        Ok((got, scene.warnings))
    });
    let (got, warnings) = out.unwrap().unwrap();
    assert_eq!(got, pairs as u64);
    assert!(
        warnings[0].contains("1,500,000 of 3,000,000 points have NaN coordinates"),
        "{warnings:?}"
    );
    // The block is 60 MB decoded: a whole-block decompression would show here.
    assert!(heap.peak < 512 << 10, "{heap:?}");
}

#[test]
fn a_real_kinect_frame_streams_in_under_half_a_megabyte() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/mosd_kinect_labeled/pcd/test63.pcd");
    if !path.is_file() {
        eprintln!("skipped: {} is absent", path.display());
        return;
    }
    let (out, heap) = measured(|| {
        let mut scene = import(&path, &ImportOptions::default()).unwrap();
        stream(scene.clouds[0].as_mut(), 4096).unwrap()
    });
    assert_eq!(out.unwrap(), 182_372);
    // The file is 2 MB, its block 6 MB decoded, its points 3.3 MB as PLY.
    assert!(heap.peak < 512 << 10, "{heap:?}");
}
