//! `train`: data-parallel training with compressed gradient exchange (see `--help`).

use clap::FromArgMatches;
use train::progress::{say, say_err};
use train::{Args, Config};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // First of all, so that a Ctrl-C while a worker starts is a stop, not a death its
    // peers would report as a failure (`train::run` installs it for library callers).
    if let Err(e) = train::interrupt::install() {
        say_err(&format!("error: installing the Ctrl-C handler: {e}"));
        std::process::exit(1);
    }
    // As the OS gave them (`args()` panics on one that is not UTF-8, say a run directory
    // named in Latin-1): the launcher passes them on to its workers unchanged.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let matches = train::help::command().get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let result = (|| -> anyhow::Result<()> {
        let mut args = args;
        if args.resume && args.config.is_none() {
            // A resumed run takes its own recorded configuration (flags still override).
            args.config = Some(args.run.out.join("config.toml"));
        }
        let cfg = Config::resolve(&args, &train::config::given_on_command_line(&matches))?;
        Config::check_config_kept(&args, &cfg.out)?;
        if let Some(s) = train::run(&cfg, args.resume, &raw)? {
            if std::env::var("RANK").is_err() {
                let ratio = s
                    .compression_ratio
                    .map_or("- (one worker sends nothing)".to_string(), |r| {
                        format!("{r:.1}x")
                    });
                say(&format!(
                    "final test {} {:.4}, loss {:.4}, compression ratio {ratio} ({} of {} dense bytes), {:.1} s; run directory {}",
                    s.metric_name, s.final_metric, s.final_loss, s.bytes_sent, s.dense_bytes, s.wall_seconds, cfg.out.display()
                ));
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        // A stop asked for is not a failure: rank 0 of a job says where it stopped (and
        // its launcher says it again), and the process exits with 130.
        train::interrupt::exit_if_interrupted(&e);
        say_err(&format!("error: {e:#}"));
        std::process::exit(1);
    }
}
