//! Snapshot faults, injected through failpoints in the in-process cluster:
//! a leader that cannot build a snapshot leaves its lagging follower behind
//! until it can, and a follower that fails to install one stops, and after
//! a restart installs it; no acknowledged write is lost either way.
//!
//! The fail crate's points are process-wide, and the other tests of this
//! binary run alongside: every point here is limited to store ids (the
//! `return(ID)` argument) that no other test uses.

use super::*;

#[test]
fn a_leader_that_cannot_build_a_snapshot_retries_until_it_can() {
    let (mut c, leader, lagging) = lagging([11, 12, 13]);
    quarry_proto::failpoint::configure("snapshot_generate", &format!("return({leader})")).unwrap();
    c.heal();
    c.ticks(30);
    // Still behind: nothing reached it, and the others went on.
    assert_eq!(c.value(lagging, 0), None);
    c.put(leader, 10, &[(100, "w")], Conflict::Overwrite)
        .unwrap();
    quarry_proto::failpoint::remove("snapshot_generate");
    c.ticks(30);
    for h in 0..40 {
        assert_eq!(c.value(lagging, h).as_deref(), Some("v"), "handle {h}");
    }
    assert_eq!(c.value(lagging, 100).as_deref(), Some("w"));
}

#[test]
fn a_follower_that_fails_to_install_a_snapshot_stops_and_installs_it_after_a_restart() {
    let (mut c, leader, lagging) = lagging([21, 22, 23]);
    quarry_proto::failpoint::configure("snapshot_apply", &format!("return({lagging})")).unwrap();
    c.heal();
    let mut failure = None;
    for _ in 0..40 {
        for s in c.stores.values_mut() {
            s.tick();
        }
        for _ in 0..4 {
            for (store, e) in c.try_round() {
                assert_eq!(store, lagging, "{e}");
                c.stop(store);
                failure = Some(e);
            }
        }
        if failure.is_some() {
            break;
        }
    }
    quarry_proto::failpoint::remove("snapshot_apply");
    match failure {
        Some(Error::Engine(m)) => assert!(m.contains("failpoint snapshot_apply"), "{m}"),
        other => panic!("the follower went on: {other:?}"),
    }
    // Nothing of the failed install reached its disk.
    assert_eq!(c.value(lagging, 0), None);
    // The other two still take writes; restarted, the follower catches up.
    c.put(leader, 10, &[(100, "w")], Conflict::Overwrite)
        .unwrap();
    c.start(lagging);
    c.ticks(40);
    for h in 0..40 {
        assert_eq!(c.value(lagging, h).as_deref(), Some("v"), "handle {h}");
    }
    assert_eq!(c.value(lagging, 100).as_deref(), Some("w"));
}
