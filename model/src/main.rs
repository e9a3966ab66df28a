//! `make model`: checks the protocol model at the large bound and prints the state counts;
//! `--small` checks the bound `make test` runs, `--bug NAME` a reverted fix (its
//! counterexample is printed).

use std::time::Instant;

use jobqueue_model::{Bug, Params, ProtocolModel, SCENARIOS};
use stateright::{Checker, Model};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut large = true;
    let mut scenarios: Vec<String> = Vec::new();
    let mut bug = None;
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut timeout = None;
    let mut first = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--small" => large = false,
            "--scenario" => {
                i += 1;
                let name = args.get(i).cloned().unwrap_or_default();
                if Params::scenario(&name, false).is_none() {
                    eprintln!(
                        "model: --scenario takes one of {}, got {name:?}",
                        SCENARIOS.join(", ")
                    );
                    std::process::exit(2);
                }
                scenarios.push(name);
            }
            "--bug" => {
                i += 1;
                let name = args.get(i).map(String::as_str).unwrap_or("");
                let Some(b) = Bug::parse(name) else {
                    eprintln!(
                        "model: --bug takes one of {}, got {name:?}",
                        Bug::ALL.map(Bug::name).join(", ")
                    );
                    std::process::exit(2);
                };
                bug = Some(b);
            }
            "--threads" => {
                i += 1;
                threads = match args.get(i).and_then(|s| s.parse().ok()) {
                    Some(n) if n >= 1 => n,
                    _ => {
                        eprintln!("model: --threads takes a number of 1 or more");
                        std::process::exit(2);
                    }
                };
            }
            "--first" => first = true,
            "--timeout" => {
                i += 1;
                timeout = match args.get(i).and_then(|s| s.parse().ok()) {
                    Some(n) => Some(std::time::Duration::from_secs(n)),
                    None => {
                        eprintln!("model: --timeout takes a number of seconds");
                        std::process::exit(2);
                    }
                };
            }
            other => {
                eprintln!(
                    "model: unknown argument {other:?} (takes --small, --scenario NAME, --bug NAME, --threads N, --timeout SECS, --first)"
                );
                std::process::exit(2);
            }
        }
        i += 1;
    }
    if scenarios.is_empty() {
        scenarios = SCENARIOS.iter().map(|s| s.to_string()).collect();
    }
    let mut total = 0;
    let started = Instant::now();
    let mut failed = false;
    for name in &scenarios {
        let params = Params::scenario(name, large).unwrap().with_bug(bug);
        let (unique, bad) = check(name, params, threads, timeout, first);
        total += unique;
        failed |= bad;
    }
    println!(
        "model: {} scenario(s), {total} unique states in all, {:.1}s",
        scenarios.len(),
        started.elapsed().as_secs_f64()
    );
    if bug.is_some() {
        if !failed {
            println!("model: the reverted fix gave no counterexample");
            std::process::exit(1);
        }
    } else if failed {
        std::process::exit(1);
    }
}

/// Checks one scenario; returns its unique state count and whether a property failed
/// (or a reachability goal was not reached).
fn check(
    name: &str,
    params: Params,
    threads: usize,
    timeout: Option<std::time::Duration>,
    first: bool,
) -> (usize, bool) {
    println!("model: scenario {name}: {params:?}");
    let bug = params.bug;
    let model = ProtocolModel::new(params);
    let started = Instant::now();
    let depth = model.p.depth;
    let mut builder = model.checker().threads(threads).target_max_depth(depth);
    if let Some(t) = timeout {
        builder = builder.timeout(t);
    }
    if bug.is_some() || first {
        builder = builder.finish_when(stateright::HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let elapsed = started.elapsed();
    println!(
        "model: scenario {name}: {} states ({} unique), depth {}, {:.1}s on {threads} thread(s)",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        elapsed.as_secs_f64()
    );
    let mut failed = false;
    for prop in checker.model().properties() {
        let found = checker.discovery(prop.name);
        let failure = prop.expectation.discovery_is_failure();
        match (found, failure) {
            (Some(path), true) => {
                failed = true;
                println!(
                    "VIOLATED: {} ({} steps)\n{}",
                    prop.name,
                    path.clone().into_actions().len(),
                    checker.model().trace(&path)
                );
            }
            (None, true) => println!("holds: {}", prop.name),
            (Some(_), false) => println!("reached: {}", prop.name),
            (None, false) => {
                if bug.is_none() && !first {
                    println!("not reached: {}", prop.name)
                }
            }
        }
    }
    (checker.unique_state_count(), failed)
}
