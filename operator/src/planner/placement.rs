//! Placement (pure): which node a new member goes to. Which NPUs of that node it gets is
//! the device plugin's choice at admission, not the operator's.
//!
//! A node's room is its allocatable NPU resource (`Node.status.allocatable`, what the
//! device plugin advertises: healthy NPUs only) minus what hcomm member Pods already
//! request there (bound, or required there by the affinity hcomm wrote). Only Pods this
//! operator owns are counted; other workloads are the scheduler's business, and a Pod it
//! then cannot place is reported `Unschedulable`. A member's NPUs are on one node, so
//! intra-member subgroups (tensor parallel) never span nodes. Among the nodes with room, a
//! member goes next to its ring neighbour (the member with the nearest lower index): same
//! node, then same switch, rack, super-pod; ties break by topology order (super-pod, rack,
//! switch, node). Nodes where a member recently failed are used only when nothing else
//! fits.

use std::collections::{BTreeMap, BTreeSet};

use hcomm_crds::TopologyLabels;

/// One device of a node's inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Physical device id.
    pub id: i32,
    /// The device's own address (HCCL `device_ip`), if any.
    pub ip: Option<String>,
    /// Healthy per the driver.
    pub healthy: bool,
}

/// One node's inventory, from its `HcommNode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInventory {
    /// The Kubernetes Node name.
    pub name: String,
    /// Super-pod, rack, switch.
    pub topology: TopologyLabels,
    /// The node's data address.
    pub data_address: Option<String>,
    /// Its devices, as its agent reports them (`HcommNode`).
    pub devices: Vec<Device>,
    /// The NPUs of the group's resource the node can give (its allocatable), 0 when the
    /// Kubernetes Node is missing or does not advertise the resource.
    pub npus: u32,
}

/// Sort key: members are ordered by super-pod, rack, switch, node.
pub fn topology_key(node: &NodeInventory) -> (&TopologyLabels, &str) {
    (&node.topology, node.name.as_str())
}

/// How far apart two nodes are: 0 same node, 1 same switch, 2 same rack, 3 same
/// super-pod, 4 otherwise.
pub fn distance(a: &NodeInventory, b: &NodeInventory) -> u8 {
    let (ta, tb) = (&a.topology, &b.topology);
    if a.name == b.name {
        0
    } else if ta.super_pod == tb.super_pod && ta.rack == tb.rack && ta.switch == tb.switch {
        1
    } else if ta.super_pod == tb.super_pod && ta.rack == tb.rack {
        2
    } else if ta.super_pod == tb.super_pod {
        3
    } else {
        4
    }
}

/// Free NPUs per node, mutated as members are placed.
#[derive(Debug, Clone)]
pub struct Capacity<'a> {
    nodes: Vec<&'a NodeInventory>,
    free: BTreeMap<&'a str, u32>,
}

impl<'a> Capacity<'a> {
    /// The allocatable NPUs of `nodes` minus `used` (node → NPUs requested there by member
    /// Pods).
    pub fn new(nodes: &'a [NodeInventory], used: &BTreeMap<String, u32>) -> Self {
        let mut sorted: Vec<&NodeInventory> = nodes.iter().collect();
        sorted.sort_by(|a, b| topology_key(a).cmp(&topology_key(b)));
        sorted.dedup_by(|a, b| a.name == b.name);
        let free = sorted
            .iter()
            .map(|node| {
                let taken = used.get(&node.name).copied().unwrap_or(0);
                (node.name.as_str(), node.npus.saturating_sub(taken))
            })
            .collect();
        Self {
            nodes: sorted,
            free,
        }
    }

    /// The inventory of `name`.
    pub fn node(&self, name: &str) -> Option<&'a NodeInventory> {
        self.nodes.iter().copied().find(|n| n.name == name)
    }

    /// Places one member of `count` NPUs next to `neighbour` (a node name), avoiding
    /// `avoid` when possible. Returns the node and marks the NPUs taken; `None` when no
    /// node has room.
    pub fn place(
        &mut self,
        count: usize,
        neighbour: Option<&str>,
        avoid: &BTreeSet<String>,
    ) -> Option<String> {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        let neighbour = neighbour.and_then(|n| self.node(n));
        let best = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| self.free.get(n.name.as_str()).is_some_and(|f| *f >= count))
            .min_by_key(|(order, n)| {
                (
                    avoid.contains(&n.name),
                    neighbour.map_or(0, |nb| distance(nb, n)),
                    *order,
                )
            })
            .map(|(_, n)| *n)?;
        let free = self.free.get_mut(best.name.as_str())?;
        *free -= count;
        Some(best.name.clone())
    }

    /// How many members of `count` NPUs still fit.
    pub fn members_that_fit(&self, count: usize) -> usize {
        let count = u32::try_from(count.max(1)).unwrap_or(u32::MAX);
        self.free.values().map(|f| (f / count) as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn node(name: &str, rack: &str, switch: &str, devices: i32) -> NodeInventory {
        NodeInventory {
            name: name.into(),
            topology: TopologyLabels {
                super_pod: Some("sp0".into()),
                rack: Some(rack.into()),
                switch: Some(switch.into()),
            },
            data_address: Some(format!("10.0.0.{}", name.len())),
            devices: Vec::new(),
            npus: u32::try_from(devices).unwrap(),
        }
    }

    #[test]
    fn npus_requested_by_members_are_never_planned_twice() {
        let nodes = vec![node("a", "r0", "s0", 4)];
        let used = BTreeMap::from([("a".to_owned(), 1)]);
        let mut capacity = Capacity::new(&nodes, &used);
        assert_eq!(capacity.members_that_fit(2), 1);
        assert_eq!(
            capacity.place(2, None, &BTreeSet::new()),
            Some("a".to_owned())
        );
        assert_eq!(capacity.place(2, None, &BTreeSet::new()), None);
        assert_eq!(
            capacity.place(1, None, &BTreeSet::new()),
            Some("a".to_owned())
        );
        assert_eq!(capacity.place(1, None, &BTreeSet::new()), None);
    }

    #[test]
    fn more_requested_than_allocatable_leaves_no_room_and_no_underflow() {
        let nodes = vec![node("a", "r0", "s0", 2)];
        let used = BTreeMap::from([("a".to_owned(), 5)]);
        let capacity = Capacity::new(&nodes, &used);
        assert_eq!(capacity.members_that_fit(1), 0);
    }

    #[test]
    fn a_member_goes_next_to_its_ring_neighbour() {
        let nodes = vec![
            node("n1", "r0", "s0", 2),
            node("n2", "r1", "s1", 2),
            node("n3", "r1", "s1", 2),
        ];
        let used = BTreeMap::from([("n3".to_owned(), 2)]);
        let mut capacity = Capacity::new(&nodes, &used);
        let first = capacity.place(2, Some("n3"), &BTreeSet::new()).unwrap();
        assert_eq!(first, "n2", "same switch as n3 beats topology order");
    }

    #[test]
    fn a_failed_node_is_used_only_when_nothing_else_fits() {
        let nodes = vec![node("n1", "r0", "s0", 2), node("n2", "r0", "s0", 2)];
        let avoid = BTreeSet::from(["n1".to_owned()]);
        let mut capacity = Capacity::new(&nodes, &BTreeMap::new());
        assert_eq!(capacity.place(2, None, &avoid).unwrap(), "n2");
        assert_eq!(capacity.place(2, None, &avoid).unwrap(), "n1");
    }
}
