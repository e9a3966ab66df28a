//! The protocol model at the small bound (`make test`): the protocol as lua/ has it holds
//! every property in every scenario, and each reverted fix of the hardening work (and
//! each core mutation) gives a counterexample of the property it breaks. Traces are
//! printed (`cargo test -- --nocapture` shows them).

use jobqueue_model::{Bug, Params, ProtocolModel, SCENARIOS};
use stateright::{Checker, HasDiscoveries, Model};

fn check(params: Params, stop_at_first_failure: bool) -> impl Checker<ProtocolModel> {
    let depth = params.depth;
    let mut builder = ProtocolModel::new(params)
        .checker()
        .threads(2)
        .target_max_depth(depth);
    if stop_at_first_failure {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    builder.spawn_bfs().join()
}

#[test]
fn the_protocol_holds_every_property_in_every_scenario() {
    let mut states = 0;
    let mut reached = std::collections::BTreeSet::new();
    for name in SCENARIOS {
        let checker = check(Params::scenario(name, false).unwrap(), false);
        states += checker.unique_state_count();
        println!(
            "scenario {name}: {} unique states, depth {}",
            checker.unique_state_count(),
            checker.max_depth()
        );
        for prop in checker.model().properties() {
            if !prop.expectation.discovery_is_failure() {
                if checker.discovery(prop.name).is_some() {
                    reached.insert(prop.name);
                }
            } else if let Some(path) = checker.discovery(prop.name) {
                panic!(
                    "scenario {name}: {} is violated:\n{}",
                    prop.name,
                    checker.model().trace(&path)
                );
            }
        }
    }
    assert!(
        states > 100_000,
        "the small bound explored only {states} states"
    );
    // the model is not vacuous: each event the properties are about happens somewhere
    let goals: std::collections::BTreeSet<_> =
        ProtocolModel::new(Params::scenario("all", false).unwrap())
            .properties()
            .into_iter()
            .filter(|p| !p.expectation.discovery_is_failure())
            .map(|p| p.name)
            .collect();
    assert_eq!(
        reached,
        goals,
        "never reached: {:?}",
        goals.difference(&reached)
    );
}

/// The bug's counterexample in the scenario named, at the small bound.
fn counterexample(bug: Bug, scenario: &str) -> String {
    let checker = check(
        Params::scenario(scenario, false)
            .unwrap()
            .with_bug(Some(bug)),
        true,
    );
    let path = checker.discovery(bug.breaks()).unwrap_or_else(|| {
        panic!(
            "{} gave no counterexample of \"{}\" in scenario {scenario} ({} states)",
            bug.name(),
            bug.breaks(),
            checker.unique_state_count()
        )
    });
    let trace = checker.model().trace(&path);
    println!("{} breaks \"{}\":\n{trace}", bug.name(), bug.breaks());
    trace
}

#[test]
fn a_record_replayed_to_a_foreign_caller_is_found() {
    let trace = counterexample(Bug::ForeignReplay, "foreign");
    assert!(
        trace.contains("another") || trace.contains("request id"),
        "{trace}"
    );
}

#[test]
fn a_local_deadline_later_than_the_lease_is_found() {
    let trace = counterexample(Bug::LateDeadline, "replies");
    assert!(trace.contains("sends the call again"), "{trace}");
}

#[test]
fn a_lease_stranded_after_a_wait_timeout_is_found() {
    let trace = counterexample(Bug::StrandOnWaitTimeout, "durability");
    assert!(trace.contains("WAIT timed out"), "{trace}");
}

#[test]
fn an_orphan_dropped_instead_of_set_aside_is_found() {
    let trace = counterexample(Bug::DropOrphans, "migration");
    assert!(trace.contains("HashAway"), "{trace}");
}
