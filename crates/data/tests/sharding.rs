//! Shards are disjoint and together are the dataset, for 1–8 workers, for images and for
//! token streams; the loader gives every rank the same number of batches.

use data::{
    shard_indices, shard_range, Dataset, Loader, SyntheticImages, SyntheticTokens, TokenBatches,
};
use std::collections::HashSet;
use std::sync::Arc;

#[test]
fn image_shards_partition_the_dataset() {
    for n in [1000, 1003] {
        for world in 1..=8 {
            let order: Vec<usize> = (0..n).rev().collect();
            let mut seen = HashSet::new();
            for rank in 0..world {
                let s = shard_indices(&order, world, rank);
                assert!(s.len() == n / world || s.len() == n / world + 1);
                for i in s {
                    assert!(seen.insert(i), "sample {i} in two shards (world {world})");
                }
            }
            assert_eq!(seen.len(), n, "world {world}: the union is not the dataset");
        }
    }
}

#[test]
fn loader_shards_are_disjoint_each_epoch_and_reshuffled() {
    let ds: Arc<dyn Dataset> = Arc::new(SyntheticImages {
        n: 203,
        shape: [1, 2, 2],
        classes: 3,
        seed: 1,
    });
    for world in 1..=8 {
        let loaders: Vec<Loader> = (0..world)
            .map(|r| Loader::new(ds.clone(), 4, r, world, 7).unwrap())
            .collect();
        let mut all = HashSet::new();
        for l in &loaders {
            assert_eq!(
                l.batches_per_epoch(),
                loaders[0].batches_per_epoch(),
                "ranks must run the same number of batches"
            );
            for i in l.shard(0) {
                assert!(all.insert(i));
            }
        }
        assert_eq!(all.len(), 203);
        assert_ne!(loaders[0].shard(0), loaders[0].shard(1), "epochs reshuffle");
        assert_eq!(
            loaders[0].shard(3),
            Loader::new(ds.clone(), 4, 0, world, 7).unwrap().shard(3),
            "deterministic from the seed"
        );
    }
}

#[test]
fn token_stream_shards_are_disjoint_runs() {
    let stream = SyntheticTokens {
        n: 10_007,
        vocab: 50,
        seed: 2,
    }
    .stream();
    for world in 1..=8 {
        let mut covered = 0;
        let mut last_end = 0;
        for rank in 0..world {
            let r = shard_range(stream.len(), world, rank);
            assert_eq!(r.start, last_end, "shards are contiguous and disjoint");
            last_end = r.end;
            covered += r.len();
            let b = TokenBatches::new(&stream, 4, world, rank).unwrap();
            // Column 0 of the batchified shard is the start of this rank's run.
            let (x, y) = b.window(0, 3).unwrap();
            let x = x.to_vec::<u32>().unwrap();
            assert_eq!(x[0], stream[r.start]);
            assert_eq!(x[4], stream[r.start + 1], "time-major: step 1 of stream 0");
            assert_eq!(
                y.to_vec::<u32>().unwrap()[0],
                stream[r.start + 1],
                "targets are the next tokens"
            );
        }
        assert_eq!(covered, stream.len());
    }
}
