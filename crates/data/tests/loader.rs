//! The loader's batches: shapes, labels, prefetching over a whole epoch, augmentation.

use data::{Augment, Dataset, ImageDataset, Loader, SyntheticImages};
use std::sync::Arc;
use tensor::Rng;

#[test]
fn an_epoch_yields_every_batch_of_the_shard() {
    let ds: Arc<dyn Dataset> = Arc::new(SyntheticImages {
        n: 100,
        shape: [3, 8, 8],
        classes: 10,
        seed: 3,
    });
    let l = Loader::new(ds.clone(), 8, 1, 2, 0).unwrap();
    let shard = l.shard(5);
    let batches: Vec<_> = l.epoch(5).collect::<Result<_, _>>().unwrap();
    assert_eq!(batches.len(), 6); // 50 samples per rank, batches of 8
    for (b, batch) in batches.iter().enumerate() {
        assert_eq!(batch.inputs.dims(), [8, 3, 8, 8]);
        let want: Vec<u32> = shard[b * 8..(b + 1) * 8]
            .iter()
            .map(|&i| (i % 10) as u32)
            .collect();
        assert_eq!(batch.labels.to_vec::<u32>().unwrap(), want);
    }
    // The same epoch twice gives the same data.
    let again: Vec<_> = l.epoch(5).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        again[3].inputs.to_vec::<f32>().unwrap(),
        batches[3].inputs.to_vec::<f32>().unwrap()
    );
    assert!(
        Loader::new(ds, 60, 0, 2, 0).is_err(),
        "a batch larger than a shard is refused"
    );
}

#[test]
fn keep_last_adds_the_shards_smaller_last_batch() {
    let ds: Arc<dyn Dataset> = Arc::new(SyntheticImages {
        n: 103,
        shape: [1, 2, 2],
        classes: 10,
        seed: 3,
    });
    // Shards of 35, 34 and 34 samples: batches of 8, then the 3 or 2 left over.
    let mut seen = Vec::new();
    for rank in 0..3 {
        let mut l = Loader::new(ds.clone(), 8, rank, 3, 0).unwrap();
        l.shuffle = false;
        assert_eq!(l.epoch(0).count(), 4, "training drops the rest");
        l.keep_last = true;
        let shard = l.shard(0);
        let batches: Vec<_> = l.epoch(0).collect::<Result<_, _>>().unwrap();
        assert_eq!(batches.len(), 5);
        let sizes: Vec<usize> = batches.iter().map(|b| b.inputs.dims()[0]).collect();
        assert_eq!(sizes, [8, 8, 8, 8, shard.len() - 32]);
        seen.extend(shard);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..103).collect::<Vec<_>>(), "every sample, once");
}

#[test]
fn cifar_augmentation_crops_and_flips() {
    let pixels: Vec<u8> = (0..2 * 4 * 4).map(|i| (i * 8) as u8).collect();
    let ds = ImageDataset::new(pixels, vec![0], [2, 4, 4], 1)
        .unwrap()
        .with_stats(vec![0.0, 0.0], vec![1.0, 1.0]);
    let plain = ds
        .batch(&[0], &mut Rng::new(0))
        .unwrap()
        .inputs
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(plain[1], 8.0 / 255.0);
    let aug = ds.clone().with_augment(Augment { pad: 0, flip: true });
    let mut flipped = false;
    for seed in 0..8 {
        let v = aug
            .batch(&[0], &mut Rng::new(seed))
            .unwrap()
            .inputs
            .to_vec::<f32>()
            .unwrap();
        if v != plain {
            flipped = true;
            assert_eq!(v[0], plain[3], "a flip reverses each row");
        }
    }
    assert!(flipped);
    let crop = ds.with_augment(Augment {
        pad: 2,
        flip: false,
    });
    let mut saw_zero_border = false;
    for seed in 0..16 {
        let v = crop
            .batch(&[0], &mut Rng::new(seed))
            .unwrap()
            .inputs
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(v.len(), plain.len());
        saw_zero_border |= v.iter().filter(|&&x| x == 0.0).count() > 1;
    }
    assert!(saw_zero_border, "crops reach into the zero padding");
}

#[test]
fn synthetic_speech_batches_carry_lengths() {
    let ds = data::SyntheticSpeech {
        n: 10,
        bins: 161,
        max_frames: 40,
        classes: 29,
        seed: 1,
    };
    let b = ds.batch(&[0, 1, 2, 3], &mut Rng::new(0)).unwrap();
    assert_eq!(b.inputs.dims()[..3], [4, 1, 161]);
    assert_eq!(b.inputs.dims()[3], *b.input_lengths.iter().max().unwrap());
    assert_eq!(b.labels.elem_count(), b.label_lengths.iter().sum::<usize>());
    assert!(b
        .labels
        .to_vec::<u32>()
        .unwrap()
        .iter()
        .all(|&l| (1..29).contains(&l)));
}

/// A data set whose labels are the first draw of the augmentation stream it is given.
struct Draws;

impl Dataset for Draws {
    fn len(&self) -> usize {
        8
    }
    fn batch(&self, indices: &[usize], rng: &mut Rng) -> data::Result<data::Batch> {
        let draw = rng.next_u64() as u32;
        Ok(data::Batch::new(
            tensor::Tensor::from_vec(
                vec![0f32; indices.len()],
                vec![indices.len(), 1],
                tensor::Device::Cpu,
            )?,
            tensor::Tensor::from_vec(
                vec![draw; indices.len()],
                vec![indices.len()],
                tensor::Device::Cpu,
            )?,
        ))
    }
}

/// Every (seed, epoch, rank) draws its own augmentation: seeds 0 to 3 used to replay
/// each other's streams an epoch apart (seed s at epoch e + 1 was seed s + 1 at epoch e).
#[test]
fn augmentation_streams_differ_across_seeds_epochs_and_ranks() {
    let mut seen = std::collections::HashMap::new();
    for seed in 0..6u64 {
        for rank in 0..2 {
            let l = Loader::new(Arc::new(Draws), 4, rank, 2, seed).unwrap();
            for epoch in 0..6 {
                let b = l.epoch(epoch).next().unwrap().unwrap();
                let draw = b.labels.to_vec::<u32>().unwrap()[0];
                if let Some(other) = seen.insert(draw, (seed, epoch, rank)) {
                    panic!("seed {seed} epoch {epoch} rank {rank} drew what {other:?} drew");
                }
            }
        }
    }
}
