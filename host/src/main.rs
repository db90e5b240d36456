//! `homeadam`: the command line of homeadam-rs.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "homeadam",
    version,
    about = "HomeAdam(W) and the paper's baselines: replay and experiments"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay recorded gradients through a rule; print one JSON telemetry line per step.
    Replay {
        /// The rule and its hyper-parameters (JSON).
        #[arg(long)]
        config: PathBuf,
        /// param.<k> [d_k] and grad.<k> [T, d_k], F32 (safetensors).
        #[arg(long)]
        input: PathBuf,
        /// Where to write param.<k> and the state tensors (safetensors).
        #[arg(long)]
        output: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay {
            config,
            input,
            output,
        } => homeadam_host::replay::run(&config, &input, &output, &mut std::io::stdout().lock()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
