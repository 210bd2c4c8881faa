//! The corpora built from Debian packages, end to end (skipped, with a message, where the
//! package is missing, unless REQUIRE_SYSTEM_DATA=1 as in CI).

use data::prepare::{prepare_fashion_mnist, prepare_kjv, FASHION_MNIST_SYSTEM_DIR};
use data::TextCorpus;
use std::path::Path;

fn required(what: &str, package: &str, present: bool) -> bool {
    if !present {
        assert!(
            std::env::var("REQUIRE_SYSTEM_DATA").is_err(),
            "{what} is required: apt-get install {package}"
        );
        eprintln!("skipped: {what} missing (apt-get install {package})");
    }
    present
}

#[test]
fn fashion_mnist_has_60000_and_10000_images() {
    let src = Path::new(FASHION_MNIST_SYSTEM_DIR);
    if !required(
        "Fashion-MNIST",
        "dataset-fashion-mnist",
        src.join("train-images-idx3-ubyte.gz").exists(),
    ) {
        return;
    }
    let out = std::env::temp_dir().join(format!("fashion-{}", std::process::id()));
    assert_eq!(prepare_fashion_mnist(src, &out).unwrap(), (60_000, 10_000));
    // Prepared again into the folder it reads from: `fs::copy` onto itself used to
    // truncate every file to 0 bytes. The files are left as they are.
    let before = std::fs::read(out.join("train-images-idx3-ubyte.gz")).unwrap();
    assert_eq!(prepare_fashion_mnist(&out, &out).unwrap(), (60_000, 10_000));
    let same = out.join(".").join("..").join(out.file_name().unwrap());
    assert_eq!(
        prepare_fashion_mnist(&same, &out).unwrap(),
        (60_000, 10_000)
    );
    assert_eq!(
        std::fs::read(out.join("train-images-idx3-ubyte.gz")).unwrap(),
        before
    );
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn kjv_corpus_has_a_10000_word_vocabulary() {
    let present = std::process::Command::new("bible")
        .arg("-f")
        .arg("gen1:1")
        .output()
        .is_ok_and(|o| o.status.success());
    if !required("the bible program", "bible-kjv", present) {
        return;
    }
    let out = std::env::temp_dir().join(format!("kjv-{}", std::process::id()));
    let s = prepare_kjv(None, &out).unwrap();
    assert_eq!(s.vocab, 10_000);
    assert_eq!(s.verses, 31_102);
    let c = TextCorpus::load(&out, "ptb").unwrap();
    assert_eq!(
        c.vocab.len(),
        10_000,
        "the reader rebuilds exactly the prepared vocabulary from ptb.train.txt"
    );
    assert!(c.train.len() > 700_000 && c.valid.len() > 50_000 && c.test.len() > 50_000);
    let chars = TextCorpus::load(&out, "ptb.char").unwrap();
    assert!(
        chars.vocab.len() < 60,
        "character vocabulary {}",
        chars.vocab.len()
    );
}
