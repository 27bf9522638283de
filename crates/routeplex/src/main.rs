//! `routeplex`: run virtual routers, look at them, and measure them.

mod alloc_count;
mod bench;
mod demo;
mod lab;
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
