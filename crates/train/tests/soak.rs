//! The soak: a 2-worker job driven through faults in a row — a worker killed with
//! SIGKILL, a worker stopped with SIGSTOP past the communication timeout, a SIGTERM to
//! the launcher, the disk filled before a save (the run directory on a small tmpfs,
//! where this process may mount one), a checkpoint damaged on disk — each at a random
//! step drawn from a seed, each followed by `--resume`; at the end every tensor of every
//! rank's checkpoint (parameters, buffers, optimizer and method state) is compared bit by
//! bit with an uninterrupted run of the same seed. For each method that keeps state.
//!
//! `soak_at_ci_size` runs a few faults per method (every kind at least once); the long
//! run is `scripts/soak.sh` (`SOAK_FAULTS` faults per method, `--ignored`), whose table
//! goes to benchmarks/RESULTS.md.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tensor::Rng;

/// 8 steps an epoch (256 samples, 2 workers, batches of 16): a checkpoint every 8 steps.
const PER_EPOCH: usize = 8;
const STEPS: usize = 48;
/// The communication timeout: a stopped worker is noticed after this long.
const TIMEOUT_SECS: &str = "3";
/// How long any one process of the job may take before the soak calls it hung.
const HUNG: Duration = Duration::from_secs(90);

/// The stateful methods the issue names, with options that make their state matter
/// (DGC's momentum correction, SBC's and `local`'s synchronisation within an epoch).
const METHODS: [(&str, &[&str]); 5] = [
    ("dense", &[]),
    ("dgc", &["warmup_epochs=0", "density=0.01"]),
    ("sbc", &["delay=3", "density=0.01"]),
    ("qsgd", &["min_size=100"]),
    ("local", &["density=0.01", "sync_every=3"]),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Kill,
    Stop,
    Term,
    DiskFull,
    Damage,
}

#[derive(Default, Debug)]
struct Report {
    faults: BTreeMap<Fault, usize>,
    resumes: usize,
    tensors: usize,
    differing_bits: u64,
}

impl Report {
    fn total_faults(&self) -> usize {
        self.faults.values().sum()
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gradex-soak-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn job_args(method: &str, opts: &[&str], out: &Path) -> Vec<String> {
    let mut v: Vec<String> = "--model lenet5 --dataset synthetic --workers 2 --batch-size 16 \
        --synthetic-samples 256 --eval-samples 64 --log-every 1 --seed 7 --method"
        .split_whitespace()
        .map(String::from)
        .collect();
    v.push(method.to_string());
    for o in opts {
        v.extend(["--method-opt".to_string(), o.to_string()]);
    }
    v.extend(["--steps".into(), STEPS.to_string(), "--out".into()]);
    v.push(out.display().to_string());
    v
}

/// A running launcher: its process, the steps rank 0 reports, and everything it printed.
struct Running {
    child: Child,
    steps: Receiver<usize>,
    output: Arc<Mutex<String>>,
}

fn start(args: &[String]) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_train"))
        .args(args)
        .env("GRADEX_TIMEOUT_SECS", TIMEOUT_SECS)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting train");
    let (tx, steps) = channel();
    let output = Arc::new(Mutex::new(String::new()));
    let pipes: [Box<dyn Read + Send>; 2] = [
        Box::new(child.stdout.take().expect("stdout")),
        Box::new(child.stderr.take().expect("stderr")),
    ];
    for pipe in pipes {
        let (tx, output) = (tx.clone(), output.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("[rank 0] step ") {
                    if let Some(Ok(s)) = rest.split('/').next().map(str::parse::<usize>) {
                        let _ = tx.send(s);
                    }
                }
                let mut o = output.lock().unwrap_or_else(|e| e.into_inner());
                o.push_str(&line);
                o.push('\n');
            }
        });
    }
    Running {
        child,
        steps,
        output,
    }
}

impl Running {
    /// Waits until rank 0 has reported `step` (true) or the job has ended (false).
    fn reach(&mut self, step: usize) -> bool {
        let until = Instant::now() + HUNG;
        while Instant::now() < until {
            match self.steps.recv_timeout(Duration::from_millis(50)) {
                Ok(s) if s >= step => return true,
                Ok(_) => {}
                Err(_) => {
                    if self.child.try_wait().ok().flatten().is_some() {
                        return false;
                    }
                }
            }
        }
        panic!(
            "the job did not reach step {step} within {HUNG:?}:\n{}",
            self.text()
        );
    }
    /// Waits for the launcher to end; whether it succeeded.
    fn end(&mut self) -> bool {
        let until = Instant::now() + HUNG;
        loop {
            if let Some(st) = self.child.try_wait().expect("waiting for train") {
                // Let the readers take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return st.success();
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                panic!(
                    "the job hung (not ended {HUNG:?} after its fault):\n{}",
                    self.text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    fn text(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// The launcher's worker processes.
    fn workers(&self) -> Vec<i32> {
        let pid = self.child.id();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a pid this test started (or its child); no memory involved.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// A tmpfs mounted for the run directory, so that the disk can be filled; unmounted on
/// drop. None where this process may not mount one.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=96m", "gradex-soak"])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk(dir.to_path_buf()))
    }
    fn filler(&self) -> PathBuf {
        self.0.join("filler")
    }
    /// Fills the disk but for a few KiB: the next checkpoint (or log line) cannot be
    /// written.
    fn fill(&self) {
        // SAFETY: statvfs writes into the struct we pass.
        let free = unsafe {
            let mut st: libc::statvfs = std::mem::zeroed();
            let c = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
            assert_eq!(libc::statvfs(c.as_ptr(), &mut st), 0, "statvfs");
            st.f_bavail as u64 * st.f_frsize as u64
        };
        let mut f = std::fs::File::create(self.filler()).expect("the filler");
        let chunk = vec![0u8; 1 << 20];
        let mut left = free.saturating_sub(16 << 10);
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if std::io::Write::write_all(&mut f, &chunk[..n]).is_err() {
                break;
            }
            left -= n as u64;
        }
    }
    fn empty(&self) {
        let _ = std::fs::remove_file(self.filler());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Flips bytes in the middle of `rank`'s newest checkpoint, where both ranks hold its
/// previous generation (else the damage would leave no step every rank holds: a lost
/// run, not a fault to survive). Whether it did.
fn damage(out: &Path, rank: usize) -> bool {
    let pos = |f: PathBuf| {
        train::checkpoint::read_position(&f)
            .ok()
            .flatten()
            .map(|p| p.step)
    };
    let prev: Vec<Option<usize>> = (0..2)
        .map(|r| pos(train::checkpoint::prev_path(out, r)))
        .collect();
    let cur = pos(train::checkpoint::path(out, rank));
    if cur.is_none() || prev[0].is_none() || prev[0] != prev[1] {
        return false;
    }
    let f = train::checkpoint::path(out, rank);
    let mut bytes = std::fs::read(&f).expect("reading the checkpoint");
    let mid = bytes.len() / 2;
    bytes[mid..mid + 8].iter_mut().for_each(|b| *b ^= 0x5A);
    std::fs::write(&f, bytes).expect("damaging the checkpoint");
    true
}

/// Every tensor of both ranks' final checkpoints, compared bit by bit: (tensors, bits
/// that differ). A missing tensor or a shape that differs counts all its bits.
fn compare(a: &Path, b: &Path) -> (usize, u64) {
    let (mut tensors, mut bits) = (0, 0u64);
    for rank in 0..2 {
        let load = |d: &Path| {
            train::checkpoint::load(&train::checkpoint::path(d, rank))
                .unwrap_or_else(|e| {
                    panic!("rank {rank}'s final checkpoint in {}: {e:#}", d.display())
                })
                .tensors
        };
        let (ta, tb) = (load(a), load(b));
        for (name, va, sa) in &ta {
            tensors += 1;
            match tb.iter().find(|t| &t.0 == name) {
                Some((_, vb, sb)) if sa == sb => {
                    bits += va
                        .iter()
                        .zip(vb)
                        .map(|(x, y)| (x.to_bits() ^ y.to_bits()).count_ones() as u64)
                        .sum::<u64>();
                }
                _ => bits += 32 * va.len() as u64,
            }
        }
        bits += 32
            * tb.iter()
                .filter(|t| !ta.iter().any(|u| u.0 == t.0))
                .map(|t| t.1.len() as u64)
                .sum::<u64>();
    }
    (tensors, bits)
}

/// Runs `method` through `faults` process faults (kinds in turn from `first_kind`,
/// steps from `seed`), damaging a checkpoint after every second one where that leaves
/// a step to resume from, and compares the end with an uninterrupted run.
fn soak(method: &str, opts: &[&str], faults: usize, first_kind: usize, seed: u64) -> Report {
    let reference = tmp(&format!("{method}-reference"));
    let mut r = start(&job_args(method, opts, &reference));
    assert!(r.end(), "the uninterrupted {method} run:\n{}", r.text());

    let base = tmp(&format!("{method}-faults"));
    let disk = SmallDisk::mount(&base);
    let out = base.join("run");
    let mut kinds = vec![Fault::Kill, Fault::Stop, Fault::Term];
    if disk.is_some() {
        kinds.push(Fault::DiskFull);
    } else {
        eprintln!("{method}: disk-full faults skipped: cannot mount a tmpfs here (needs root)");
    }
    let mut rng = Rng::new(seed);
    let mut report = Report::default();
    let mut run = start(&job_args(method, opts, &out));
    for i in 0..faults {
        let kind = kinds[(first_kind + i) % kinds.len()];
        // After the first checkpoint, and far enough from the end that the fault lands
        // before the run finishes even on a loaded machine.
        let at = PER_EPOCH + 1 + rng.below(STEPS - PER_EPOCH - 10);
        if !run.reach(at) {
            eprintln!("{method}: the run ended before step {at}, where fault {i} was due");
            break;
        }
        let workers = run.workers();
        let victim = workers.get(rng.below(workers.len().max(1))).copied();
        match (kind, victim) {
            (Fault::Kill, Some(w)) => signal(w, libc::SIGKILL),
            (Fault::Stop, Some(w)) => signal(w, libc::SIGSTOP),
            (Fault::Term, _) => signal(run.child.id() as i32, libc::SIGTERM),
            (Fault::DiskFull, _) => disk.as_ref().expect("a tmpfs").fill(),
            _ => {
                eprintln!("{method}: no worker to hit at step {at} (the job is ending)");
                continue;
            }
        }
        let succeeded = run.end();
        for w in workers {
            // A stopped worker the launcher has not killed yet.
            signal(w, libc::SIGCONT);
        }
        if let Some(d) = &disk {
            d.empty();
        }
        if succeeded {
            eprintln!("{method}: fault {i} ({kind:?}) came after the run's last step");
            break;
        }
        *report.faults.entry(kind).or_default() += 1;
        if (report.total_faults() % 2 == 0) && damage(&out, rng.below(2)) {
            *report.faults.entry(Fault::Damage).or_default() += 1;
        }
        report.resumes += 1;
        run = start(&[
            "--resume".to_string(),
            "--out".to_string(),
            out.display().to_string(),
        ]);
    }
    assert!(
        run.end(),
        "{method}: the last resumed run failed:\n{}",
        run.text()
    );
    let (tensors, bits) = compare(&reference, &out);
    report.tensors = tensors;
    report.differing_bits = bits;
    drop(disk);
    let _ = std::fs::remove_dir_all(&reference);
    let _ = std::fs::remove_dir_all(&base);
    report
}

fn print(rows: &[(&str, Report)]) {
    println!(
        "{:<8} {:>6} {:>5} {:>5} {:>5} {:>9} {:>7} {:>8} {:>8} {:>14}",
        "method",
        "faults",
        "kill",
        "stop",
        "term",
        "disk-full",
        "damage",
        "resumes",
        "tensors",
        "differing bits"
    );
    for (m, r) in rows {
        let n = |k: Fault| r.faults.get(&k).copied().unwrap_or(0);
        println!(
            "{m:<8} {:>6} {:>5} {:>5} {:>5} {:>9} {:>7} {:>8} {:>8} {:>14}",
            r.total_faults(),
            n(Fault::Kill),
            n(Fault::Stop),
            n(Fault::Term),
            n(Fault::DiskFull),
            n(Fault::Damage),
            r.resumes,
            r.tensors,
            r.differing_bits
        );
    }
}

fn soak_all(faults: usize) {
    let mut rows = Vec::new();
    for (i, (method, opts)) in METHODS.iter().enumerate() {
        let r = soak(method, opts, faults, i, 1000 + i as u64);
        rows.push((*method, r));
    }
    print(&rows);
    for (m, r) in &rows {
        assert_eq!(
            r.differing_bits, 0,
            "{m}: the soaked run differs from the uninterrupted one"
        );
        assert!(r.total_faults() > 0, "{m}: no fault landed");
    }
    let kinds: std::collections::BTreeSet<Fault> = rows
        .iter()
        .flat_map(|(_, r)| r.faults.keys().copied())
        .collect();
    assert!(
        kinds.is_superset(&std::collections::BTreeSet::from([
            Fault::Kill,
            Fault::Stop,
            Fault::Term,
            Fault::Damage
        ])),
        "every kind of fault at least once: {kinds:?}"
    );
}

/// Two faults per stateful method, the kinds in turn across methods, so that every kind
/// lands at least once.
#[test]
fn soak_at_ci_size() {
    soak_all(2);
}

/// `SOAK_FAULTS` (default 12) process faults per method: `scripts/soak.sh`.
#[test]
#[ignore]
fn soak_long() {
    let faults = std::env::var("SOAK_FAULTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    soak_all(faults);
}
