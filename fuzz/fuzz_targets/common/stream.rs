//! What every point-cloud fuzz target asks of a cloud its importer accepted from bytes in
//! memory (which cannot change between the validation pass and the stream): it streams
//! exactly the points it declared, in well-formed chunks whose attributes match what the cloud
//! says it has, every coordinate finite.

use ramsplat::dataset::PointSource;
use ramsplat::import::ImportError;

pub fn stream_whole(cloud: &mut dyn PointSource<Error = ImportError>) {
    let mut streamed = 0u64;
    loop {
        match cloud.next_chunk(1000) {
            Ok(Some(c)) => {
                assert!(!c.is_empty() && c.len() <= 1000 && c.is_consistent());
                assert_eq!(c.labels.is_some(), cloud.has_labels());
                assert_eq!(c.normals.is_some(), cloud.has_normals());
                assert!(c.xyz.iter().flatten().all(|v| v.is_finite()));
                streamed += c.len() as u64;
            }
            Ok(None) => break,
            Err(e) => panic!("a validated in-memory cloud failed to stream: {e}"),
        }
    }
    assert_eq!(Some(streamed), cloud.declared_len());
}
