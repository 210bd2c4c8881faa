//! The papers' claims beside our numbers: every table binary states, for each row, the
//! claim its paper makes in one phrase ("DGC within 0.5 points of the baseline") and
//! whether this run upholds it, in the printed table, the CSV and the JSON (`"claim"`,
//! `"holds": true | false | null`).

use serde_json::Value;

/// The two columns every table's CSV ends with.
pub const COLUMNS: [&str; 2] = ["claim", "holds"];

/// A paper's claim about one row and whether this run upholds it. `holds` is `None`
/// where nothing was judged: a row the paper claims nothing about (`claim` is then
/// `None` too), a number the run did not produce, or a `--preset smoke` run, which
/// proves the pipeline and not the claim.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub claim: Option<String>,
    pub holds: Option<bool>,
}

impl Verdict {
    /// A row the paper makes no claim about (a baseline, a reference row).
    pub fn none() -> Self {
        Verdict {
            claim: None,
            holds: None,
        }
    }
    /// `claim`, upheld or not by `holds` (`None`: the run has no number to judge by).
    pub fn of(claim: impl Into<String>, holds: Option<bool>) -> Self {
        Verdict {
            claim: Some(claim.into()),
            holds,
        }
    }
    /// The same claim, left unjudged unless `judge` (false in a smoke run).
    pub fn judged_if(self, judge: bool) -> Self {
        Verdict {
            holds: self.holds.filter(|_| judge),
            ..self
        }
    }
    /// Adds `"claim"` and `"holds"` to a row (a JSON object).
    pub fn put(&self, row: &mut Value) {
        if let Value::Object(m) = row {
            m.insert("claim".into(), self.claim.clone().into());
            m.insert("holds".into(), self.holds.into());
        }
    }
}

/// The printed cell of a row's `"holds"`: "holds", "fails", or "-".
pub fn cell(holds: Option<bool>) -> &'static str {
    match holds {
        Some(true) => "holds",
        Some(false) => "fails",
        None => "-",
    }
}

/// The claims of `rows` as lines to print under a table, each row named by its
/// `label` field: "label: claim: holds|fails|not judged". Rows without a claim are left
/// out.
pub fn claim_lines(rows: &[Value], label: impl Fn(&Value) -> String) -> Vec<String> {
    rows.iter()
        .filter_map(|r| {
            let claim = r["claim"].as_str()?;
            let holds = match r["holds"].as_bool() {
                Some(true) => "holds",
                Some(false) => "fails",
                None => "not judged",
            };
            Some(format!("  {}: {claim}: {holds}", label(r)))
        })
        .collect()
}

/// Prints [`claim_lines`] under a "The papers' claims" heading, if there are any.
pub fn print_claims(rows: &[Value], label: impl Fn(&Value) -> String) {
    let lines = claim_lines(rows, label);
    if !lines.is_empty() {
        println!("The paper's claims, and whether this run upholds them:");
        for l in lines {
            println!("{l}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_verdict_goes_into_the_row_and_a_smoke_run_judges_nothing() {
        let mut row = json!({"method": "dgc"});
        let v = Verdict::of("DGC within 0.5 points of the baseline", Some(false));
        v.put(&mut row);
        assert_eq!(row["claim"], "DGC within 0.5 points of the baseline");
        assert_eq!(row["holds"], false);
        assert_eq!(cell(v.holds), "fails");
        let smoke = v.judged_if(false);
        assert_eq!(smoke.holds, None);
        assert_eq!(cell(smoke.holds), "-");
        let mut base = json!({"method": "baseline"});
        Verdict::none().put(&mut base);
        assert!(base["claim"].is_null() && base["holds"].is_null());
        let lines = claim_lines(&[row, base], |r| r["method"].as_str().unwrap().into());
        assert_eq!(
            lines,
            ["  dgc: DGC within 0.5 points of the baseline: fails"]
        );
    }
}
