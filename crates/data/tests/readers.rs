//! Every reader on small files written here, in the real formats, and their corrupt
//! variants, which must fail with an error naming the file and the problem.

use data::{read_cifar10, read_idx, read_idx_limited, read_mnist, Dataset, TextCorpus};
use std::io::Write;
use std::path::{Path, PathBuf};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("data-readers-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        v.extend(d.to_be_bytes());
    }
    v.extend(data);
    v
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

fn err(r: data::Result<impl Sized>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn mnist_idx_plain_and_gzipped() {
    let d = dir("idx");
    let pixels: Vec<u8> = (0..3 * 4 * 5).map(|i| i as u8).collect();
    write(&d.join("img"), &idx_bytes(&[3, 4, 5], &pixels));
    write(&d.join("lab.gz"), &gzip(&idx_bytes(&[3], &[7, 0, 9])));
    let ds = read_mnist(&d.join("img"), &d.join("lab.gz"), 10).unwrap();
    assert_eq!(ds.len(), 3);
    assert_eq!(ds.shape, [1, 4, 5]);
    assert_eq!(ds.labels(), [7, 0, 9]);
    assert_eq!(ds.image(2), &pixels[40..60]);
    let a = read_idx(&d.join("img")).unwrap();
    assert_eq!(a.dims, [3, 4, 5]);
}

#[test]
fn corrupt_idx_files_are_named_errors() {
    let d = dir("idx-bad");
    let good_labels = idx_bytes(&[2], &[1, 2]);
    write(&d.join("labels"), &good_labels);
    // Wrong magic.
    write(&d.join("magic"), &[1, 2, 3, 4, 0, 0, 0, 1, 9]);
    let m = err(read_idx(&d.join("magic")));
    assert!(m.contains("magic") && m.contains("magic"), "{m}");
    assert!(m.contains(&d.join("magic").display().to_string()), "{m}");
    // Truncated data.
    let mut short = idx_bytes(&[2, 4, 4], &[0; 32]);
    short.truncate(short.len() - 5);
    write(&d.join("short"), &short);
    let m = err(read_idx(&d.join("short")));
    assert!(m.contains("need 32 bytes") && m.contains("has 27"), "{m}");
    // Truncated gzip.
    let mut gz = gzip(&idx_bytes(&[2, 4, 4], &[0; 32]));
    gz.truncate(gz.len() / 2);
    write(&d.join("broken.gz"), &gz);
    assert!(err(read_idx(&d.join("broken.gz"))).contains("gzip"));
    // Inconsistent counts.
    write(&d.join("three"), &idx_bytes(&[3, 2, 2], &[0; 12]));
    let m = err(read_mnist(&d.join("three"), &d.join("labels"), 10));
    assert!(m.contains("2 labels for 3 images"), "{m}");
    // Label out of range.
    write(&d.join("two"), &idx_bytes(&[2, 2, 2], &[0; 8]));
    write(&d.join("badlabels"), &idx_bytes(&[2], &[3, 12]));
    let m = err(read_mnist(&d.join("two"), &d.join("badlabels"), 10));
    assert!(
        m.contains("label 12") && m.contains("10 classes") && m.contains("badlabels"),
        "{m}"
    );
    // Missing file.
    let m = err(read_idx(&d.join("nope")));
    assert!(m.contains("nope"), "{m}");
}

/// Decompression is capped: a small gzip file that expands far beyond the bound (a
/// "gzip bomb": 4 MiB of zeros compress to ~4 KiB) stops at the bound with an error
/// naming the file, instead of being inflated whole. `read_idx`'s bound, MAX_IDX_BYTES,
/// works the same way at 1 GiB; a smaller one keeps the test fast.
#[test]
fn gzip_bombs_are_refused() {
    let d = dir("idx-bomb");
    let mut body = idx_bytes(&[2, 2], &[1, 2, 3, 4]);
    body.resize(4 << 20, 0);
    let bomb = gzip(&body);
    assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
    write(&d.join("bomb.gz"), &bomb);
    let m = err(read_idx_limited(&d.join("bomb.gz"), 1 << 20));
    assert!(
        m.contains("bomb.gz") && m.contains("more than 1048576 bytes"),
        "{m}"
    );
    // Within the bound the file is read, and its trailing bytes are the usual error.
    let m = err(read_idx_limited(&d.join("bomb.gz"), 8 << 20));
    assert!(m.contains("need 4 bytes"), "{m}");
    // A plain file is held to the same bound.
    write(&d.join("plain"), &body);
    let m = err(read_idx_limited(&d.join("plain"), 1 << 20));
    assert!(m.contains("the file holds more than"), "{m}");
    // At exactly the bound, a good file reads.
    let good = idx_bytes(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    write(&d.join("good.gz"), &gzip(&good));
    let a = read_idx_limited(&d.join("good.gz"), good.len() as u64).unwrap();
    assert_eq!(a.dims, [2, 3]);
}

#[test]
fn cifar10_batches() {
    let d = dir("cifar");
    let mut rec = vec![3u8];
    rec.extend((0..3072).map(|i| (i % 256) as u8));
    let mut two = rec.clone();
    two[0] = 9;
    two.extend(&rec);
    write(&d.join("a.bin"), &two);
    write(&d.join("b.bin"), &rec);
    let ds = read_cifar10(&[&d.join("a.bin"), &d.join("b.bin")]).unwrap();
    assert_eq!(ds.len(), 3);
    assert_eq!(ds.labels(), [9, 3, 3]);
    assert_eq!(ds.image(1)[..3], [0, 1, 2]);
    // Truncated record.
    write(&d.join("short.bin"), &rec[..3000]);
    assert!(err(read_cifar10(&[&d.join("short.bin")])).contains("not a whole number"));
    // Label out of range.
    let mut bad = rec.clone();
    bad[0] = 10;
    write(&d.join("bad.bin"), &bad);
    let m = err(read_cifar10(&[&d.join("bad.bin")]));
    assert!(m.contains("label 10") && m.contains("bad.bin"), "{m}");
}

#[test]
fn ptb_text_layout() {
    let d = dir("ptb");
    write(
        &d.join("ptb.train.txt"),
        b" the cat sat \n the dog <unk> \n",
    );
    write(&d.join("ptb.valid.txt"), b" the cow sat \n");
    write(&d.join("ptb.test.txt"), b" dog \n");
    let c = TextCorpus::load(&d, "ptb").unwrap();
    // <unk>, <eos>, the, cat, sat, dog
    assert_eq!(c.vocab.len(), 6);
    let word = |i: u32| c.vocab.words[i as usize].clone();
    assert_eq!(
        c.train.iter().map(|&i| word(i)).collect::<Vec<_>>(),
        ["the", "cat", "sat", "<eos>", "the", "dog", "<unk>", "<eos>"]
    );
    assert_eq!(
        c.valid.iter().map(|&i| word(i)).collect::<Vec<_>>(),
        ["the", "<unk>", "sat", "<eos>"],
        "out-of-vocabulary words read as <unk>"
    );
    assert_eq!(c.test.len(), 2);
    assert!(err(TextCorpus::load(&dir("empty"), "ptb")).contains("ptb.train.txt"));
}

#[test]
fn kjv_tokenisation() {
    let t = data::prepare::tokenize_verse(
        "Ge1:3 And God said, Let there be light: and there was light.",
    );
    assert_eq!(
        t,
        [
            "and", "god", "said", ",", "let", "there", "be", "light", ":", "and", "there", "was",
            "light", "."
        ]
    );
    let t = data::prepare::tokenize_verse("Ps23:1 The LORD's shepherd (is) mine;");
    assert_eq!(
        t,
        ["the", "lord", "'s", "shepherd", "(", "is", ")", "mine", ";"]
    );
}

#[test]
fn imagenet_style_folders() {
    use data::ImageFolder;
    let root = dir("folder");
    for (class, color) in [("cat", [200u8, 10, 10]), ("dog", [10, 200, 10])] {
        std::fs::create_dir_all(root.join(class)).unwrap();
        for k in 0..3 {
            let img = image::RgbImage::from_fn(40 + 10 * k, 30, |x, _| {
                image::Rgb([color[0], color[1], (x * 4) as u8])
            });
            img.save(root.join(class).join(format!("{k}.png"))).unwrap();
        }
    }
    std::fs::write(root.join("dog").join("notes.txt"), "not an image").unwrap();
    let eval = ImageFolder::open(&root, 16, false).unwrap();
    assert_eq!(eval.classes, ["cat", "dog"]);
    assert_eq!(eval.len(), 6, "non-image files are ignored");
    let mut rng = tensor::Rng::new(0);
    let b = eval.batch(&[0, 5], &mut rng).unwrap();
    assert_eq!(b.inputs.dims(), [2, 3, 16, 16]);
    assert_eq!(b.labels.to_vec::<u32>().unwrap(), [0, 1]);
    // Red channel of a "cat": (200/255 − 0.485) / 0.229 everywhere.
    let v = b.inputs.to_vec::<f32>().unwrap();
    assert!(
        (v[0] - (200.0 / 255.0 - 0.485) / 0.229).abs() < 0.02,
        "{}",
        v[0]
    );
    let train = ImageFolder::open(&root, 16, true).unwrap();
    assert_eq!(
        train.batch(&[1, 2, 3], &mut rng).unwrap().inputs.dims(),
        [3, 3, 16, 16]
    );
    // A PNG named .JPEG (ILSVRC-2012 holds one) decodes by its content.
    let png = std::fs::read(root.join("dog").join("0.png")).unwrap();
    std::fs::write(root.join("dog").join("z.JPEG"), png).unwrap();
    let renamed = ImageFolder::open(&root, 16, true).unwrap();
    assert_eq!(renamed.len(), 7);
    let b = renamed.batch(&[6], &mut rng).unwrap();
    assert_eq!(b.inputs.dims(), [1, 3, 16, 16]);
    assert_eq!(b.labels.to_vec::<u32>().unwrap(), [1]);
    std::fs::remove_file(root.join("dog").join("z.JPEG")).unwrap();
    // A corrupt image names the file.
    std::fs::write(root.join("cat").join("bad.png"), b"\x89PNG broken").unwrap();
    let broken = ImageFolder::open(&root, 16, false).unwrap();
    let e = err(broken.batch(&[0, 1, 2, 3], &mut rng));
    assert!(e.contains("bad.png"), "{e}");
    assert!(err(ImageFolder::open(&dir("nofolders"), 16, false)).contains("no class sub-folders"));
}

/// The evaluation crop (and training's fallback when no random crop fits) cuts the
/// centre before resizing: a valid 1 x 20000 PNG at 224 used to be resized whole to
/// 256 x 5,120,000 (3.9 GB) first. Both orientations, in both modes, are quick now.
#[test]
fn extreme_aspect_ratios_are_cropped_before_resizing() {
    use data::ImageFolder;
    let root = dir("thin");
    std::fs::create_dir_all(root.join("a")).unwrap();
    let tall = image::RgbImage::from_fn(1, 20_000, |_, y| image::Rgb([(y % 256) as u8, 7, 9]));
    tall.save(root.join("a").join("tall.png")).unwrap();
    let wide = image::RgbImage::from_fn(20_000, 2, |x, _| image::Rgb([(x % 256) as u8, 7, 9]));
    wide.save(root.join("a").join("wide.png")).unwrap();
    let mut rng = tensor::Rng::new(0);
    for train in [false, true] {
        let ds = ImageFolder::open(&root, 224, train).unwrap();
        let start = std::time::Instant::now();
        let b = ds.batch(&[0, 1], &mut rng).unwrap();
        assert_eq!(b.inputs.dims(), [2, 3, 224, 224]);
        // The green channel is 7 everywhere: (7/255 - 0.456) / 0.224.
        let v = b.inputs.to_vec::<f32>().unwrap();
        let green = (7.0 / 255.0 - 0.456) / 0.224;
        assert!((v[224 * 224] - green).abs() < 1e-3, "{}", v[224 * 224]);
        assert!(start.elapsed().as_secs_f64() < 5.0, "{:?}", start.elapsed());
    }
}

/// `datasets stats`: a missing corpus gets the hint for getting it; a present but
/// damaged one is named damaged, with its file and the cause, and no install hint.
#[test]
fn datasets_stats_tells_missing_from_damaged() {
    let bin = env!("CARGO_BIN_EXE_datasets");
    let run = |args: &[&str]| {
        let o = std::process::Command::new(bin).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&o.stderr).into_owned();
        (o.status.success(), text)
    };
    let d = dir("stats-damaged");
    let missing = d.join("nonexistent");
    let (ok, text) = run(&["stats", "fashion-mnist", "--dir", missing.to_str().unwrap()]);
    assert!(!ok);
    assert!(text.contains("Fashion-MNIST not found in"), "{text}");
    assert!(
        text.contains("apt-get install dataset-fashion-mnist"),
        "{text}"
    );
    write(
        &d.join("train-images-idx3-ubyte.gz"),
        &gzip(&idx_bytes(&[2, 2, 2], &[0; 8])),
    );
    let labels = d.join("train-labels-idx1-ubyte.gz");
    let whole = gzip(&idx_bytes(&[2], &[1, 2]));
    write(&labels, &whole[..whole.len() - 6]); // a truncated gzip stream
    let (ok, text) = run(&["stats", "fashion-mnist", "--dir", d.to_str().unwrap()]);
    assert!(!ok);
    assert!(text.contains("is damaged"), "{text}");
    assert!(text.contains(&labels.display().to_string()), "{text}");
    assert!(text.contains("corrupt gzip stream"), "{text}");
    assert!(!text.contains("apt-get"), "{text}");
    // Same for text: a training file that is not UTF-8.
    write(&d.join("ptb.train.txt"), b"caf\xe9\n");
    let (ok, text) = run(&["stats", "ptb", "--dir", d.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        text.contains("is damaged") && text.contains("not UTF-8 text"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `datasets prepare speech --utterances 0` is refused (it used to write a corpus that
/// `datasets stats speech` then refused), before espeak-ng runs or --out is made.
#[test]
fn datasets_prepare_speech_refuses_an_empty_split() {
    let out = std::env::temp_dir().join(format!("speech-zero-{}", std::process::id()));
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_datasets"))
        .args(["prepare", "speech", "--utterances", "0", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(text.contains("--utterances 0"), "{text}");
    assert!(!out.exists());
}

/// Fashion-MNIST's four file names, as `datasets prepare fashion-mnist` copies them.
const FASHION_FILES: [&str; 4] = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
];

/// A Fashion-MNIST source of four small, valid IDX files (3 training and 2 test images
/// of 4 × 4).
fn fashion_source(name: &str) -> PathBuf {
    let d = dir(name);
    let files = [
        idx_bytes(&[3, 4, 4], &[7; 48]),
        idx_bytes(&[3], &[0, 5, 9]),
        idx_bytes(&[2, 4, 4], &[1; 32]),
        idx_bytes(&[2], &[1, 2]),
    ];
    for (f, bytes) in FASHION_FILES.iter().zip(files) {
        write(&d.join(f), &gzip(&bytes));
    }
    d
}

#[test]
fn prepare_fashion_mnist_copies_a_valid_source_with_nothing_left_over() {
    let src = fashion_source("prep-ok");
    let out = src.with_extension("out");
    let _ = std::fs::remove_dir_all(&out);
    let counts = data::prepare::prepare_fashion_mnist(&src, &out).unwrap();
    assert_eq!(counts, (3, 2));
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = FASHION_FILES.iter().map(|f| f.to_string()).collect();
    want.sort();
    assert_eq!(names, want, "no temporary file is left");
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(&out);
}

/// A damaged source file is named as damaged, in the source; nothing is written:
/// neither the output folder nor, where it existed, its earlier files change.
#[test]
fn prepare_fashion_mnist_leaves_the_output_untouched_on_a_damaged_source() {
    use data::prepare::prepare_fashion_mnist;
    let src = fashion_source("prep-bad");
    let out = src.with_extension("out");
    let _ = std::fs::remove_dir_all(&out);
    let labels = src.join(FASHION_FILES[3]);
    let good = std::fs::read(&labels).unwrap();
    // Truncated gzip stream, labels out of range, a count that disagrees.
    for bad in [
        good[..good.len() - 6].to_vec(),
        gzip(&idx_bytes(&[2], &[1, 10])),
        gzip(&idx_bytes(&[3], &[1, 2, 3])),
    ] {
        write(&labels, &bad);
        let e = err(prepare_fashion_mnist(&src, &out));
        assert!(e.contains("is damaged"), "{e}");
        assert!(e.contains(&labels.display().to_string()), "{e}");
        assert!(!e.contains("apt-get"), "{e}");
        assert!(!out.exists(), "{} was created", out.display());
    }
    // Over an earlier corpus: left as it was.
    write(&labels, &good);
    prepare_fashion_mnist(&src, &out).unwrap();
    write(&labels, &gzip(&idx_bytes(&[2], &[1, 10])));
    assert!(prepare_fashion_mnist(&src, &out).is_err());
    assert_eq!(std::fs::read(out.join(FASHION_FILES[3])).unwrap(), good);
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 4);
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(&out);
}
