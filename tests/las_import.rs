//! LAS and LAZ point clouds end to end (`ramsplat::import::las`):
//!
//! - files written by LASzip itself (`tests/data/las`, made by `tools/las_fixtures.py` with
//!   laspy's LASzip backend) read back exactly, compressed or not;
//! - `gs-pack convert scan.laz` packs a cloud with its classes as labels, and
//!   `gs-pack convert DATASET --points scan.laz` seeds a dataset's training from a scan;
//! - a million-point LAZ streams in bounded memory, and damaged files claiming gigabytes
//!   allocate nothing of the sort (a counting allocator on the reading thread).

use std::path::{Path, PathBuf};

use ramsplat::dataset::Format;
use ramsplat::import::las::cloud_from_bytes;
use ramsplat::import::{open, ImportOptions};
use ramsplat::shard::reader::Pack;
use ramsplat::synth::las::{las_bytes, las_points, LasPoint, LasSpec, LazChunks};

#[path = "common/heap.rs"]
mod heap;
use heap::measured;

#[path = "common/gs_pack.rs"]
mod gs_pack;
use gs_pack::{gs_pack, packed, scene_and_surface, stream, text, Points};

#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/las")
        .join(name)
}

/// What the fixture generator wrote: `las_points(600)` at `LasSpec::new`'s scale and offset,
/// every tenth point from the fourth withheld when `withheld`.
fn expected(colour: bool, withheld: bool) -> Points {
    let spec = LasSpec::new(2, 0);
    las_points(600)
        .iter()
        .enumerate()
        .filter(|(i, _)| !(withheld && i % 10 == 3))
        .map(|(_, p)| {
            let xyz = std::array::from_fn(|a| {
                (f64::from(p.xyz[a]) * spec.scale[a] + spec.offset[a]) as f32
            });
            let rgb = if colour {
                p.rgb.map(|v| (v >> 8) as u8)
            } else {
                [128; 3]
            };
            (xyz, rgb, i32::from(p.class))
        })
        .collect()
}

#[test]
fn files_written_by_laszip_read_back_exactly() {
    for (stem, colour, withheld) in [
        ("f3_v12", true, false),
        ("f7_v14", true, true),
        ("f1_v12", false, false),
    ] {
        let want = expected(colour, withheld);
        for ext in ["las", "laz"] {
            let path = fixture(&format!("{stem}.{ext}"));
            let mut scene = open(&path, Format::Auto, &ImportOptions::default()).unwrap();
            assert_eq!(scene.format, Format::Las);
            assert_eq!(scene.clouds.len(), 1);
            let cloud = scene.clouds[0].as_mut();
            assert_eq!(cloud.name(), stem);
            assert_eq!(cloud.declared_len(), Some(want.len() as u64));
            assert_eq!(stream(cloud, 97), want, "{stem}.{ext}");
            assert_eq!(
                scene.warnings.iter().any(|w| w.contains("withheld")),
                withheld,
                "{:?}",
                scene.warnings
            );
        }
    }
}

#[test]
fn gs_pack_converts_a_scan_and_seeds_a_dataset_from_one() {
    let tmp = tempfile::tempdir().unwrap();

    // A cloud on its own: the classes become labels.
    let pack = tmp.path().join("scan.pack");
    let scan = fixture("f7_v14.laz");
    let o = gs_pack(&[
        "convert",
        scan.to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("60 of 600 points are flagged withheld"),
        "{}",
        text(&o)
    );
    let want: Vec<_> = expected(true, true)
        .into_iter()
        .map(|(p, c, l)| (p, c, Some(l)))
        .collect();
    assert_eq!(packed(&pack, 0), want);
    assert_eq!(
        Pack::open(&pack).unwrap().manifest().source.format,
        Format::Las
    );

    // A folder of scans: the file stems name the clouds, so a .las and a .laz of the same
    // stem are refused.
    let o = gs_pack(&[
        "convert",
        fixture("").to_str().unwrap(),
        "-o",
        tmp.path().join("all.pack").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("cloud name `f1_v12` (the file stem) is also used by"),
        "{}",
        text(&o)
    );

    // A dataset seeded from a scan of its surfaces: the synthetic scene's points written as
    // LAZ at a 0.1 mm quantum.
    let (scene, dense) = scene_and_surface(tmp.path());
    let mut spec = LasSpec::new(4, 7).laz(LazChunks::Fixed(1000));
    spec.scale = [1e-4; 3];
    spec.offset = [0.0; 3];
    let pts: Vec<LasPoint> = dense
        .iter()
        .map(|(xyz, rgb)| LasPoint {
            xyz: xyz.map(|v| (f64::from(v) / 1e-4).round() as i32),
            rgb: rgb.map(|c| u16::from(c) * 257),
            class: 2,
            withheld: false,
        })
        .collect();
    std::fs::write(scene.join("scan.laz"), las_bytes(&spec, &pts)).unwrap();
    let pack = tmp.path().join("seeded.pack");
    let o = gs_pack(&[
        "convert",
        scene.to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
        "--points",
        "scan.laz",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("its 2500 points replace the dataset's 300 SfM points")
            && err.contains("(100.0 % of a sample in view)"),
        "{err}"
    );
    let got = packed(&pack, 0);
    assert_eq!(got.len(), 2500);
    for (k, ((xyz, rgb, label), (want_xyz, want_rgb))) in got.iter().zip(&dense).enumerate() {
        assert_eq!((rgb, *label), (want_rgb, Some(2)), "point {k}");
        for a in 0..3 {
            assert!(
                (xyz[a] - want_xyz[a]).abs() <= 0.6e-4,
                "point {k}: {xyz:?} {want_xyz:?}"
            );
        }
    }
}

/// Streams `bytes` on a rayon pool of `threads` threads (one: LAZ decoded a record at a time;
/// more: chunks in parallel), measuring the heap of the thread that reads; returns the number
/// of points, a hash of every delivered value and the heap.
fn stream_on(threads: usize, bytes: &std::sync::Arc<[u8]>) -> (u64, u64, heap::Heap) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        let (out, heap) = measured(|| {
            let mut warnings = Vec::new();
            let mut c = cloud_from_bytes(
                bytes.clone(),
                Path::new("big.laz"),
                "big",
                &ImportOptions::default(),
                &mut warnings,
            )
            .unwrap();
            let (mut n, mut hash) = (0u64, 0u64);
            while let Some(ch) = c.next_chunk(4096).unwrap() {
                n += ch.len() as u64;
                for ((xyz, rgb), label) in
                    ch.xyz.iter().zip(&ch.rgb).zip(ch.labels.as_ref().unwrap())
                {
                    for v in xyz
                        .iter()
                        .map(|v| u64::from(v.to_bits()))
                        .chain(rgb.iter().map(|&c| u64::from(c)))
                        .chain([*label as u64])
                    {
                        hash = (hash ^ v).wrapping_mul(0x100_0000_01b3);
                    }
                }
            }
            (n, hash)
        });
        let (n, hash) = out.unwrap();
        (n, hash, heap)
    })
}

#[test]
fn a_million_point_laz_streams_in_bounded_memory() {
    let pts = las_points(1_000_000);
    for spec in [
        LasSpec::new(2, 3).laz(LazChunks::Fixed(50_000)),
        LasSpec::new(4, 7).laz(LazChunks::Fixed(50_000)),
        LasSpec::new(4, 8).laz(LazChunks::Variable(20_000)),
    ] {
        let bytes: std::sync::Arc<[u8]> = las_bytes(&spec, &pts).into();
        let (n, one, heap) = stream_on(1, &bytes);
        assert_eq!(n, 1_000_000);
        // One thread: a chunk of 4,096 points (76 KiB), a batch of records (139 to 156 KiB,
        // the largest allocation) and the decoder's state, mostly LASzip's adaptive models
        // (hundreds of 256-symbol tables): measured 2.28 to 2.43 MB of live heap, the same at
        // any point count, against 19 MB of points delivered.
        assert!(heap.peak < 4 << 20, "{spec:?}: {heap:?}");
        assert!(heap.largest < 256 << 10, "{spec:?}: {heap:?}");
        // Four threads: the same points, decoded four whole chunks at a time. The reading
        // thread's largest allocation is that batch, at most 16 MiB: measured 6.8 and 7.2 MB
        // (4 × 50,000 records of 34 and 36 bytes) and 3.0 MB (4 × 20,000 of 38), with 5.7 to
        // 10.6 MB of live heap on that thread.
        let (n, four, heap) = stream_on(4, &bytes);
        assert_eq!((n, four), (1_000_000, one), "{spec:?}");
        assert!(heap.largest <= 16 << 20, "{spec:?}: {heap:?}");
    }
}

#[test]
fn damaged_files_claiming_gigabytes_allocate_nothing_of_the_sort() {
    let pts = las_points(2000);
    let read = |bytes: Vec<u8>| {
        measured(move || {
            let mut warnings = Vec::new();
            cloud_from_bytes(
                bytes,
                Path::new("d.laz"),
                "d",
                &ImportOptions::default(),
                &mut warnings,
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        })
    };
    let patch = |bytes: &[u8], at: usize, with: &[u8]| {
        let mut b = bytes.to_vec();
        b[at..at + with.len()].copy_from_slice(with);
        b
    };
    let layered = las_bytes(&LasSpec::new(4, 7).laz(LazChunks::Fixed(500)), &pts);
    let data_at = u32::from_le_bytes(layered[96..100].try_into().unwrap()) as usize;
    let table = i64::from_le_bytes(layered[data_at..data_at + 8].try_into().unwrap()) as usize;
    // First chunk: 8-byte table offset, a raw 36-byte point, the u32 count, then nine Point14
    // layer sizes and the RGB layer's. Claim 4 GB in each.
    let sizes = data_at + 8 + 36 + 4;
    let mut cases = vec![(
        "every layer claims 4 GB",
        patch(&layered, sizes, &[0xff; 40]),
        "layers claim",
    )];
    cases.push((
        "the chunk table claims 4 billion chunks",
        patch(&layered, table + 4, &u32::MAX.to_le_bytes()),
        "lists 4294967295 chunks",
    ));
    let mut count = layered.clone();
    count[247..255].copy_from_slice(&(1u64 << 40).to_le_bytes());
    cases.push((
        "the header claims 2^40 points",
        count,
        "fewer than the header's",
    ));
    let plain = las_bytes(&LasSpec::new(4, 7), &pts);
    cases.push((
        "an uncompressed file claims 2^40 points",
        patch(&plain, 247, &(1u64 << 40).to_le_bytes()),
        "holds only 2,000",
    ));
    for (what, bytes, want) in cases {
        let (out, heap) = read(bytes);
        let e = out.unwrap().unwrap_err();
        assert!(e.contains(want), "{what}: {e}");
        assert!(
            heap.largest < 256 << 10 && heap.peak < 1 << 20,
            "{what}: {heap:?}"
        );
    }
}

/// A LASzip file (point format 3) damaged so that its GPS-time data keeps switching sequence:
/// found by the fuzz target, it overflowed the stack inside the `laz` crate's recursive
/// GPS-time decoder and aborted the process. Now an error naming the point, on any thread
/// (test threads have 2 MiB stacks) and either thread count.
#[test]
fn gps_time_data_that_recurses_without_end_is_an_error() {
    let bytes = std::fs::read(fixture("gps_recursion.laz")).unwrap();
    for threads in [1, 4] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let e = pool.install(|| {
            let mut warnings = Vec::new();
            cloud_from_bytes(
                bytes.clone(),
                Path::new("gps.laz"),
                "gps",
                &ImportOptions::default(),
                &mut warnings,
            )
            .map(|_| ())
            .unwrap_err()
        });
        let e = e.to_string();
        assert!(
            e.contains("gps.laz: record 359") && e.contains("deep into recursion"),
            "{e}"
        );
    }
}
