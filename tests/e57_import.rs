//! E57 scans: files written by libE57Format (the reference library, `tools/e57_fixtures.py`)
//! read back exactly, `gs-pack convert` packs them, a damaged one is refused naming the
//! place, and a large scan streams in bounded memory.

use std::path::{Path, PathBuf};

use ramsplat::dataset::Format;
use ramsplat::import::e57::cloud_from_bytes;
use ramsplat::import::{open, ImportError, ImportOptions};
use ramsplat::shard::reader::Pack;

#[path = "common/heap.rs"]
mod heap;
use heap::measured;

#[path = "common/gs_pack.rs"]
mod gs_pack;
use gs_pack::{gs_pack, packed, stream, text, Points};

#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/e57/two_scans.e57")
}

/// What `tools/e57_fixtures.py` wrote, as the importer should deliver it: scan 0 rotated 90°
/// about z and moved by (10, 20, 30), its invalid points left out; scan 1 grey.
fn expected() -> Points {
    let mut out = Vec::new();
    for s in 0..2 {
        for i in 0..300u32 {
            if s == 0 && i % 10 == 3 {
                continue;
            }
            let local = [
                f64::from(i) / 8.0 - 20.0,
                f64::from(i % 17) / 4.0 + f64::from(s),
                f64::from(i % 5) / 2.0,
            ];
            let (xyz, rgb) = if s == 0 {
                (
                    [-local[1] + 10.0, local[0] + 20.0, local[2] + 30.0],
                    [
                        (7 * i % 256) as u8,
                        (13 * i % 256) as u8,
                        (29 * i % 256) as u8,
                    ],
                )
            } else {
                (local, [128; 3])
            };
            out.push((xyz.map(|v| v as f32), rgb, s));
        }
    }
    out
}

fn assert_points(got: &Points, want: &Points) {
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!((g.1, g.2), (w.1, w.2), "point {k}");
        for a in 0..3 {
            // The quaternion's √½ in a double: the rotation is exact to an ulp of 20 m.
            assert!(
                (g.0[a] - w.0[a]).abs() <= 4e-6,
                "point {k}: {:?} {:?}",
                g.0,
                w.0
            );
        }
    }
}

#[test]
fn a_file_written_by_libe57format_reads_back_exactly() {
    let mut scene = open(&fixture(), Format::Auto, &ImportOptions::default()).unwrap();
    assert_eq!(scene.format, Format::E57);
    assert_eq!(scene.clouds.len(), 1);
    let cloud = scene.clouds[0].as_mut();
    assert_eq!(cloud.name(), "two_scans");
    assert_eq!(cloud.declared_len(), Some(570));
    assert_points(&stream(cloud, 97), &expected());
    let w = scene.warnings.join("\n");
    assert!(
        w.contains("30 of 600 points have no valid position")
            && w.contains("300 of 570 points get grey [128, 128, 128]: scan 1 has no colour"),
        "{w}"
    );
}

#[test]
fn every_damaged_page_is_an_error_never_a_panic() {
    let good = std::fs::read(fixture()).unwrap();
    let mut refused = 0;
    // A byte flipped in every 61st position: the page's checksum catches it wherever it is.
    for at in (0..good.len()).step_by(61) {
        let mut bad = good.clone();
        bad[at] ^= 0x5a;
        let mut warnings = Vec::new();
        let r = cloud_from_bytes(
            bad,
            Path::new("scan.e57"),
            "scan",
            &ImportOptions::default(),
            &mut warnings,
        );
        let e = match r {
            Err(e) => e.to_string(),
            Ok(mut c) => match (|| {
                while c.next_chunk(1000)?.is_some() {}
                Ok::<_, ImportError>(())
            })() {
                Err(e) => e.to_string(),
                Ok(()) => panic!("byte {at} flipped was not noticed"),
            },
        };
        assert!(e.contains("scan.e57"), "{e}");
        refused += 1;
    }
    assert!(refused > 250);
    // Cut short: refused before a point is read.
    for len in [0, 1000, 1024, good.len() - 1024, good.len() - 1] {
        let mut warnings = Vec::new();
        let r = cloud_from_bytes(
            good[..len].to_vec(),
            Path::new("scan.e57"),
            "scan",
            &ImportOptions::default(),
            &mut warnings,
        );
        let Err(e) = r else {
            panic!("a file cut to {len} bytes was accepted");
        };
        assert!(e.to_string().contains("scan.e57"), "{e}");
    }
}

#[test]
fn gs_pack_converts_a_scan_file() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("scan.pack");
    let o = gs_pack(&[
        "convert",
        fixture().to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let p = Pack::open(&pack).unwrap();
    let m = p.manifest();
    assert_eq!(m.source.format, Format::E57);
    assert_eq!(
        (m.clouds[0].name.as_str(), m.clouds[0].points),
        ("two_scans", 570)
    );
    let got: Points = packed(&pack, 0)
        .into_iter()
        .map(|(xyz, rgb, label)| (xyz, rgb, label.expect("labels")))
        .collect();
    assert_points(&got, &expected());

    // A damaged copy: an error naming the file and the page, and no pack.
    let mut bad = std::fs::read(fixture()).unwrap();
    let at = bad.len() - 3000;
    bad[at] ^= 1;
    let bad_path = tmp.path().join("bad.e57");
    std::fs::write(&bad_path, bad).unwrap();
    let out = tmp.path().join("bad.pack");
    let o = gs_pack(&[
        "convert",
        bad_path.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success() && !out.exists(), "{}", text(&o));
    assert!(
        text(&o).contains("bad.e57") && text(&o).contains("checksum"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_large_scan_streams_in_bounded_memory() {
    let n = 200_000;
    let bytes: std::sync::Arc<[u8]> =
        ramsplat::synth::e57::e57_bytes(&[ramsplat::synth::e57::E57Scan::grid(n, true)]).into();
    let (count, heap) = measured(|| {
        let mut warnings = Vec::new();
        let mut c = cloud_from_bytes(
            bytes.clone(),
            Path::new("big.e57"),
            "big",
            &ImportOptions::default(),
            &mut warnings,
        )
        .unwrap();
        let mut n = 0u64;
        while let Some(ch) = c.next_chunk(4096).unwrap() {
            n += ch.len() as u64;
        }
        n
    });
    assert_eq!(count.unwrap(), n as u64);
    // Chunks of 4096 points (64 KB) and a page buffer; the points themselves, 3.2 MB, never
    // live at once.
    assert!(heap.peak < 1 << 20 && heap.largest < 256 << 10, "{heap:?}");
}
