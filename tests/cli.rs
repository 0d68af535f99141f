//! End-to-end tests of the `gs-pack` binary on real and generated datasets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(rel)
}

fn gs_pack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gs-pack"))
        .args(args)
        .output()
        .expect("run gs-pack")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn info_json(pack: &Path) -> serde_json::Value {
    let o = gs_pack(&["info", pack.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).expect("info --json prints one JSON object")
}

#[test]
fn fox_packs_50_views_reports_17_missing_and_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("fox.pack");
    let o = gs_pack(&[
        "convert",
        shared("fox").to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
        "--downscale",
        "4",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("17"),
        "the 17 missing images are reported: {err}"
    );
    let info = info_json(&pack);
    assert_eq!(info["views"], 50);
    assert_eq!(
        info["test_views"], 7,
        "every 8th of 50 views: indices 0, 8, …, 48"
    );
    assert_eq!(info["train_views"], 43);
    assert_eq!(info["points"], 0);
    assert_eq!(info["no_sfm_points"], true);
    assert_eq!(info["resolutions"][0]["width"], 270);
    assert_eq!(info["resolutions"][0]["height"], 480);
    assert!(info["bytes_on_disk"].as_u64().unwrap() > 0);
    assert_eq!(info["decoded_bytes"], 50 * 270 * 480 * 3);

    let o = gs_pack(&["verify", pack.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));

    // Without --force the existing pack is left alone.
    let o = gs_pack(&[
        "convert",
        shared("fox").to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--force"),
        "{}",
        text(&o)
    );

    // One flipped byte in the middle of the shard makes verify fail naming the shard.
    let shard = pack.join("shard-00000.gss");
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&shard, &bytes).unwrap();
    let o = gs_pack(&["verify", pack.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("shard-00000.gss"),
        "{}",
        text(&o)
    );
}

#[test]
fn fox_strict_refuses_missing_images_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("fox.pack");
    let o = gs_pack(&[
        "convert",
        shared("fox").to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
        "--strict",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("17"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "no partial output"
    );
}

#[test]
fn labelled_kinect_scans_pack_as_three_labelled_clouds() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("mosd.pack");
    let o = gs_pack(&[
        "convert",
        shared("mosd_kinect_labeled/ply").to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let info = info_json(&pack);
    assert_eq!(info["views"], 0);
    let clouds = info["clouds"].as_array().unwrap();
    assert_eq!(clouds.len(), 3);
    let test63 = clouds
        .iter()
        .find(|c| c["name"] == "test63")
        .expect("test63 cloud");
    assert_eq!(test63["points"], 182_372);
    assert_eq!(test63["has_labels"], true);
    let o = gs_pack(&["verify", pack.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn statue_model_without_images_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("statue.pack");
    let o = gs_pack(&[
        "convert",
        shared("colmap_statue_of_liberty").to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!pack.exists());
}

#[test]
fn unknown_dataset_and_missing_pack_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let o = gs_pack(&[
        "convert",
        tmp.path().to_str().unwrap(),
        "-o",
        tmp.path().join("x").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--format"),
        "{}",
        text(&o)
    );
    let o = gs_pack(&["info", tmp.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a ramsplat pack"),
        "{}",
        text(&o)
    );
    let o = gs_pack(&["convert"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
