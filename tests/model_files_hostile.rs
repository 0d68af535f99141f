//! Damaged model files, in every format `gs-render --ply`, `gs-train --init` and
//! `gs-render --convert` read (3DGS PLY, SPZ versions 3 and 4, `.splat`, compressed PLY, SOG:
//! the bundle, and its `meta.json` and images each damaged inside an intact archive):
//! every truncation and
//! thousands of seeded corruptions of a real file. What each reader promises, and what this
//! test holds it to:
//!
//! - it never panics: a damaged file is an `Err` naming what is wrong, or a model;
//! - what it returns is a model the trainer and renderers can take: consistent lengths, every
//!   value finite, no all-zero rotation;
//! - a cut file is refused, except where the cut leaves a valid file: `.splat` is a bare list
//!   of 32-byte records, so its whole-record prefixes are smaller `.splat` files; an ASCII PLY
//!   cut inside its last number reads that number's prefix (`0.1234` of `0.12345678`), which
//!   no reader can tell from a file written without a final newline;
//! - no single allocation is sized from what the file *claims* beyond what it holds: a count
//!   field turned into 4 billion must be refused, not allocated for (one flipped byte must not
//!   become a request for gigabytes). The bound is per allocation, measured by a counting global
//!   allocator on the reading thread: 1 MiB + 64 bytes per byte of the damaged file (a model
//!   decodes to at most ~20× its file size in any of these formats: SPZ's gzip included, as
//!   long as the decompressed data must be backed by the header's count).
//!
//! The corruptions are seeded (the failing seed and case are printed), so any failure replays.

use std::path::Path;

use ramsplat::export::ply::{self, LoadOptions, PlyEncoding};
use ramsplat::export::zip::{write_stored, Archive};
use ramsplat::export::{compressed_ply, sog, splat, spz, validate_model};
use ramsplat::rng::Rng;
use ramsplat::scene::gaussians::{sh_coeffs, Gaussians};

// This file reads only the largest allocation, not the live-heap peak.
#[allow(dead_code)]
#[path = "common/heap.rs"]
mod heap;

#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

/// Runs `f` with this thread's allocations recorded; returns its result (or the panic's
/// message) and the largest single allocation it made.
fn measured<T>(f: impl FnOnce() -> T) -> (Result<T, String>, usize) {
    let (out, heap) = heap::measured(f);
    (out, heap.largest)
}

/// A trained-looking model: positions in a ±20 box, log-scales −7..1, unnormalised rotations,
/// logit opacities −6..6, SH coefficients ±1.5 (DC) and ±0.4 (higher bands).
fn model(seed: u64, n: usize, sh_degree: u32) -> Gaussians {
    let mut r = Rng::new(seed);
    let mut u = |lo: f64, hi: f64| r.uniform(lo, hi) as f32;
    let k = sh_coeffs(sh_degree);
    let mut g = Gaussians::zeros(n, sh_degree);
    for i in 0..n {
        g.means[i] = [u(-20.0, 20.0), u(-20.0, 20.0), u(-20.0, 20.0)];
        g.log_scales[i] = [u(-7.0, 1.0), u(-7.0, 1.0), u(-7.0, 1.0)];
        g.rotations[i] = [u(0.1, 1.0), u(-1.0, 1.0), u(-1.0, 1.0), u(-1.0, 1.0)];
        g.logit_opacities[i] = u(-6.0, 6.0);
        for c in 0..k {
            let a = if c == 0 { 1.5 } else { 0.4 };
            g.sh[i * k + c] = [u(-a, a), u(-a, a), u(-a, a)];
        }
    }
    g
}

/// What every reader returns must hold: `None`, or what is wrong with the model.
fn defect(g: &Gaussians) -> Option<String> {
    if let Err(e) = validate_model(g) {
        return Some(e);
    }
    let zero = g.rotations.iter().position(|q| q.iter().all(|&c| c == 0.0));
    zero.map(|i| format!("Gaussian {i} has an all-zero rotation"))
}

/// A format's reader over a file's bytes.
type Reader = Box<dyn Fn(&[u8]) -> Result<Gaussians, String>>;

/// One reader: how a format's bytes are read (through a file where the reader takes a path).
struct Format {
    name: &'static str,
    bytes: Vec<u8>,
    /// Whether the file cut to this many bytes is still a valid file (see the module doc).
    valid_cut: Box<dyn Fn(usize) -> bool>,
    read: Reader,
}

fn formats(dir: &Path) -> Vec<Format> {
    // 300 Gaussians: two compressed-PLY chunks (256 each), one of them partial.
    let g3 = model(11, 300, 3);
    let g1 = model(12, 300, 1);
    let ply_path = dir.join("m.ply");
    let cply_path = dir.join("m.compressed.ply");
    let mut out = Vec::new();
    for (name, g, encoding) in [
        ("binary PLY, SH 3", &g3, PlyEncoding::BinaryLittleEndian),
        ("ASCII PLY, SH 1", &g1, PlyEncoding::Ascii),
    ] {
        ply::save(&ply_path, g, encoding).unwrap();
        let path = ply_path.clone();
        let bytes = std::fs::read(&ply_path).unwrap();
        // ASCII: a cut after the first character of the last number.
        let last_number = match encoding {
            PlyEncoding::Ascii => {
                let text = bytes.trim_ascii_end();
                1 + text.iter().rposition(u8::is_ascii_whitespace).unwrap() + 1
            }
            _ => usize::MAX,
        };
        out.push(Format {
            name,
            bytes,
            valid_cut: Box::new(move |cut| cut >= last_number),
            read: Box::new(move |b| {
                std::fs::write(&path, b).unwrap();
                ply::load(&path, &LoadOptions::default()).map_err(|e| e.to_string())
            }),
        });
    }
    out.push(Format {
        name: "SPZ, SH 3",
        bytes: spz::encode(&g3).unwrap(),
        valid_cut: Box::new(|_| false),
        read: Box::new(|b| spz::decode(b).map_err(|e| e.to_string())),
    });
    // Version 4 as Niantic's library writes it (tests/data/spz/README.md): zstd streams behind
    // a plain header and table of contents; the second with an extension record.
    for (name, file) in [
        ("SPZ version 4 (Niantic's), SH 3", "v4.spz"),
        ("SPZ version 4 with extensions", "v4rdf.spz"),
    ] {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spz");
        out.push(Format {
            name,
            bytes: std::fs::read(fixture.join(file)).unwrap(),
            valid_cut: Box::new(|_| false),
            read: Box::new(|b| spz::decode(b).map_err(|e| e.to_string())),
        });
    }
    out.push(Format {
        name: ".splat",
        bytes: splat::encode(&g3),
        valid_cut: Box::new(|cut| cut > 0 && cut % 32 == 0),
        read: Box::new(|b| splat::decode(b, Path::new("m.splat")).map_err(|e| e.to_string())),
    });
    let path = cply_path.clone();
    out.push(Format {
        name: "compressed PLY, SH 3",
        bytes: compressed_ply::encode(&g3).unwrap(),
        valid_cut: Box::new(|_| false),
        read: Box::new(move |b| compressed_ply::decode(b, &path).map_err(|e| e.to_string())),
    });
    // SOG: the bundle (its members' CRC-32s catch damage inside them), then one member at a
    // time damaged inside an archive rebuilt around it (fresh CRCs), so the damage reaches
    // the metadata parser, the WebP decoder and the per-Gaussian checks.
    let bundle = sog::encode(&g3).unwrap();
    out.push(Format {
        name: "SOG, SH 3",
        bytes: bundle.clone(),
        valid_cut: Box::new(|_| false),
        read: Box::new(|b| sog::decode(b).map_err(|e| e.to_string())),
    });
    let zip = Archive::new(&bundle).unwrap();
    let members: Vec<(String, Vec<u8>)> = zip
        .names()
        .map(|n| (n.to_owned(), zip.read(n).unwrap()))
        .collect();
    for (name, member) in [
        ("SOG meta.json", "meta.json"),
        ("SOG means_u.webp", "means_u.webp"),
        ("SOG quats.webp", "quats.webp"),
        ("SOG shN_labels.webp", "shN_labels.webp"),
    ] {
        let members = members.clone();
        out.push(Format {
            name,
            bytes: members.iter().find(|m| m.0 == member).unwrap().1.clone(),
            valid_cut: Box::new(|_| false),
            read: Box::new(move |b| {
                let parts: Vec<(&str, &[u8])> = members
                    .iter()
                    .map(|(n, d)| (n.as_str(), if n == member { b } else { d.as_slice() }))
                    .collect();
                let mut archive = Vec::new();
                write_stored(&mut archive, &parts).unwrap();
                sog::decode(&archive).map_err(|e| e.to_string())
            }),
        });
    }
    out
}

/// Reads `bytes` with `f`'s reader and checks the promises: `Ok(accepted)`, or `Err` saying
/// which was broken.
fn check(f: &Format, bytes: &[u8], must_fail: bool) -> Result<bool, String> {
    let (out, largest) = measured(|| (f.read)(bytes));
    let bound = (1 << 20) + 64 * bytes.len();
    if largest > bound {
        return Err(format!(
            "one allocation of {largest} bytes for a {}-byte file (bound {bound})",
            bytes.len()
        ));
    }
    match out {
        Err(panic) => Err(format!("panicked: {panic}")),
        Ok(Ok(g)) => match defect(&g) {
            Some(d) => Err(format!("returned a model with {d}")),
            None if must_fail => Err(format!("accepted it ({} Gaussians)", g.means.len())),
            None => Ok(true),
        },
        Ok(Err(msg)) if msg.trim().is_empty() => Err("an error with no message".into()),
        Ok(Err(_)) => Ok(false),
    }
}

/// Every prefix of every format's file is refused (unless it is a valid file, see the module
/// doc), without a panic or an outsized allocation.
#[test]
fn every_truncation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for f in formats(dir.path()) {
        // The intact file reads back first (else the sweep would test nothing).
        check(&f, &f.bytes, false).unwrap_or_else(|e| panic!("{}: intact file: {e}", f.name));
        let len = f.bytes.len();
        // Every cut in the first and last 4 KiB (headers, the gzip trailer, the last
        // record), every 7th in between.
        let cuts = (0..len).filter(|&c| c < 4096 || c + 4096 >= len || c % 7 == 0);
        for cut in cuts {
            if let Err(e) = check(&f, &f.bytes[..cut], !(f.valid_cut)(cut)) {
                panic!("{}: the file cut to {cut} of {len} bytes: {e}", f.name);
            }
        }
    }
}

/// Seeded damage: bytes overwritten (random values, or 0x00/0xFF/0x7F runs that turn counts and
/// lengths huge or zero), a byte inserted or deleted, a header line's number replaced. The
/// reader may accept the damage (a changed colour is still a model) but must keep its
/// promises.
#[test]
fn corrupted_files_never_panic_or_overallocate() {
    let dir = tempfile::tempdir().unwrap();
    let cases: u64 = std::env::var("GS_HOSTILE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    for (fi, f) in formats(dir.path()).into_iter().enumerate() {
        let header_end = f
            .bytes
            .windows(11)
            .position(|w| w == b"end_header\n")
            .map(|p| p + 11);
        let mut accepted = 0u64;
        for case in 0..cases {
            let seed = 1000 * fi as u64 + case;
            let mut r = Rng::new(seed);
            let mut b = f.bytes.clone();
            let len = b.len() as u64;
            // Damage near the start (headers, counts) as often as anywhere else.
            let at = |r: &mut Rng| -> usize {
                if r.below(2) == 0 {
                    r.below(len.min(256)) as usize
                } else {
                    r.below(len) as usize
                }
            };
            match r.below(5) {
                0 => {
                    for _ in 0..1 + r.below(4) {
                        let i = at(&mut r);
                        b[i] = r.next_u64() as u8;
                    }
                }
                1 => {
                    let i = at(&mut r);
                    let fill = [0x00, 0xFF, 0x7F][r.below(3) as usize];
                    let end = (i + 1 + r.below(8) as usize).min(b.len());
                    b[i..end].fill(fill);
                }
                2 => {
                    let i = at(&mut r);
                    b.insert(i, r.next_u64() as u8);
                }
                3 => {
                    let i = at(&mut r);
                    b.remove(i);
                }
                _ => {
                    // In a PLY header, a number (a count, a property type's size) replaced by
                    // an absurd one; elsewhere, a 4-byte field set to u32::MAX.
                    if let Some(end) = header_end {
                        let digits: Vec<usize> =
                            (0..end).filter(|&i| b[i].is_ascii_digit()).collect();
                        if !digits.is_empty() {
                            let i = digits[r.below(digits.len() as u64) as usize];
                            let j = (i..end).find(|&j| !b[j].is_ascii_digit()).unwrap_or(end);
                            let big = ["4294967295", "18446744073709551615", "0", "99999999999"]
                                [r.below(4) as usize];
                            b.splice(i..j, big.bytes());
                        }
                    } else {
                        let i = at(&mut r).min(b.len().saturating_sub(4));
                        b[i..i + 4].copy_from_slice(&u32::MAX.to_le_bytes());
                    }
                }
            }
            match check(&f, &b, false) {
                Ok(yes) => accepted += yes as u64,
                Err(e) => panic!("{}: corruption case {case} (seed {seed}): {e}", f.name),
            }
        }
        println!(
            "{}: {cases} corrupted files, {accepted} read as models",
            f.name
        );
    }
}
