//! Placement (pure): which node and which physical devices a new member gets.
//!
//! Inputs are the `HcommNode` inventories and the devices already assigned to member
//! Pods of any group (annotation `hcomm.io/devices`); a device is never assigned twice
//! and only healthy devices are used. A member's devices are on one node, so intra-member
//! subgroups (tensor parallel) never span nodes. Among the nodes with room, a member goes
//! next to its ring neighbour (the member with the nearest lower index): same node, then
//! same switch, rack, super-pod; ties break by topology order (super-pod, rack, switch,
//! node). Nodes where a member recently failed are used only when nothing else fits.

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
    /// Its devices.
    pub devices: Vec<Device>,
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

/// Free devices per node, mutated as members are placed.
#[derive(Debug, Clone)]
pub struct Capacity<'a> {
    nodes: Vec<&'a NodeInventory>,
    free: BTreeMap<&'a str, Vec<i32>>,
}

impl<'a> Capacity<'a> {
    /// Healthy devices of `nodes` minus `used` (node → device ids held by any member Pod).
    pub fn new(nodes: &'a [NodeInventory], used: &BTreeMap<String, BTreeSet<i32>>) -> Self {
        let mut sorted: Vec<&NodeInventory> = nodes.iter().collect();
        sorted.sort_by(|a, b| topology_key(a).cmp(&topology_key(b)));
        let free = sorted
            .iter()
            .map(|node| {
                let taken = used.get(&node.name);
                let mut ids: Vec<i32> = node
                    .devices
                    .iter()
                    .filter(|d| d.healthy && !taken.is_some_and(|t| t.contains(&d.id)))
                    .map(|d| d.id)
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                (node.name.as_str(), ids)
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

    /// Places one member of `count` devices next to `neighbour` (a node name), avoiding
    /// `avoid` when possible. Returns the node and the devices (lowest ids first), and
    /// marks them used; `None` when no node has room.
    pub fn place(
        &mut self,
        count: usize,
        neighbour: Option<&str>,
        avoid: &BTreeSet<String>,
    ) -> Option<(String, Vec<i32>)> {
        let neighbour = neighbour.and_then(|n| self.node(n));
        let best = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                self.free
                    .get(n.name.as_str())
                    .is_some_and(|f| f.len() >= count)
            })
            .min_by_key(|(order, n)| {
                (
                    avoid.contains(&n.name),
                    neighbour.map_or(0, |nb| distance(nb, n)),
                    *order,
                )
            })
            .map(|(_, n)| *n)?;
        let free = self.free.get_mut(best.name.as_str())?;
        let devices: Vec<i32> = free.drain(..count).collect();
        Some((best.name.clone(), devices))
    }

    /// How many members of `count` devices still fit.
    pub fn members_that_fit(&self, count: usize) -> usize {
        self.free.values().map(|f| f.len() / count.max(1)).sum()
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
            devices: (0..devices)
                .map(|id| Device {
                    id,
                    ip: None,
                    healthy: true,
                })
                .collect(),
        }
    }

    #[test]
    fn unhealthy_and_used_devices_are_never_assigned() {
        let mut n = node("a", "r0", "s0", 4);
        n.devices[0].healthy = false;
        let nodes = vec![n];
        let used = BTreeMap::from([("a".to_owned(), BTreeSet::from([1]))]);
        let mut capacity = Capacity::new(&nodes, &used);
        assert_eq!(
            capacity.place(2, None, &BTreeSet::new()),
            Some(("a".to_owned(), vec![2, 3]))
        );
        assert_eq!(capacity.place(1, None, &BTreeSet::new()), None);
    }

    #[test]
    fn a_member_goes_next_to_its_ring_neighbour() {
        let nodes = vec![
            node("n1", "r0", "s0", 2),
            node("n2", "r1", "s1", 2),
            node("n3", "r1", "s1", 2),
        ];
        let used = BTreeMap::from([("n3".to_owned(), BTreeSet::from([0, 1]))]);
        let mut capacity = Capacity::new(&nodes, &used);
        let (first, _) = capacity.place(2, Some("n3"), &BTreeSet::new()).unwrap();
        assert_eq!(first, "n2", "same switch as n3 beats topology order");
    }

    #[test]
    fn a_failed_node_is_used_only_when_nothing_else_fits() {
        let nodes = vec![node("n1", "r0", "s0", 2), node("n2", "r0", "s0", 2)];
        let avoid = BTreeSet::from(["n1".to_owned()]);
        let mut capacity = Capacity::new(&nodes, &BTreeMap::new());
        assert_eq!(capacity.place(2, None, &avoid).unwrap().0, "n2");
        assert_eq!(capacity.place(2, None, &avoid).unwrap().0, "n1");
    }
}
