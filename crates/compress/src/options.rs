//! Choosing a method by name with `key=value` options, validated against one table that
//! also produces the `--help` text. An option that belongs to another method, a value
//! that does not parse, or an unknown method is an error that lists what is valid.

use crate::build::{Context, METHODS};
use crate::{CompressError, Method, Result};
use std::collections::BTreeMap;

/// One method's entry: its name, a one-line summary, its options `(key, default,
/// meaning)` and its constructor (the registry is `crate::build::METHODS`).
pub struct MethodInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub options: &'static [(&'static str, &'static str, &'static str)],
    pub build: Builder,
}

/// Builds a method from its options (defaults from the table) and the job's facts.
pub type Builder = fn(&mut Opts, &Context) -> Result<Box<dyn Method>>;

pub fn method_info(name: &str) -> Result<&'static MethodInfo> {
    METHODS.iter().find(|m| m.name == name).ok_or_else(|| {
        CompressError::Config(format!(
            "unknown method '{name}'; choose one of: {}",
            METHODS
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// The text `--help` prints for `--method` and `--method-opt`.
pub fn help_text() -> String {
    let mut s = String::new();
    for m in METHODS {
        s.push_str(&format!("  {:<9} {}\n", m.name, m.summary));
        for (k, d, h) in m.options {
            let d = if d.is_empty() { "preset" } else { d };
            s.push_str(&format!("      {k}={d}: {h}\n"));
        }
    }
    s
}

/// A method name with its options, checked against [`METHODS`].
#[derive(Clone, Debug, PartialEq)]
pub struct MethodSpec {
    pub name: String,
    pub options: BTreeMap<String, String>,
}

impl MethodSpec {
    /// `name` and `key=value` strings; unknown keys are an error naming the valid ones.
    pub fn parse(name: &str, pairs: &[String]) -> Result<Self> {
        let info = method_info(name)?;
        let mut options = BTreeMap::new();
        for p in pairs {
            let (k, v) = p.split_once('=').ok_or_else(|| {
                CompressError::Config(format!("method option '{p}' is not of the form key=value"))
            })?;
            let (k, v) = (k.trim(), v.trim());
            if !info.options.iter().any(|o| o.0 == k) {
                let valid: Vec<_> = info.options.iter().map(|o| o.0).collect();
                let owner: Vec<_> = METHODS
                    .iter()
                    .filter(|m| m.options.iter().any(|o| o.0 == k))
                    .map(|m| m.name)
                    .collect();
                let hint = if owner.is_empty() {
                    String::new()
                } else {
                    format!(" ('{k}' is an option of {})", owner.join(", "))
                };
                return Err(CompressError::Config(format!(
                    "method {name} has no option '{k}'{hint}; its options are: {}",
                    if valid.is_empty() {
                        "none".to_string()
                    } else {
                        valid.join(", ")
                    }
                )));
            }
            if options.insert(k.to_string(), v.to_string()).is_some() {
                return Err(CompressError::Config(format!(
                    "method option '{k}' given twice"
                )));
            }
        }
        Ok(MethodSpec {
            name: info.name.to_string(),
            options,
        })
    }

    pub(crate) fn reader(&self) -> Opts<'_> {
        Opts { spec: self }
    }
}

/// Typed access to a spec's options with the table's defaults.
pub struct Opts<'a> {
    spec: &'a MethodSpec,
}

impl Opts<'_> {
    /// The given value, or the table's default (None when the default is empty).
    pub fn raw(&self, key: &'static str) -> Option<String> {
        if let Some(v) = self.spec.options.get(key) {
            return Some(v.clone());
        }
        let info = method_info(&self.spec.name).ok()?;
        info.options
            .iter()
            .find(|o| o.0 == key)
            .map(|o| o.1.to_string())
            .filter(|d| !d.is_empty())
    }
    fn bad(&self, key: &str, v: &str, want: &str) -> CompressError {
        CompressError::Config(format!(
            "{} option {key}={v}: expected {want}",
            self.spec.name
        ))
    }
    pub fn f64(&mut self, key: &'static str) -> Result<Option<f64>> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.bad(key, &v, "a number")),
        }
    }
    pub fn usize(&mut self, key: &'static str) -> Result<Option<usize>> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<usize>()
                .map(Some)
                .map_err(|_| self.bad(key, &v, "a non-negative integer")),
        }
    }
    pub fn bool(&mut self, key: &'static str) -> Result<bool> {
        match self.raw(key).as_deref() {
            Some("true") | Some("1") | Some("on") => Ok(true),
            Some("false") | Some("0") | Some("off") | None => Ok(false),
            Some(v) => Err(self.bad(key, v, "true or false")),
        }
    }
    pub fn f64_list(&mut self, key: &'static str) -> Result<Vec<f64>> {
        match self.raw(key) {
            None => Ok(Vec::new()),
            Some(v) => v
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| {
                    s.trim()
                        .parse::<f64>()
                        .map_err(|_| self.bad(key, &v, "numbers separated by commas"))
                })
                .collect(),
        }
    }
    pub fn choice(&mut self, key: &'static str, choices: &[&str]) -> Result<String> {
        let v = self.raw(key).unwrap_or_default();
        if choices.contains(&v.as_str()) {
            Ok(v)
        } else {
            Err(self.bad(key, &v, &format!("one of {}", choices.join(", "))))
        }
    }
}

/// A fraction in (0, 1].
pub(crate) fn check_density(method: &str, d: f64) -> Result<f64> {
    if d > 0.0 && d <= 1.0 {
        Ok(d)
    } else {
        Err(CompressError::Config(format!(
            "{method}: density {d} must be in (0, 1]"
        )))
    }
}
