//! Elastic pools end to end, under steady load from the reference router, on 5 simulated
//! hosts with a real control plane, the real operator and agents, and real worker
//! processes behind real EndpointSlices (see `hcomm_e2e::testbed`).
//!
//! One named test per scenario; `cargo test -p hcomm-e2e --test pools -- drain_under_load`
//! runs just that one. Each scenario states the pool sizes it needs and establishes them
//! with the kit (scale and wait), so each runs alone. Run together, they share one
//! testbed (the example pools applied and under load), started by the first and torn
//! down after the last, one scenario at a time in the order below; a scenario that fails
//! takes the testbed down and the next starts a fresh one. After the last, both loads'
//! whole-run counters must still show no failed request.
//!
//! Needs root (network namespaces): without it every scenario is reported as ignored
//! with the reason. The testbed runs the agent, operator, worker and router from
//! `target/`: `cargo test --workspace` builds them all, but `cargo test -p hcomm-e2e`
//! alone does not rebuild them — run `cargo build --workspace --bins` first.

mod autoscaling;
mod backend;
mod check;
mod device_accounting_attack;
mod disruption;
mod faults;
mod local_api_attack;
mod npu_faults;
mod resources;
mod rollout;
mod rollout_canary;
mod rollout_template;
mod saturation;
mod scaling;
mod standby;
mod upgrade;
mod weights_source_attack;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use anyhow::Result;
use hcomm_e2e::testbed::suite::{Scenario, Suite};
use hcomm_e2e::testbed::{CommPatch, ExamplePools};

/// Simulated hosts of the shared testbed (2 devices each).
const HOSTS: usize = 5;
/// The deadline of one scenario (the 30 scale cycles take the longest).
const SCENARIO_DEADLINE: Duration = Duration::from_secs(600);

/// Registers a scenario under its function's name.
macro_rules! scenarios {
    ($($module:ident::$name:ident),* $(,)?) => {
        vec![$({
            fn scenario(pools: &mut ExamplePools) -> Pin<Box<dyn Future<Output = Result<()>> + '_>> {
                Box::pin($module::$name(pools))
            }
            (stringify!($name), scenario as Scenario)
        }),*]
    };
}

fn main() {
    let scenarios = scenarios![
        scaling::both_example_pools_come_up_with_rank_tables_and_topology,
        scaling::scale_out_under_load_fails_no_request,
        scaling::drain_under_load,
        autoscaling::keda_scales_decode_on_load_through_the_hpa_and_back,
        standby::a_scale_out_is_served_from_a_warm_standby_and_a_scale_in_moves_a_member_back,
        saturation::a_stranger_saturating_a_nodes_ports_marks_nothing_down_and_evicts_nobody,
        local_api_attack::a_worker_calling_another_pods_local_api_is_refused_and_the_victim_keeps_serving,
        weights_source_attack::a_weights_source_outside_the_admins_roots_is_refused_before_a_byte_is_read,
        device_accounting_attack::forged_member_pods_in_another_namespace_do_not_make_nodes_look_full,
        faults::a_weight_source_killed_mid_sync_is_replaced_by_the_other,
        faults::a_blackholed_data_nic_is_refused_and_the_next_host_used,
        backend::an_hccl_group_without_the_hccl_runtime_is_refused_while_the_pools_serve,
        faults::an_operator_killed_mid_scale_out_completes_it_after_restart,
        upgrade::an_upgrade_restarts_agents_node_by_node_and_hands_the_operator_over_under_load,
        resources::thirty_scale_cycles_leave_nothing_behind,
        rollout::a_new_weights_version_rolls_member_by_member_and_old_versions_go,
        rollout_template::a_template_change_rolls_member_by_member_and_a_bad_revision_is_stopped_and_rolled_back,
        rollout_canary::a_partition_holds_a_canary_and_a_weights_digest_no_source_has_stops_the_rollout,
        // After the scenarios that need decode packed on few hosts (the weight source's
        // joiner needs an empty one): moving members off a drained node spreads them.
        disruption::kubectl_drain_moves_a_decode_member_through_hcomms_drain,
        disruption::a_member_pod_deleted_directly_drains_on_sigterm_and_is_replaced,
        faults::a_cut_off_host_is_replaced_and_used_again_once_restored,
        npu_faults::a_joiner_whose_npu_has_no_address_in_hccn_conf_is_refused,
        npu_faults::a_joiner_whose_node_has_two_npus_with_one_address_is_refused,
        npu_faults::a_joiner_whose_npu_link_is_down_is_refused,
        npu_faults::a_joiner_whose_npu_tls_differs_from_the_group_is_refused,
        npu_faults::a_joiner_whose_npu_pings_fail_is_refused,
    ];
    let suite = Suite {
        hosts: HOSTS,
        comm: CommPatch::default(),
        deadline: SCENARIO_DEADLINE,
    };
    suite
        .run(scenarios, |rt, pools| {
            // The whole run, both pools: no request failed between the scenarios either.
            rt.block_on(async {
                let (decode, prefill) = pools.stop().await?;
                check::clean(&decode, "decode, whole run")?;
                check::clean(&prefill, "prefill, whole run")
            })
        })
        .exit();
}
