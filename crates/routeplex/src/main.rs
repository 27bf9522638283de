//! `routeplex`: run virtual routers, look at them, and measure them.

mod alloc_count;
mod bench;
mod demo;
mod lab;
mod service;
mod sys;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

/// Many isolated virtual routers on one host, joined by a fast software Ethernet.
#[derive(Parser)]
#[command(name = "routeplex", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run several VRs in memory and offer them 64-byte traffic for a few seconds (no root).
    Demo(demo::Args),
    /// Validate a topology file and print what it describes.
    Show {
        /// The topology file (YAML).
        file: PathBuf,
    },
    /// Make a topology's hosts (namespaces, veths) and run its data plane in the background
    /// (root). Returns once forwarding runs; harmless if it is up already.
    Up {
        /// The topology file (YAML).
        file: PathBuf,
    },
    /// Stop a topology's data plane and remove exactly what `up` made (root).
    Down {
        /// The topology file (YAML).
        file: PathBuf,
    },
    /// Run a topology's data plane in the foreground until Ctrl-C (its interfaces must exist).
    Run {
        /// The topology file (YAML).
        file: PathBuf,
        /// Serve the control socket in this directory (set by `up`).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Benchmarks (JSON with --json).
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Longest-prefix-match lookups per second on a prefix table.
    Fib(bench::FibArgs),
    /// One VR forwarding 64-byte UDP between two in-memory ports on one worker.
    Pipeline(bench::PipelineArgs),
}

/// Address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Family {
    Ipv4,
    Ipv6,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Demo(a) => demo::run(a),
        Cmd::Show { file } => control::Topology::load(&file)
            .map(|t| println!("{}", t.summary().trim_end()))
            .map_err(anyhow::Error::from),
        Cmd::Up { file } => service::up(&file),
        Cmd::Down { file } => service::down(&file),
        Cmd::Run { file, state_dir } => service::run(&file, state_dir.as_deref()),
        Cmd::Bench(BenchCmd::Fib(a)) => bench::fib(a),
        Cmd::Bench(BenchCmd::Pipeline(a)) => bench::pipeline(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("routeplex: {e:#}");
            ExitCode::FAILURE
        }
    }
}
