//! Progress on a terminal: a bar (indicatif) with the latest log line beneath it, and
//! every log line printed above it. When standard output is not a terminal (a file, a
//! pipe, a launched worker) lines are printed plainly and nothing else.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};

/// `println!`, except that a closed standard output (`train ... | head -1`) is not a
/// panic: a run's results are in its files, so the line is dropped and the run goes on.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// [`say`] on standard error.
pub fn say_err(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar when standard output is a terminal.
    pub fn new() -> Progress {
        if !std::io::stdout().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template(
            "{bar:40} {pos}/{len} steps [{elapsed_precise} < {eta_precise}] {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Progress { bar: Some(bar) }
    }
    /// No bar: lines are printed as they come.
    pub fn off() -> Progress {
        Progress { bar: None }
    }
    /// Prints a line (above the bar on a terminal).
    pub fn line(&self, s: &str) {
        match &self.bar {
            Some(b) => b.println(s),
            None => say(s),
        }
    }
    pub fn step(&self, done: usize, total: usize) {
        if let Some(b) = &self.bar {
            b.set_length(total as u64);
            b.set_position(done as u64);
        }
    }
    /// Reads a worker's log line: `step A/B ...` moves the bar and becomes its message.
    pub fn observe(&self, line: &str) {
        let Some(b) = &self.bar else { return };
        let Some(rest) = line.strip_prefix("step ") else {
            return;
        };
        let Some((a, tail)) = rest.split_once('/') else {
            return;
        };
        let total = tail
            .split_whitespace()
            .next()
            .and_then(|t| t.parse::<u64>().ok());
        if let (Ok(a), Some(t)) = (a.parse::<u64>(), total) {
            b.set_length(t);
            b.set_position(a);
            b.set_message(
                tail.split_once(' ')
                    .map(|x| x.1)
                    .unwrap_or("")
                    .chars()
                    .take(60)
                    .collect::<String>(),
            );
        }
    }
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}
