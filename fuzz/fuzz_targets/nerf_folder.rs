//! Fuzz target for the NeRF importer's folder forms: a folder holding any of
//! `transforms_train.json`, `transforms_test.json`, `transforms_val.json` and
//! `transforms.json` into `import::nerf::import` (metadata only) must give a scene or an error,
//! never a panic, and an accepted scene must be what the module doc promises:
//!
//! - with a train or test file: exactly the frames of those files, each with its file's split
//!   (checked against the files' `frames[*].file_path` read here with serde_json; the val file
//!   and a `transforms.json` beside them add nothing, and nerfstudio's split lists inside a
//!   split file change nothing);
//! - with only `transforms.json`: the same views and splits as importing that file itself,
//!   and an error exactly when that import errs.
//!
//! Input: the first byte's low four bits say which of the four files exist (in the order
//! above); the rest, cut at NUL bytes, are their contents in that order (a missing piece is an
//! empty file). The `nerf` target covers one file's contents; this one their combination.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run nerf_folder corpus/nerf_folder seeds/nerf_folder`
//! from `fuzz/` (see fuzz/README.md).
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use ramsplat::dataset::Split;
use ramsplat::import::nerf::import;

// `import_written` is the one-file targets'; this one writes its own files.
#[allow(dead_code)]
#[path = "common/dataset_file.rs"]
mod dataset_file;

const FILES: [(&str, Option<Split>); 4] = [
    ("transforms_train.json", Some(Split::Train)),
    ("transforms_test.json", Some(Split::Test)),
    ("transforms_val.json", None),
    ("transforms.json", None),
];

/// `file_path` of every frame of a transforms file, or `None` when the oracle cannot read it
/// (the importer reads Python's bare `NaN` too, which serde_json refuses).
fn frame_names(text: &[u8]) -> Option<Vec<String>> {
    let doc: serde_json::Value = serde_json::from_slice(text).ok()?;
    doc.get("frames")?
        .as_array()?
        .iter()
        .map(|f| f.get("file_path")?.as_str().map(str::to_owned))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let dir = dataset_file::folder("nerf_folder");
    let mut pieces = rest.split(|&b| b == 0);
    let mut present = [None; 4];
    for (k, (name, _)) in FILES.iter().enumerate() {
        let path = dir.join(name);
        if flags >> k & 1 == 1 {
            let text = pieces.next().unwrap_or_default();
            std::fs::write(&path, text).expect("write the input");
            present[k] = Some(text);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
    let options = dataset_file::metadata_only();
    let folder = import(dir, &options);
    let Ok(scene) = &folder else {
        if present[..2].iter().all(Option::is_none) && present[3].is_some() {
            assert!(
                import(&dir.join("transforms.json"), &options).is_err(),
                "transforms.json alone imports, but not its folder"
            );
        }
        return;
    };
    dataset_file::check_accepted(scene);
    let got: Vec<(&str, Option<Split>)> = scene
        .views
        .iter()
        .map(|v| (v.name.as_str(), v.split))
        .collect();
    if present[..2].iter().any(Option::is_some) {
        // The split files' frames, each with its file's split, sorted by name as the views are.
        let mut want = BTreeMap::new();
        for (text, (_, split)) in present[..2].iter().zip(FILES) {
            let Some(text) = text else { continue };
            let Some(names) = frame_names(text) else {
                return;
            };
            for n in names {
                assert!(want.insert(n, split).is_none(), "a name imported twice");
            }
        }
        let want: Vec<(&str, Option<Split>)> = want.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        assert_eq!(
            got, want,
            "the folder's views are not its split files' frames"
        );
    } else {
        let alone = import(&dir.join("transforms.json"), &options)
            .expect("the folder imports, but not its transforms.json alone");
        let want: Vec<(&str, Option<Split>)> = alone
            .views
            .iter()
            .map(|v| (v.name.as_str(), v.split))
            .collect();
        assert_eq!(got, want, "the folder and its transforms.json differ");
    }
});
