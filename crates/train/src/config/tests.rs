//! The configuration's resolution, validation and help.

use super::*;

#[test]
fn a_worker_of_a_job_takes_the_jobs_size() {
    let node = Config::default(); // --workers left out: 1
    assert_eq!(node.for_job(4).unwrap().workers, 4);
    let launched = Config {
        workers: 4,
        ..Config::default()
    };
    assert_eq!(launched.for_job(4).unwrap().workers, 4);
    let e = launched.for_job(2).unwrap_err().to_string();
    assert!(e.contains("--workers 4 disagrees with WORLD_SIZE=2"), "{e}");
    // The step's samples are checked against the job's size: 2 nodes × batch 32 need
    // 64 synthetic samples even though each node says --workers 1.
    let small = Config {
        dataset: "synthetic".into(),
        model: "lenet5".into(),
        synthetic_samples: 40,
        ..Config::default()
    };
    small.validate().unwrap();
    let e = small
        .for_job(2)
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(e.contains("less than one step's 64 samples"), "{e}");
}

#[test]
fn flags_that_would_be_ignored_are_errors() {
    let multistep = Config {
        schedule: Schedule::Multistep,
        dataset: "synthetic".into(),
        ..Config::default()
    };
    let e = multistep.validate().unwrap_err().to_string();
    assert!(e.contains("multistep needs --milestones"), "{e}");
    // Milestones or a gamma under a schedule that reads neither, Adam's options under
    // SGD: each used to train as if it were not given.
    let synthetic = || Config {
        dataset: "synthetic".into(),
        ..Config::default()
    };
    for (c, want) in [
        (
            Config {
                milestones: vec![30.0, 60.0],
                ..synthetic()
            },
            "--milestones is for --schedule step or multistep; this run's schedule is constant",
        ),
        (
            Config {
                schedule: Schedule::Cosine,
                gamma: 0.5,
                ..synthetic()
            },
            "--gamma is for --schedule step or multistep; this run's schedule is cosine",
        ),
        (
            Config {
                schedule: Schedule::Step,
                milestones: vec![30.0, 60.0],
                ..synthetic()
            },
            "--schedule step takes one --milestones PERIOD",
        ),
        (
            Config {
                adam_eps: 1e-6,
                ..synthetic()
            },
            "--adam-eps is for --optimizer adam",
        ),
    ] {
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    Config {
        schedule: Schedule::Multistep,
        milestones: vec![30.0, 60.0],
        gamma: 0.2,
        ..synthetic()
    }
    .validate()
    .unwrap();
    let e = Config {
        seed: u64::MAX,
        ..synthetic()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(e.contains("--seed 18446744073709551615 is above"), "{e}");
    // An evaluation that would fail only after the first epoch fails now.
    let few = Config {
        dataset: "synthetic".into(),
        workers: 4,
        eval_samples: Some(3),
        ..Config::default()
    };
    let e = few.validate().unwrap_err().to_string();
    assert!(
        e.contains("--eval-samples 3 is too few for 4 workers"),
        "{e}"
    );
    // A language model's test text is cut into 10 streams of at least 2 tokens,
    // however many workers share them.
    let lm = |n: usize, workers: usize| Config {
        model: "lstm_lm".into(),
        dataset: "synthetic".into(),
        workers,
        eval_samples: Some(n),
        ..Config::default()
    };
    let e = lm(19, 1).validate().unwrap_err().to_string();
    assert!(e.contains("--eval-samples 19 is too few"), "{e}");
    lm(20, 16).validate().unwrap();
    let char_dropout = Config {
        model: "char_lstm".into(),
        dataset: "kjv".into(),
        dropout: Some(0.5),
        ..Config::default()
    };
    let e = format!("{:#}", char_dropout.validate().unwrap_err());
    assert!(e.contains("--dropout: --model char_lstm is fixed"), "{e}");
    // --conv-channels narrows the speech models' front end, and only theirs.
    let channels = |model: &str, dataset: &str, n: usize| Config {
        model: model.into(),
        dataset: dataset.into(),
        conv_channels: Some(n),
        ..Config::default()
    };
    let e = format!(
        "{:#}",
        channels("lstm_lm", "synthetic", 8).validate().unwrap_err()
    );
    assert!(
        e.contains("--conv-channels: --model lstm_lm is fixed") && e.contains("an4_lstm"),
        "{e}"
    );
    let e = format!(
        "{:#}",
        channels("an4_lstm", "synthetic", 0).validate().unwrap_err()
    );
    assert!(e.contains("--conv-channels must be at least 1"), "{e}");
    channels("an4_lstm", "synthetic", 8).validate().unwrap();
}

/// Values no run can mean are refused before a worker starts (each used to run).
#[test]
fn nonsense_values_are_errors() {
    let synthetic = || Config {
        dataset: "synthetic".into(),
        ..Config::default()
    };
    assert!(synthetic().validate().is_ok());
    let multistep = |m: Vec<f64>| Config {
        schedule: Schedule::Multistep,
        milestones: m,
        ..synthetic()
    };
    for (c, want) in [
        (
            Config {
                workers: comm::MAX_WORLD + 1,
                batch_size: 1,
                synthetic_samples: comm::MAX_WORLD + 1,
                ..synthetic()
            },
            "ranks a job supports",
        ),
        (
            Config {
                log_every: 0,
                ..synthetic()
            },
            "--log-every must be at least 1",
        ),
        (
            Config {
                synthetic_samples: MAX_SYNTHETIC_SAMPLES + 1,
                ..synthetic()
            },
            "more than a generated set may have",
        ),
        (
            Config {
                eval_samples: Some(MAX_SYNTHETIC_SAMPLES + 1),
                ..synthetic()
            },
            "more than a generated set may have",
        ),
        (
            Config {
                weight_decay: -1.0,
                ..synthetic()
            },
            "--weight-decay must be",
        ),
        (
            Config {
                clip: -1.0,
                ..synthetic()
            },
            "--clip must be",
        ),
        (
            Config {
                warmup_epochs: f64::NAN,
                ..synthetic()
            },
            "--warmup-epochs must be",
        ),
        (
            Config {
                gamma: 0.0,
                ..multistep(vec![1.0])
            },
            "--gamma must be positive",
        ),
        (multistep(vec![3.0, 1.0]), "positive and increasing"),
        (multistep(vec![-1.0, 2.0]), "positive and increasing"),
        (
            Config {
                model: "lenet5".into(),
                bptt: 10,
                ..synthetic()
            },
            "--bptt is for the language models",
        ),
    ] {
        let e = format!("{:#}", c.validate().unwrap_err());
        assert!(e.contains(want), "want {want:?}: {e}");
    }
    assert!(multistep(vec![1.0, 2.5]).validate().is_ok());
}

/// The flags' defaults are `Config::default`'s: a command line with no flags resolves
/// to it (and `--help` shows them, as clap prints the defaults).
#[test]
fn no_flags_is_the_default_configuration() {
    assert_eq!(resolved(&[]), Config::default());
    let help = super::super::help::command().render_long_help().to_string();
    assert!(help.contains("[default: resnet20]"), "{help}");
    assert!(help.contains("[default: dgc]"), "{help}");
}

/// `train` with `argv` (no program name), resolved.
fn resolved(argv: &[&str]) -> Config {
    try_resolved(argv).unwrap()
}

fn try_resolved(argv: &[&str]) -> anyhow::Result<Config> {
    let matches = super::super::help::command()
        .try_get_matches_from(["train"].iter().chain(argv))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let args = <Args as clap::FromArgMatches>::from_arg_matches(&matches)?;
    let given = given_on_command_line(&matches);
    Config::resolve(&args, &given)
}

/// A flag given on the command line wins over the `--config` file, one left out keeps
/// the file's value even where the file's is not the default, and `--epochs` alone
/// drops the file's `steps`.
#[test]
fn flags_given_win_over_the_file_and_only_those() {
    let dir = std::env::temp_dir().join(format!("gradex-overlay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.toml");
    std::fs::write(
        &file,
        "workers = 3\nbatch_size = 16\nsteps = 50\nmethod_opts = [\"density=0.01\"]\nhidden = 8\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let c = resolved(&["--config", f]);
    assert_eq!(
        (c.workers, c.batch_size, c.steps, c.hidden),
        (3, 16, Some(50), Some(8))
    );
    assert_eq!(c.method_opts, ["density=0.01"]);
    // Given at its default value, a flag still wins over the file.
    let c = resolved(&[
        "--config",
        f,
        "--workers",
        "1",
        "--method-opt",
        "density=0.1",
    ]);
    assert_eq!((c.workers, c.batch_size), (1, 16));
    assert_eq!(c.method_opts, ["density=0.1"]);
    let c = resolved(&["--config", f, "--epochs", "2"]);
    assert_eq!((c.epochs, c.steps), (Some(2), None));
    let c = resolved(&["--config", f, "--epochs", "2", "--steps", "7"]);
    assert_eq!((c.epochs, c.steps), (Some(2), Some(7)));
    std::fs::write(&file, "overwrite = true\n").unwrap();
    let e = try_resolved(&["--config", f]).unwrap_err().to_string();
    assert!(
        e.contains("overwrite = true is not a configuration key"),
        "{e}"
    );
    std::fs::write(&file, "workerz = 3\n").unwrap();
    let e = format!("{:#}", try_resolved(&["--config", f]).unwrap_err());
    assert!(e.contains("workerz"), "{e}");
    let e = try_resolved(&["--seed", "18446744073709551615"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--seed 18446744073709551615 is above"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Without `--lr` or an `lr` key in the `--config` file, a model whose recipe trains
/// below 0.1 gets its recipe's rate; a rate given either way is kept, 0.1 included.
#[test]
fn a_rate_left_out_is_the_models_usual_one() {
    let lr = |argv: &[&str]| resolved(argv).lr;
    assert_eq!(lr(&[]), Config::default().lr);
    assert_eq!(lr(&["--model", "resnet56"]), 0.1);
    assert_eq!(lr(&["--model", "lenet5"]), 0.01);
    assert_eq!(lr(&["--model", "deepspeech"]), 3e-4);
    assert_eq!(lr(&["--model", "lenet5", "--lr", "0.1"]), 0.1);
    let dir = std::env::temp_dir().join(format!("gradex-usual-lr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (with, without) = (dir.join("with.toml"), dir.join("without.toml"));
    std::fs::write(&with, "model = \"alexnet\"\nlr = 0.1\n").unwrap();
    std::fs::write(&without, "model = \"alexnet\"\n").unwrap();
    let (with, without) = (with.to_str().unwrap(), without.to_str().unwrap());
    assert_eq!(lr(&["--config", with]), 0.1);
    assert_eq!(lr(&["--config", without]), 0.01);
    assert_eq!(lr(&["--config", without, "--lr", "0.02"]), 0.02);
    // The model named by the flag, over the file's.
    assert_eq!(lr(&["--config", with, "--model", "lenet5"]), 0.1);
    assert_eq!(lr(&["--config", without, "--model", "resnet20"]), 0.1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--lr -0.1` is a negative rate (refused as one), not an unknown flag `-0`.
#[test]
fn negative_numbers_are_values() {
    use clap::Parser;
    let a = Args::try_parse_from(["train", "--lr", "-0.1"]).unwrap();
    assert_eq!(a.run.lr, -0.1);
}

#[test]
fn cosine_decays_over_the_steps_of_the_run() {
    let c = Config {
        schedule: Schedule::Cosine,
        steps: Some(5000),
        ..Config::default()
    };
    // 1,875 batches an epoch: the run is 2.67 epochs, and at epoch 2 the rate is
    // still up (it used to reach 0 after one epoch when --epochs was not given).
    let (total, _) = c.plan(1875);
    let s = c.schedule(total as f64 / 1875.0);
    let at = |e: f64| s.lr(1.0, e);
    assert!(at(2.0) > 0.05, "{}", at(2.0));
    assert!(at(1.0) > at(2.0) && at(2.0) > at(2.6));
    assert!(at(5000.0 / 1875.0).abs() < 1e-12);
}

#[test]
fn pin_cores_reads_words_and_booleans() {
    let read = |text: &str| toml::from_str::<Config>(text).map(|c| c.pin_cores);
    assert_eq!(read("pin_cores = \"auto\"").unwrap(), PinCores::Auto);
    assert_eq!(read("pin_cores = \"true\"").unwrap(), PinCores::True);
    assert_eq!(read("pin_cores = false").unwrap(), PinCores::False);
    assert_eq!(read("pin_cores = true").unwrap(), PinCores::True);
    assert_eq!(read("").unwrap(), PinCores::Auto);
    for bad in ["pin_cores = \"yes\"", "pin_cores = 1"] {
        let e = read(bad).unwrap_err().to_string();
        assert!(e.contains("`auto`, `true` or `false`"), "{bad}: {e}");
    }
    // What a run directory's config.toml holds reads back as the same value.
    for p in [PinCores::Auto, PinCores::True, PinCores::False] {
        let c = Config {
            pin_cores: p,
            ..Config::default()
        };
        let text = toml::to_string_pretty(&c).unwrap();
        assert_eq!(read(&text).unwrap(), p, "{text}");
    }
}

/// A run directory written when the trainer had two exchange paths holds `exchange =
/// "auto" | "slices" | "tensors"`: it still reads (so the run resumes), means nothing, and
/// is not written back; an unknown key is still an error.
#[test]
fn an_old_runs_exchange_key_is_read_and_dropped() {
    for v in ["auto", "slices", "tensors"] {
        let c = toml::from_str::<Config>(&format!("exchange = \"{v}\"\nlr = 0.2"))
            .unwrap_or_else(|e| panic!("exchange = {v}: {e}"));
        assert_eq!(c.lr, 0.2);
        let written = toml::to_string_pretty(&c).unwrap();
        assert!(!written.contains("exchange"), "{written}");
    }
    assert!(toml::from_str::<Config>("exchanges = \"auto\"").is_err());
}
