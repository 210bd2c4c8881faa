//! The `train` command line with its whole help: the flags (`config::Args`), and the
//! lists that come from the registries — the models (nn's `MODELS`: `--model`, `--lr`)
//! and the methods with their options (compress's `METHODS`, after the flags) — so that
//! a new model's or method's entry is its documentation.

use crate::config::Args;
use clap::CommandFactory;

/// `train`'s command, help included.
pub fn command() -> clap::Command {
    let methods = format!(
        "Methods and their options (--method NAME --method-opt key=value, repeatable):\n{}",
        compress::help_text()
    );
    with_model_help(Args::command().after_help(methods))
}

/// `--model`'s and `--lr`'s help from nn's model registry, so that a new model's entry
/// is its documentation.
fn with_model_help(cmd: clap::Command) -> clap::Command {
    use nn::models::{names_of, Kind, MODELS};
    let short = format!(
        "Model. Images: {}. Language: {}. Speech: {}",
        names_of(Kind::Image).join(", "),
        names_of(Kind::Language).join(", "),
        names_of(Kind::Speech).join(", ")
    );
    let long = format!(
        "Model; --hidden, --layers, --dropout and --conv-channels change its sizes where it has them.\n{}",
        nn::models::help_text().trim_end()
    );
    let rates: Vec<String> = MODELS
        .iter()
        .filter_map(|m| m.usual_lr.map(|(lr, _)| format!("{} {lr}", m.name)))
        .collect();
    let lr = format!(
        "Base learning rate (default 0.1; {}: their recipes' rates, as 0.1 diverges)",
        rates.join(", ")
    );
    cmd.mut_arg("model", |a| a.help(short).long_help(long))
        .mut_arg("lr", |a| a.help(lr))
}

#[cfg(test)]
mod tests {
    use nn::models::MODELS;

    /// Every model is in the help with its description, and every recipe's rate with it.
    #[test]
    fn the_help_lists_every_model_and_its_usual_rate() {
        let long = super::command().render_long_help().to_string();
        let short = super::command().render_help().to_string();
        for m in MODELS {
            assert!(
                long.contains(m.name) && long.contains(m.about),
                "{}",
                m.name
            );
            assert!(short.contains(m.name), "{}", m.name);
            if let Some((lr, _)) = m.usual_lr {
                assert!(long.contains(&format!("{} {lr}", m.name)), "{}", m.name);
            }
        }
        assert!(long.contains("Methods and their options"));
    }
}
