//! Planner tests: rules as examples, then a seeded simulation that plays the operator,
//! the agent and the user against each other and checks the invariants after every step.
//! Size: the simulated world (operator, agent, device plugin) and the rules it checks share
//! one file so each invariant reads next to the world that exercises it.

use std::collections::{BTreeMap, BTreeSet};

use hcomm_crds::{MemberPhase, ScalingStrategy};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::phase::ObservedMember;

fn node(name: &str, switch: &str, devices: i32) -> NodeInventory {
    NodeInventory {
        name: name.into(),
        topology: hcomm_crds::TopologyLabels {
            super_pod: Some("sp".into()),
            rack: Some("r".into()),
            switch: Some(switch.into()),
        },
        data_address: None,
        devices: Vec::new(),
        npus: u32::try_from(devices).unwrap(),
    }
}

fn desired(replicas: i32, dpm: i32) -> Desired {
    Desired {
        group: "g".into(),
        replicas,
        standby: 0,
        devices_per_member: dpm,
        strategy: ScalingStrategy::Incremental,
        max_joining: 4,
        max_unavailable: 1,
        drain_timeout: SignedDuration::from_secs(60),
        deleting: false,
        weights_digest: None,
        rollout: rollout::Settings::default(),
    }
}

impl ObservedMember {
    /// The agent's side once the member is verified, synced and joined: the gate opens,
    /// unless the operator labelled it standby (then the agent holds it, and closes it on
    /// a serving member moved back).
    fn arrive(&mut self) {
        self.running = true;
        self.serving = !self.standby;
        self.phase = if self.standby {
            MemberPhase::Standby
        } else {
            MemberPhase::Ready
        };
    }
}

/// A tiny cluster: the stored Pods, the recorded epoch, and time.
struct World {
    members: Vec<ObservedMember>,
    /// The digest joiners are created for (what `pod_builder` writes from the spec).
    weights: Option<String>,
    /// The revision joiners are made from (`pod_builder`'s label); `None`: Pods made
    /// before revisions existed.
    revision: Option<String>,
    recorded: Recorded,
    nodes: Vec<NodeInventory>,
    now: Timestamp,
}

impl World {
    fn new(nodes: Vec<NodeInventory>) -> Self {
        Self {
            members: Vec::new(),
            weights: None,
            revision: None,
            recorded: Recorded::default(),
            nodes,
            now: Timestamp::from_second(1_000_000).unwrap(),
        }
    }

    fn input(&self, desired: &Desired) -> PlanInput {
        let mut used: BTreeMap<String, u32> = BTreeMap::new();
        for m in &self.members {
            if let Some(n) = &m.node {
                *used.entry(n.clone()).or_default() += desired.devices_per_member as u32;
            }
        }
        PlanInput {
            desired: desired.clone(),
            members: self.members.clone(),
            nodes: self.nodes.clone(),
            used_npus: used,
            recorded: self.recorded.clone(),
            avoid_nodes: BTreeSet::new(),
            new_members_after: None,
            rollout_stopped: None,
            now: self.now,
        }
    }

    /// Carries a plan out the way `apply` does (Pods, drain requests, deletions, record),
    /// and plays the device plugin: each joiner gets the lowest `dpm` NPUs of its node
    /// that no Pod holds, and there must be that many (the planner never overcommits).
    fn apply(&mut self, plan: &Plan, dpm: i32) {
        for j in plan.joiners() {
            let npus = self.nodes.iter().find(|n| n.name == j.node).unwrap().npus as i32;
            let held: BTreeSet<i32> = self
                .members
                .iter()
                .filter(|m| m.node.as_deref() == Some(j.node.as_str()))
                .flat_map(|m| m.devices.iter().copied())
                .collect();
            let devices: Vec<i32> = (0..npus)
                .filter(|d| !held.contains(d))
                .take(dpm as usize)
                .collect();
            assert_eq!(
                devices.len(),
                dpm as usize,
                "{} planned on {} without room",
                j.name,
                j.node
            );
            self.members.push(ObservedMember {
                name: j.name.clone(),
                index: j.index,
                epoch: plan.epoch,
                node: Some(j.node.clone()),
                allocation: None,
                unschedulable: None,
                blocked: None,
                devices,
                phase: MemberPhase::Pending,
                failed: false,
                message: None,
                drain_requested_at: None,
                drained: false,
                serving: false,
                standby: j.standby,
                weights_digest: self.weights.clone(),
                revision: self.revision.clone(),
                unreachable: false,
                deleting: false,
                running: false,
                created_at: Some(self.now),
            });
        }
        for name in &plan.drain {
            let m = self.members.iter_mut().find(|m| &m.name == name).unwrap();
            m.drain_requested_at.get_or_insert(self.now);
            m.phase = MemberPhase::Draining;
        }
        for (name, standby) in &plan.relabel {
            let m = self.members.iter_mut().find(|m| &m.name == name).unwrap();
            m.standby = *standby;
        }
        let deleted: BTreeSet<&String> = plan.delete.iter().map(|r| &r.name).collect();
        self.members.retain(|m| !deleted.contains(&m.name));
        self.recorded = Recorded {
            epoch: plan.epoch,
            members: plan.members.iter().map(|m| m.name.clone()).collect(),
        };
    }

    /// The agent: members move forward, draining ones drain.
    fn agent_step(&mut self, rng: &mut StdRng) {
        for m in &mut self.members {
            if !rng.random_bool(0.6) {
                continue;
            }
            if m.drain_requested_at.is_some() {
                m.serving = false;
                m.drained = m.running && rng.random_bool(0.7);
            } else if !m.failed {
                m.running = true;
                if rng.random_bool(0.05) {
                    m.failed = true;
                    m.phase = MemberPhase::Failed;
                } else if m.phase == MemberPhase::Pending && rng.random_bool(0.5) {
                    // Synced, building the planned epoch's domain.
                    m.phase = MemberPhase::Joining;
                } else {
                    m.arrive();
                }
            }
        }
        self.now += SignedDuration::from_secs(rng.random_range(1..30));
    }
}

#[test]
fn a_new_group_gets_members_in_topology_order_at_epoch_one() {
    let mut world = World::new(vec![node("b", "s1", 4), node("a", "s0", 4)]);
    let plan = plan(&world.input(&desired(3, 2)));
    assert_eq!(plan.epoch, 1);
    assert!(plan.changed);
    let placed: Vec<&str> = plan.members.iter().map(|m| m.node.as_str()).collect();
    assert_eq!(placed, vec!["a", "a", "b"]);
    assert!(
        plan.members
            .iter()
            .all(|m| m.devices.is_empty() && m.allocation.is_none()),
        "the device plugin, not the planner, picks a joiner's NPUs"
    );
    assert_eq!(plan.members[2].name, "g-2-e1");
    world.apply(&plan, 2);
    let again = super::plan(&world.input(&desired(3, 2)));
    assert_eq!(again.epoch, 1);
    assert!(!again.changed && again.drain.is_empty() && again.joiners().count() == 0);
}

#[test]
fn scale_out_keeps_existing_members_and_bumps_the_epoch_once() {
    let mut world = World::new(vec![node("a", "s0", 8)]);
    world.apply(&plan(&world.input(&desired(2, 2))), 2);
    let before: Vec<_> = world.members.clone();
    let grow = plan(&world.input(&desired(4, 2)));
    assert_eq!(grow.epoch, 2);
    assert_eq!(
        grow.joiners().map(|j| j.index).collect::<Vec<_>>(),
        vec![2, 3]
    );
    for m in &before {
        let kept = grow.members.iter().find(|p| p.name == m.name).unwrap();
        assert_eq!((kept.index, &kept.devices), (m.index, &m.devices));
    }
    world.apply(&grow, 2);
    assert_eq!(plan(&world.input(&desired(4, 2))).epoch, 2);
}

#[test]
fn joiners_wait_while_the_planned_epoch_forms_then_come_together() {
    let mut world = World::new(vec![node("a", "s0", 8)]);
    world.apply(&plan(&world.input(&desired(2, 1))), 1);
    world.members.iter_mut().for_each(ObservedMember::arrive);
    world.apply(&plan(&world.input(&desired(4, 1))), 1);
    assert_eq!(world.recorded.epoch, 2);
    // One joiner of epoch 2 serves; the other has synced and builds the domain.
    world.members[2].arrive();
    world.members[3].phase = MemberPhase::Joining;
    let waiting = plan(&world.input(&desired(6, 1)));
    assert_eq!(waiting.joiners().count(), 0, "{waiting:?}");
    assert_eq!(waiting.epoch, 2, "epoch 2 is left to form");
    world.members[3].arrive();
    let grow = plan(&world.input(&desired(6, 1)));
    assert_eq!(
        (grow.joiners().count(), grow.epoch),
        (2, 3),
        "both joiners in one epoch once it formed"
    );
}

#[test]
fn scale_in_drains_the_highest_index_and_deletes_it_only_once_drained() {
    let mut world = World::new(vec![node("a", "s0", 8)]);
    world.apply(&plan(&world.input(&desired(3, 1))), 1);
    for m in &mut world.members {
        m.running = true;
        m.serving = true;
    }
    let shrink = plan(&world.input(&desired(2, 1)));
    assert_eq!(shrink.drain, vec!["g-2-e1".to_owned()]);
    assert_eq!(shrink.epoch, 2);
    assert!(shrink.delete.is_empty());
    world.apply(&shrink, 1);
    let waiting = plan(&world.input(&desired(2, 1)));
    assert!(waiting.delete.is_empty(), "not drained yet");
    assert_eq!(waiting.epoch, 2);
    assert!(waiting.recheck_after.is_some());
    world.members[2].drained = true;
    let done = plan(&world.input(&desired(2, 1)));
    assert_eq!(done.delete[0].reason, RemovalReason::Drained);
}

#[test]
fn a_drain_that_times_out_is_deleted_with_that_reason() {
    let mut world = World::new(vec![node("a", "s0", 8)]);
    world.apply(&plan(&world.input(&desired(2, 1))), 1);
    for m in &mut world.members {
        m.running = true;
        m.serving = true;
    }
    world.apply(&plan(&world.input(&desired(1, 1))), 1);
    world.now += SignedDuration::from_secs(61);
    let late = plan(&world.input(&desired(1, 1)));
    assert_eq!(late.delete[0].reason, RemovalReason::DrainTimedOut);
}

#[test]
fn not_enough_devices_leaves_joiners_unplaced_without_an_epoch_change() {
    let mut world = World::new(vec![node("a", "s0", 3)]);
    let first = plan(&world.input(&desired(2, 2)));
    assert_eq!((first.members.len(), first.unplaced), (1, 1));
    world.apply(&first, 2);
    let again = plan(&world.input(&desired(2, 2)));
    assert_eq!((again.unplaced, again.epoch, again.changed), (1, 1, false));
}

#[test]
fn a_failed_member_is_drained_and_replaced_on_another_node() {
    let mut world = World::new(vec![node("a", "s0", 2), node("b", "s0", 2)]);
    world.apply(&plan(&world.input(&desired(1, 1))), 1);
    assert_eq!(world.members[0].node.as_deref(), Some("a"));
    world.members[0].failed = true;
    world.members[0].running = true;
    let replace = plan(&world.input(&desired(1, 1)));
    assert_eq!(replace.drain, vec!["g-0-e1".to_owned()]);
    assert_eq!(replace.failed_nodes, BTreeSet::from(["a".to_owned()]));
    let joiner = replace.joiners().next().unwrap();
    assert_eq!((joiner.index, joiner.node.as_str()), (0, "b"));
    world.apply(&replace, 1);
    let next = plan(&world.input(&desired(1, 1)));
    assert_eq!(next.delete[0].reason, RemovalReason::NotServing);
}

#[test]
fn while_failures_back_off_a_failed_member_is_drained_but_replaced_only_after_the_delay() {
    let mut world = World::new(vec![node("a", "s0", 2), node("b", "s0", 2)]);
    world.apply(&plan(&world.input(&desired(1, 1))), 1);
    world.members[0].failed = true;
    world.members[0].running = true;
    let mut input = world.input(&desired(1, 1));
    input.new_members_after = Some(world.now + SignedDuration::from_secs(4));
    let held = plan(&input);
    assert_eq!(
        held.drain,
        vec!["g-0-e1".to_owned()],
        "the failed one still goes"
    );
    assert_eq!(held.joiners().count(), 0, "no replacement before the delay");
    assert_eq!(held.recheck_after, Some(SignedDuration::from_secs(4)));
    input.now += SignedDuration::from_secs(4);
    assert_eq!(
        plan(&input).joiners().count(),
        1,
        "replaced once the delay is over"
    );
}

#[test]
fn rebuild_tears_everything_down_before_building_the_new_set() {
    let mut world = World::new(vec![node("a", "s0", 8)]);
    let mut d = desired(2, 1);
    d.strategy = ScalingStrategy::Rebuild;
    world.apply(&plan(&world.input(&d)), 1);
    d.replicas = 3;
    let teardown = plan(&world.input(&d));
    assert_eq!(teardown.drain.len(), 2);
    assert_eq!(teardown.joiners().count(), 0);
    assert_eq!(teardown.epoch, 2);
    world.apply(&teardown, 1);
    for m in &mut world.members {
        m.drained = true;
    }
    world.apply(&plan(&world.input(&d)), 1);
    let rebuild = plan(&world.input(&d));
    assert_eq!(rebuild.joiners().count(), 3);
    assert_eq!(rebuild.epoch, 3);
}

#[test]
fn deleting_the_group_drains_everyone_and_finishes_when_nothing_is_left() {
    let mut world = World::new(vec![node("a", "s0", 8)]);
    world.apply(&plan(&world.input(&desired(2, 1))), 1);
    let mut d = desired(2, 1);
    d.deleting = true;
    let p = plan(&world.input(&d));
    assert_eq!(p.drain.len(), 2);
    assert!(!p.finished);
    world.members.clear();
    assert!(plan(&world.input(&d)).finished);
}

/// Property test: random scaling, agent progress, failures and time; after every step no
/// device is assigned twice, existing members keep index and devices, the epoch moves by
/// exactly one iff the planned set changes, limits hold, and the group converges.
#[test]
fn random_scaling_keeps_every_invariant_and_converges() {
    for seed in 0..200u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes: Vec<NodeInventory> = (0..rng.random_range(1..5))
            .map(|i| {
                node(
                    &format!("n{i}"),
                    &format!("s{}", i / 2),
                    rng.random_range(2..9),
                )
            })
            .collect();
        let dpm = [1, 2, 4][rng.random_range(0..3)];
        let mut world = World::new(nodes);
        let mut d = desired(rng.random_range(0..6), dpm);
        d.max_joining = rng.random_range(1..4);
        d.max_unavailable = rng.random_range(1..3);
        // Every third seed keeps warm standby members beside the serving ones.
        let with_standby = seed % 3 == 0;
        d.standby = if with_standby {
            rng.random_range(1..3)
        } else {
            0
        };
        for step in 0..60 {
            if step < 40 && rng.random_bool(0.15) {
                d.replicas = rng.random_range(0..6);
            }
            if with_standby && step < 40 && rng.random_bool(0.1) {
                d.standby = rng.random_range(0..3);
            }
            let before: BTreeMap<String, (i32, Vec<i32>)> = world
                .members
                .iter()
                .map(|m| (m.name.clone(), (m.index, m.devices.clone())))
                .collect();
            let recorded = world.recorded.clone();
            let p = plan(&world.input(&d));
            let ctx = format!("seed {seed} step {step}");
            // Epoch: +1 exactly when the set changes.
            let names: BTreeSet<String> = p.members.iter().map(|m| m.name.clone()).collect();
            if names == recorded.members {
                assert_eq!(p.epoch, recorded.epoch, "{ctx}");
            } else {
                assert_eq!(p.epoch, recorded.epoch + 1, "{ctx}");
            }
            // Kept members keep index and devices.
            for m in p.members.iter().filter(|m| !m.joiner) {
                assert_eq!(before[&m.name], (m.index, m.devices.clone()), "{ctx}");
            }
            // Limits.
            let joining = world
                .members
                .iter()
                .filter(|m| m.in_set() && m.phase.is_joining() && !p.drain.contains(&m.name))
                .count();
            assert!(
                p.joiners().count() + joining <= d.max_joining as usize || p.joiners().count() == 0,
                "{ctx}"
            );
            // A forming epoch is never superseded by a joiner.
            assert!(
                p.joiners().count() == 0
                    || !world
                        .members
                        .iter()
                        .any(|m| m.phase == MemberPhase::Joining),
                "{ctx}: a joiner while the planned epoch forms"
            );
            // Indices unique; each joiner fits its node (`World::apply` asserts the room).
            let indices: BTreeSet<i32> = p.members.iter().map(|m| m.index).collect();
            assert_eq!(indices.len(), p.members.len(), "{ctx}");
            // Standby: never more than asked, and never while members are missing.
            let held = p.members.iter().filter(|m| m.standby).count();
            assert!(held <= d.standby as usize, "{ctx}: {held} standby");
            assert!(
                held == 0 || p.members.len() > d.replicas as usize,
                "{ctx}: standby with only {} members",
                p.members.len()
            );
            world.apply(&p, dpm);
            // No device held twice on a node.
            let mut seen = BTreeSet::new();
            for m in &world.members {
                for dev in &m.devices {
                    assert!(seen.insert((m.node.clone(), *dev)), "{ctx}: double {dev}");
                }
            }
            world.agent_step(&mut rng);
        }
        // Converge: no more failures, agent keeps going.
        for m in &mut world.members {
            m.failed = false;
        }
        for _ in 0..40 {
            let p = plan(&world.input(&d));
            world.apply(&p, dpm);
            for m in &mut world.members {
                if m.drain_requested_at.is_some() {
                    m.running = true;
                    m.serving = false;
                    m.drained = true;
                    m.phase = MemberPhase::Draining;
                } else {
                    m.arrive();
                }
            }
        }
        let capacity: usize = world
            .nodes
            .iter()
            .map(|n| n.npus as usize / dpm as usize)
            .sum();
        let expected = ((d.replicas + d.standby) as usize).min(capacity);
        assert_eq!(world.members.len(), expected, "seed {seed} converges");
        let serving = world.members.iter().filter(|m| m.serving).count();
        assert_eq!(
            serving,
            expected.min(d.replicas as usize),
            "seed {seed}: serving first, standby with what is left"
        );
        let p = plan(&world.input(&d));
        assert!(!p.changed, "seed {seed} is stable");
    }
}

#[test]
fn a_member_on_an_unreachable_node_is_drained_first_and_deleted_only_at_the_drain_deadline() {
    let mut world = World::new(vec![node("a", "s0", 2), node("b", "s0", 2)]);
    world.apply(&plan(&world.input(&desired(1, 1))), 1);
    let m = &mut world.members[0];
    (m.running, m.serving, m.failed, m.unreachable) = (true, true, true, true);
    let replace = plan(&world.input(&desired(1, 1)));
    assert_eq!(replace.drain, vec!["g-0-e1".to_owned()]);
    world.apply(&replace, 1);
    // Peers' evidence is no reason to skip the drain: nothing is deleted before the
    // deadline, and the plan looks again then.
    let next = plan(&world.input(&desired(1, 1)));
    assert!(next.delete.is_empty(), "{:?}", next.delete);
    let wait = next
        .recheck_after
        .expect("a drain deadline to look again at");
    assert!(wait > SignedDuration::ZERO && wait <= desired(1, 1).drain_timeout);
    // Not serving any more (its phase says so, but the verdict is not its agent's) still
    // waits for the deadline.
    world.members[0].serving = false;
    assert!(plan(&world.input(&desired(1, 1))).delete.is_empty());
    // At the deadline it goes, named as unreachable.
    world.now += desired(1, 1).drain_timeout;
    let late = plan(&world.input(&desired(1, 1)));
    assert_eq!(late.delete.len(), 1);
    assert_eq!(late.delete[0].reason, RemovalReason::Unreachable);
}

#[test]
fn a_member_that_drains_while_judged_unreachable_is_deleted_as_drained() {
    let mut world = World::new(vec![node("a", "s0", 2), node("b", "s0", 2)]);
    world.apply(&plan(&world.input(&desired(1, 1))), 1);
    let m = &mut world.members[0];
    (m.running, m.serving, m.failed, m.unreachable) = (true, true, true, true);
    world.apply(&plan(&world.input(&desired(1, 1))), 1);
    world.members[0].drained = true;
    let next = plan(&world.input(&desired(1, 1)));
    assert_eq!(next.delete[0].reason, RemovalReason::Drained);
}

#[test]
fn a_new_weights_digest_rolls_members_one_at_a_time_while_the_others_serve() {
    let mut world = World::new(vec![node("a", "s0", 8)]);
    let mut want = desired(3, 1);
    // In place, as before revisions: one member out of service at a time.
    (want.rollout.max_surge, want.rollout.max_unavailable) = (0, 1);
    want.weights_digest = Some("sha256:v1".into());
    world.weights = want.weights_digest.clone();
    world.apply(&plan(&world.input(&want)), 1);
    let ready = |w: &mut World| {
        for m in &mut w.members {
            if m.phase != MemberPhase::Draining {
                (m.phase, m.running, m.serving) = (MemberPhase::Ready, true, true);
            }
        }
    };
    ready(&mut world);
    assert!(
        plan(&world.input(&want)).drain.is_empty(),
        "nothing to roll"
    );

    want.weights_digest = Some("sha256:v2".into());
    world.weights = want.weights_digest.clone();
    let mut rolled = Vec::new();
    for _ in 0..20 {
        let p = plan(&world.input(&want));
        assert!(p.drain.len() <= 1, "one at a time: {:?}", p.drain);
        let serving = world
            .members
            .iter()
            .filter(|m| m.phase == MemberPhase::Ready)
            .count();
        assert!(serving >= 2, "at most maxUnavailable (1) out of service");
        rolled.extend(p.drain.clone());
        world.apply(&p, 1);
        for m in &mut world.members {
            if m.phase == MemberPhase::Draining {
                m.drained = true;
            }
        }
        ready(&mut world);
        if world
            .members
            .iter()
            .all(|m| m.weights_digest == want.weights_digest && m.phase == MemberPhase::Ready)
            && world.members.len() == 3
        {
            break;
        }
    }
    assert_eq!(world.members.len(), 3);
    assert!(
        world
            .members
            .iter()
            .all(|m| m.weights_digest.as_deref() == Some("sha256:v2"))
    );
    assert_eq!(
        rolled,
        ["g-2-e1", "g-1-e1", "g-0-e1"],
        "highest index first"
    );
    let mut indices: Vec<i32> = world.members.iter().map(|m| m.index).collect();
    indices.sort();
    assert_eq!(
        indices,
        [0, 1, 2],
        "replacements take the freed indices (ranks)"
    );
}

#[test]
fn a_new_revision_surges_one_member_and_never_serves_fewer_than_replicas() {
    let mut world = World::new(vec![node("a", "s0", 8)]);
    let mut want = desired(3, 1);
    want.rollout.update_revision = "r1".into();
    world.revision = Some("r1".into());
    world.apply(&plan(&world.input(&want)), 1);
    let serve = |w: &mut World| {
        for m in &mut w.members {
            if m.drain_requested_at.is_none() {
                (m.phase, m.running, m.serving) = (MemberPhase::Ready, true, true);
            } else {
                m.drained = true;
            }
        }
    };
    serve(&mut world);
    assert_eq!(
        plan(&world.input(&want)).rollout,
        rollout::Progress::Complete
    );

    // A template change: a new revision.
    want.rollout.update_revision = "r2".into();
    world.revision = Some("r2".into());
    let mut drained = Vec::new();
    for round in 0..30 {
        let p = plan(&world.input(&want));
        let ready = world
            .members
            .iter()
            .filter(|m| m.in_set() && m.phase == MemberPhase::Ready && !p.drain.contains(&m.name))
            .count();
        assert!(
            ready >= 3,
            "round {round}: {ready} serving, fewer than replicas"
        );
        assert!(
            p.members.len() <= 4,
            "round {round}: more than replicas + maxSurge"
        );
        drained.extend(p.drain.clone());
        world.apply(&p, 1);
        if p.rollout == rollout::Progress::Complete && world.members.len() == 3 {
            break;
        }
        // The joiners of this round become Ready in the next one, not at once.
        serve(&mut world);
    }
    assert_eq!(
        drained,
        ["g-2-e1", "g-1-e1", "g-0-e1"],
        "old members, one at a time"
    );
    assert!(
        world
            .members
            .iter()
            .all(|m| m.revision.as_deref() == Some("r2") && m.phase == MemberPhase::Ready)
    );
}

#[test]
fn a_stopped_rollout_is_rolled_back_by_the_old_revision_and_old_members_never_drain() {
    let mut world = World::new(vec![node("a", "s0", 8)]);
    let mut want = desired(2, 1);
    want.rollout.update_revision = "good".into();
    world.revision = Some("good".into());
    world.apply(&plan(&world.input(&want)), 1);
    for m in &mut world.members {
        (m.phase, m.running, m.serving) = (MemberPhase::Ready, true, true);
    }
    let old: BTreeSet<String> = world.members.iter().map(|m| m.name.clone()).collect();

    // A bad template: its member never becomes Ready.
    want.rollout.update_revision = "bad".into();
    world.revision = Some("bad".into());
    let p = plan(&world.input(&want));
    assert_eq!(p.joiners().count(), 1);
    world.apply(&p, 1);
    world.now += want.rollout.progress_deadline;
    let p = plan(&world.input(&want));
    assert!(
        matches!(&p.rollout, rollout::Progress::Stopped(s) if s.reason == rollout::StopReason::DeadlineExceeded),
        "{:?}",
        p.rollout
    );
    assert!(p.drain.is_empty() && p.joiners().count() == 0);
    world.apply(&p, 1);

    // The old template again: the stuck member drains, nobody else.
    want.rollout.update_revision = "good".into();
    world.revision = Some("good".into());
    let p = plan(&world.input(&want));
    assert_eq!(p.drain, ["g-2-e2"]);
    assert_eq!(p.joiners().count(), 0);
    world.apply(&p, 1);
    assert!(
        world
            .members
            .iter()
            .filter(|m| old.contains(&m.name))
            .all(|m| m.in_set())
    );
    assert_eq!(
        plan(&world.input(&want)).rollout,
        rollout::Progress::Complete
    );
}

#[test]
fn a_scale_out_is_served_from_the_warm_standby_and_a_joiner_refills_it() {
    let mut world = World::new(vec![node("a", "s0", 8)]);
    let mut d = desired(2, 1);
    d.standby = 1;
    let first = plan(&world.input(&d));
    assert_eq!(first.members.len(), 3);
    assert_eq!(
        first
            .members
            .iter()
            .filter(|m| m.standby)
            .map(|m| m.index)
            .collect::<Vec<_>>(),
        [2],
        "the highest index waits"
    );
    world.apply(&first, 1);
    for m in &mut world.members {
        m.arrive();
    }
    d.replicas = 3;
    let grow = plan(&world.input(&d));
    assert_eq!(grow.relabel, [("g-2-e1".to_owned(), false)], "promoted");
    let joiners: Vec<_> = grow.joiners().collect();
    assert_eq!(joiners.len(), 1);
    assert!(joiners[0].standby, "the joiner refills the standby");
    world.apply(&grow, 1);
    // Scale back in: the highest index drains, and a serving member goes back to standby.
    for m in &mut world.members {
        m.arrive();
    }
    d.replicas = 2;
    let shrink = plan(&world.input(&d));
    assert_eq!(shrink.drain, ["g-3-e2".to_owned()]);
    assert_eq!(shrink.relabel, [("g-2-e1".to_owned(), true)]);
}
