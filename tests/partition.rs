//! `gs-pack partition` and `gs-pack merge`: block packs hold the pack's own records and exactly
//! the points their rule takes, merges keep each part of the scene once, and every refusal
//! names what to do and writes nothing.

#[path = "common/gs_pack.rs"]
mod gs_pack;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use gs_pack::{gs_pack, text};
use ramsplat::dataset::Split;
use ramsplat::export::ply::{self, LoadOptions, PlyEncoding};
use ramsplat::partition::{read_partition, PartitionFile, PARTITION_FILE};
use ramsplat::rng::Rng;
use ramsplat::scene::gaussians::Gaussians;
use ramsplat::shard::reader::Pack;
use ramsplat::shard::{PointChunkLayout, PointChunkRef};

/// A synthetic scene packed at `dir/scene.pack`: 40 views of 160×120, 5,000 points.
fn scene(dir: &Path) -> PathBuf {
    let data = dir.join("syn");
    let o = gs_pack(&[
        "synth",
        "-o",
        data.to_str().unwrap(),
        "--views",
        "40",
        "--width",
        "160",
        "--height",
        "120",
        "--points",
        "5000",
        "--seed",
        "5",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let pack = dir.join("scene.pack");
    let o = gs_pack(&[
        "convert",
        data.to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    pack
}

fn partition(pack: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "partition",
        pack.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    gs_pack(&args)
}

/// Every SfM point of a pack, as bits (for exact comparison).
fn points(pack: &Pack) -> Vec<[u32; 3]> {
    let m = pack.manifest();
    let (clouds, _) = m.sfm_clouds();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for c in clouds {
        let cloud = &m.clouds[c];
        for (k, ch) in cloud.chunks.iter().enumerate() {
            let layout =
                PointChunkLayout::new(ch.points as usize, cloud.has_labels, cloud.has_normals);
            buf.resize(layout.total, 0);
            pack.read_chunk_into(c, k, &mut buf).unwrap();
            let chunk = PointChunkRef::new(layout, &buf).unwrap();
            out.extend((0..chunk.len()).map(|i| chunk.xyz(i).map(f32::to_bits)));
        }
    }
    out.sort_unstable();
    out
}

fn view_bytes(pack: &Pack, i: usize) -> Vec<u8> {
    let mut out = vec![0u8; pack.manifest().views[i].decoded_len()];
    pack.read_view_into(i, &mut out).unwrap();
    out
}

#[test]
fn blocks_hold_the_packs_records_and_the_points_their_rule_takes() {
    let dir = tempfile::tempdir().unwrap();
    let pack_dir = scene(dir.path());
    let manifest_before = std::fs::read(pack_dir.join("manifest.json")).unwrap();
    for (name, extra) in [
        ("seen", &["--blocks", "2x2", "--min-coverage", "0.3"][..]),
        (
            "region",
            &["--blocks", "3x1", "--block-points", "region"][..],
        ),
    ] {
        let out = dir.path().join(name);
        let o = partition(&pack_dir, &out, extra);
        assert!(o.status.success(), "{}", text(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains("block-1-0"), "{stderr}");
        check_blocks(&pack_dir, &out, name);
    }
    // The source pack was only read.
    assert_eq!(
        std::fs::read(pack_dir.join("manifest.json")).unwrap(),
        manifest_before
    );
    Pack::open(&pack_dir).unwrap().verify(&|_, _| {}).unwrap();
}

/// Each block of the partition in `out` holds the pack's records of its views, all the views
/// whose camera lies in its region, exactly the points its rule (`rule`) takes, and every
/// training view trains in some block.
fn check_blocks(pack_dir: &Path, out: &Path, rule: &str) {
    let pack = Pack::open(pack_dir).unwrap();
    let m = pack.manifest();
    let by_name: HashMap<&str, usize> = m
        .views
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name.as_str(), i))
        .collect();
    let all_points = points(&pack);
    let file: PartitionFile = read_partition(out).unwrap();
    assert_eq!(file.pack_id, m.pack_id);
    assert_eq!(
        serde_json::to_value(file.points).unwrap(),
        serde_json::json!(rule)
    );
    let mut train_seen = vec![0usize; m.views.len()];
    for b in &file.blocks {
        let block = Pack::open(&out.join(&b.name)).unwrap();
        block.verify(&|_, _| {}).unwrap();
        let bm = block.manifest();
        assert_eq!(bm.pack_id, b.pack_id, "{}", b.name);
        let train = bm.split_indices(Split::Train).len();
        assert_eq!(
            (train, bm.views.len() - train),
            (b.train_views, b.test_views)
        );
        // Each view is the pack's: name, split, camera, stored record and pixels.
        for (j, v) in bm.views.iter().enumerate() {
            let i = by_name[v.name.as_str()];
            let p = &m.views[i];
            assert_eq!(
                (&v.camera, v.split, v.codec, v.record.checksum),
                (&p.camera, p.split, p.codec, p.record.checksum)
            );
            assert_eq!(view_bytes(&block, j), view_bytes(&pack, i));
            if v.split == Split::Train {
                train_seen[i] += 1;
            }
        }
        // The views whose camera lies in the region are all there.
        for p in &m.views {
            let g = file.frame.coords(p.camera.centre());
            if b.region.contains([g[0], g[1]]) {
                assert!(bm.views.iter().any(|v| v.name == p.name), "{}", p.name);
            }
        }
        // The points: exactly those in the region or (`seen`) seen by one of its views.
        let cameras: Vec<_> = match rule {
            "seen" => bm.views.iter().map(|v| v.camera).collect(),
            _ => Vec::new(),
        };
        let expected: Vec<[u32; 3]> = all_points
            .iter()
            .copied()
            .filter(|bits| {
                let p = bits.map(|b| f64::from(f32::from_bits(b)));
                let g = file.frame.coords(p);
                b.region.contains([g[0], g[1]])
                    || cameras.iter().any(|c| {
                        c.project(p).is_some_and(|[x, y]| {
                            (0.0..c.width as f64).contains(&x)
                                && (0.0..c.height as f64).contains(&y)
                        })
                    })
            })
            .collect();
        let held = points(&block);
        assert_eq!(held.len() as u64, b.points);
        assert_eq!(held, expected, "{}", b.name);
        assert!(!held.is_empty(), "{}", b.name);
    }
    // Every training view trains in some block.
    for (i, v) in m.views.iter().enumerate() {
        if v.split == Split::Train {
            assert!(train_seen[i] >= 1, "{}", v.name);
        }
    }
}

/// A run folder as gs-train leaves it, for `gs-pack merge`: `report.json` naming the block
/// pack and one model.
fn fake_run(dir: &Path, pack_id: &str, g: &Gaussians) -> PathBuf {
    std::fs::create_dir_all(dir.join("point_cloud/iteration_7")).unwrap();
    ply::save(
        &dir.join("point_cloud/iteration_7/point_cloud.ply"),
        g,
        PlyEncoding::BinaryLittleEndian,
    )
    .unwrap();
    let report = serde_json::json!({
        "pack": "somewhere",
        "pack_id": pack_id,
        "iterations": 7,
        "interrupted": false,
        "point_clouds": ["point_cloud/iteration_7/point_cloud.ply"],
    });
    std::fs::write(dir.join("report.json"), report.to_string()).unwrap();
    dir.to_owned()
}

fn merge(partition: &Path, runs: &[PathBuf], out: &Path) -> std::process::Output {
    let mut args = vec!["merge".to_owned(), partition.display().to_string()];
    args.extend(runs.iter().map(|r| r.display().to_string()));
    args.extend(["-o".to_owned(), out.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    gs_pack(&args)
}

#[test]
fn merge_keeps_each_part_of_the_scene_once_from_the_block_that_owns_it() {
    let dir = tempfile::tempdir().unwrap();
    let pack_dir = scene(dir.path());
    let out = dir.path().join("blocks");
    let o = partition(&pack_dir, &out, &["--blocks", "3x2"]);
    assert!(o.status.success(), "{}", text(&o));
    let file = read_partition(&out).unwrap();
    // The same 3,000 Gaussians in every block's model, each block's marked by its opacity.
    let n = 3000;
    let mut rng = Rng::new(2);
    let mut base = Gaussians::zeros(n, 1);
    for m in base.means.iter_mut() {
        *m = [0, 1, 2].map(|_| (rng.next_f64() * 8.0 - 4.0) as f32);
    }
    for r in base.rotations.iter_mut() {
        *r = [1.0, 0.0, 0.0, 0.0];
    }
    let mut runs = Vec::new();
    for (k, b) in file.blocks.iter().enumerate() {
        let mut g = base.clone();
        g.logit_opacities.fill(k as f32);
        runs.push(fake_run(
            &dir.path().join(format!("run-{k}")),
            &b.pack_id.to_string(),
            &g,
        ));
    }
    let merged_path = dir.path().join("merged.ply");
    // Runs in any order.
    runs.reverse();
    let o = merge(&out, &runs, &merged_path);
    assert!(o.status.success(), "{}", text(&o));
    let merged = ply::load(&merged_path, &LoadOptions::default()).unwrap();
    assert_eq!(merged.len(), n, "{}", text(&o));
    let mut seen = HashMap::new();
    for (m, &o) in merged.means.iter().zip(&merged.logit_opacities) {
        assert!(seen.insert(m.map(f32::to_bits), o).is_none());
    }
    for m in &base.means {
        let k = seen[&m.map(f32::to_bits)] as usize;
        let g = file.frame.coords(m.map(f64::from));
        assert!(file.blocks[k].core.contains([g[0], g[1]]), "{m:?}");
    }
    runs.reverse();

    // Refusals, each writing nothing.
    let refused = |o: std::process::Output, words: &str| {
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains(words), "{words:?} not in\n{stderr}");
    };
    let target = dir.path().join("refused.ply");
    refused(
        merge(&out, &runs[..5], &target),
        "no run given for block(s) block-2-1",
    );
    let mut twice = runs.clone();
    twice.push(runs[1].clone());
    refused(merge(&out, &twice, &target), "both trained block block-0-1");
    let stranger = fake_run(&dir.path().join("stranger"), "0123456789abcdef", &base);
    let mut with_stranger = runs.clone();
    with_stranger.push(stranger);
    refused(
        merge(&out, &with_stranger, &target),
        "which is none of the blocks of",
    );
    refused(
        merge(&out, &[runs[0].clone(), dir.path().to_owned()], &target),
        "no report.json",
    );
    refused(merge(&pack_dir, &runs, &target), "not a partition file");
    let own = runs[0].join("point_cloud/iteration_7/point_cloud.ply");
    let before = std::fs::read(&own).unwrap();
    refused(merge(&out, &runs, &own), "it is one of the models to merge");
    assert_eq!(std::fs::read(&own).unwrap(), before);
    assert!(!target.exists());
}

#[test]
fn partition_refusals_name_what_to_do_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pack_dir = scene(dir.path());
    let out = dir.path().join("blocks");
    let refused = |o: std::process::Output, code: i32, words: &str| {
        assert_eq!(o.status.code(), Some(code), "{}", text(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains(words), "{words:?} not in\n{stderr}");
    };
    refused(
        partition(&pack_dir, &out, &["--blocks", "1x1"]),
        1,
        "at least 2 in all",
    );
    refused(
        partition(&pack_dir, &out, &["--blocks", "2by2"]),
        2,
        "COLUMNSxROWS",
    );
    refused(
        partition(&pack_dir, &out, &["--blocks", "2x2", "--up", "0,0,0"]),
        1,
        "not zero",
    );
    refused(
        partition(&pack_dir, &out, &["--blocks", "2x2", "--overlap", "1.5"]),
        1,
        "--overlap 1.5",
    );
    refused(
        partition(&pack_dir, &out, &["--blocks", "6x6"]),
        1,
        "give fewer --blocks",
    );
    refused(
        partition(&pack_dir, &pack_dir.join("blocks"), &["--blocks", "2x2"]),
        1,
        "lies inside the pack",
    );
    // A folder with something in it is never written over.
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), b"mine").unwrap();
    refused(
        partition(&pack_dir, &out, &["--blocks", "2x2"]),
        1,
        "already exists",
    );
    assert_eq!(std::fs::read(out.join("keep.txt")).unwrap(), b"mine");
    std::fs::remove_file(out.join("keep.txt")).unwrap();
    // A dry run prints the plan and writes nothing; an empty folder is filled.
    let o = gs_pack(&[
        "partition",
        pack_dir.to_str().unwrap(),
        "--blocks",
        "2x1",
        "--dry-run",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("dry run: nothing written"));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    // A killed run's temporary folder (its process gone) is cleared on the way.
    let stale = dir.path().join(".blocks.partial-4194303");
    std::fs::create_dir_all(stale.join("block-0-0")).unwrap();
    let o = partition(&pack_dir, &out, &["--blocks", "2x1", "--up", "0,0,1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!stale.exists());
    assert!(out.join(PARTITION_FILE).is_file());
    // No temporary folder is left beside it.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn partitioned_blocks_train_and_merge_into_a_model_that_scores_the_pack() {
    let dir = tempfile::tempdir().unwrap();
    let pack_dir = scene(dir.path());
    let out = dir.path().join("blocks");
    let o = partition(&pack_dir, &out, &["--blocks", "2x1"]);
    assert!(o.status.success(), "{}", text(&o));
    let file = read_partition(&out).unwrap();
    let mut runs = Vec::new();
    for b in &file.blocks {
        let run = dir.path().join("runs").join(&b.name);
        let o = Command::new(env!("CARGO_BIN_EXE_gs-train"))
            .args([
                out.join(&b.name).to_str().unwrap(),
                "-o",
                run.to_str().unwrap(),
                "--iterations",
                "20",
                "--checkpoint-every",
                "0",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        runs.push(run);
    }
    let merged = dir.path().join("merged.ply");
    let o = merge(&out, &runs, &merged);
    assert!(o.status.success(), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("Gaussians in its core"), "{stderr}");
    let model = ply::load(&merged, &LoadOptions::default()).unwrap();
    assert!(!model.is_empty());
    let o = Command::new(env!("CARGO_BIN_EXE_gs-render"))
        .args([
            "--ply",
            merged.to_str().unwrap(),
            "--pack",
            pack_dir.to_str().unwrap(),
            "-o",
            dir.path().join("eval").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("mean PSNR"));
}
