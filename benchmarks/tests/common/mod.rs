//! What the paper-table binaries' tests share: running a binary, its output as text, and
//! the check that wrong arguments fail before any job starts (nothing created in --out).

#![allow(dead_code)] // each test binary uses some of these helpers

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the binary at `bin` with `args` to completion.
pub fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("starting {bin}: {e}"))
}

/// Standard output then standard error.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Each `(arguments, expected message)` must fail with that message and leave its
/// `--out` directory uncreated.
pub fn fails_before_any_job(bin: &str, cases: &[(&[&str], &str)]) {
    for (i, (args, want)) in cases.iter().enumerate() {
        let dir = std::env::temp_dir().join(format!("table-bad-{}-{i}", std::process::id()));
        let out = dir.to_string_lossy().to_string();
        let mut all = args.to_vec();
        all.extend(["--out", &out]);
        let o = run(bin, &all);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(
            text(&o).contains(want),
            "{args:?}: expected '{want}' in:\n{}",
            text(&o)
        );
        assert!(!dir.exists(), "{args:?} created {}", dir.display());
    }
}

/// [`fails_before_any_job`] with each case's arguments written as one string of
/// whitespace-separated words, so that a table of bad arguments reads one case a line.
pub fn bad_arguments(bin: &str, cases: &[(&str, &str)]) {
    let split: Vec<(Vec<&str>, &str)> = cases
        .iter()
        .map(|&(args, want)| (args.split_whitespace().collect(), want))
        .collect();
    let cases: Vec<(&[&str], &str)> = split.iter().map(|(a, w)| (&a[..], *w)).collect();
    fails_before_any_job(bin, &cases);
}

/// Runs the binary at `bin` on synthetic data with `args`, `--json` and a fresh `--out`
/// under the temporary directory named after `name`; it must succeed. Returns that
/// directory and the printed rows.
pub fn synthetic_rows(bin: &str, name: &str, args: &[&str]) -> (PathBuf, Vec<Value>) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.to_string_lossy().to_string();
    let mut all = vec!["--synthetic"];
    all.extend(args);
    all.extend(["--json", "--out", &out]);
    let o = run(bin, &all);
    assert!(o.status.success(), "{}", text(&o));
    let rows = serde_json::from_slice(&o.stdout).expect("--json prints the rows");
    (dir, rows)
}

/// Runs the binary at `bin` with `--preset smoke` (the table's jobs on synthetic data, a
/// few steps each), `args`, `--json` and a fresh `--out` under the temporary directory
/// named after `name`; it must succeed, and every row must carry the claim columns, its
/// verdict unjudged (a smoke run proves the pipeline, not the claim). Returns that
/// directory and the printed rows.
pub fn smoke_rows(bin: &str, name: &str, args: &[&str]) -> (PathBuf, Vec<Value>) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.to_string_lossy().to_string();
    let mut all = vec!["--preset", "smoke"];
    all.extend(args);
    all.extend(["--json", "--out", &out]);
    let o = run(bin, &all);
    assert!(o.status.success(), "{}", text(&o));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).expect("--json prints the rows");
    assert!(!rows.is_empty(), "no rows");
    assert_claims(&rows, false);
    (dir, rows)
}

/// Every row has `"claim"` (a phrase, or null for a reference row) and `"holds"` (null
/// unless `judged`); at least one row states a claim.
pub fn assert_claims(rows: &[Value], judged: bool) {
    for r in rows {
        let obj = r.as_object().expect("a row is an object");
        assert!(
            obj.contains_key("claim") && obj.contains_key("holds"),
            "{r}"
        );
        assert!(r["claim"].is_null() || r["claim"].is_string(), "{r}");
        if r["claim"].is_null() || !judged {
            assert!(r["holds"].is_null(), "unjudged row with a verdict: {r}");
        }
    }
    assert!(
        rows.iter().any(|r| r["claim"].is_string()),
        "no row states a claim"
    );
}

/// Every file of `files` (paths relative to `dir`) exists.
pub fn assert_files(dir: &std::path::Path, files: &[&str]) {
    for f in files {
        assert!(dir.join(f).is_file(), "{f} missing in {}", dir.display());
    }
}

/// The table's files in `dir`: `{stem}.csv` with a header and `rows` data lines,
/// `{stem}.json`, and each of `others` (paths relative to `dir`).
pub fn assert_table(dir: &std::path::Path, stem: &str, rows: usize, others: &[&str]) {
    let csv = std::fs::read_to_string(dir.join(format!("{stem}.csv")))
        .unwrap_or_else(|e| panic!("{stem}.csv in {}: {e}", dir.display()));
    assert_eq!(csv.lines().count(), rows + 1, "{csv}");
    assert_files(dir, &[&format!("{stem}.json")]);
    assert_files(dir, others);
}
