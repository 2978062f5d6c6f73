//! Devices: Ascend NPUs from `npu-smi info` (preferred) or `/dev/davinci<N>`; CPU nodes
//! from configuration (`--cpu-devices N`). Parsers are pure; a missing tool is "no
//! devices found this way", never an error.

use std::path::Path;

use hcomm_crds::{DeviceHealth, DeviceInventory};

/// Parses the table printed by `npu-smi info`: the first row of each NPU block is
/// `| <id> <name> | <health> | ...`.
pub fn parse_npu_smi(text: &str) -> Vec<DeviceInventory> {
    let mut out = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            continue;
        }
        let mut first = cells[1].split_whitespace();
        let (Some(id), Some(name), None) = (first.next(), first.next(), first.next()) else {
            continue;
        };
        let Ok(id) = id.parse::<i32>() else { continue };
        let health = match cells[2].split_whitespace().next().unwrap_or_default() {
            "OK" => DeviceHealth::Healthy,
            "Warning" | "Alarm" | "Critical" | "Abnormal" | "Error" => DeviceHealth::Unhealthy,
            other if other.contains(':') => continue, // the Bus-Id row
            _ => DeviceHealth::Unknown,
        };
        if out.iter().any(|d: &DeviceInventory| d.id == id) {
            continue;
        }
        let model = if name.starts_with("Ascend") {
            name.to_owned()
        } else {
            format!("Ascend{name}")
        };
        out.push(DeviceInventory {
            id,
            model,
            numa_node: None,
            ip: None,
            health,
            network: None,
        });
    }
    out
}

/// Device ids from `/dev` entry names (`davinci0`, `davinci1`; not `davinci_manager`).
pub fn davinci_ids<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<i32> {
    let mut ids: Vec<i32> = names
        .into_iter()
        .filter_map(|n| n.strip_prefix("davinci")?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// `n` CPU rank slots, ids 0..n.
pub fn cpu_devices(n: u32) -> Vec<DeviceInventory> {
    (0..n as i32)
        .map(|id| DeviceInventory {
            id,
            model: "cpu".into(),
            numa_node: None,
            ip: None,
            health: DeviceHealth::Healthy,
            network: None,
        })
        .collect()
}

/// Observes devices: CPU slots if configured, else `npu-smi info`, else `/dev/davinci*`.
pub async fn collect(cpu_devices_flag: Option<u32>, dev_dir: &Path) -> Vec<DeviceInventory> {
    if let Some(n) = cpu_devices_flag {
        return cpu_devices(n);
    }
    if let Ok(o) = tokio::process::Command::new("npu-smi")
        .arg("info")
        .output()
        .await
        && o.status.success()
    {
        let found = parse_npu_smi(&String::from_utf8_lossy(&o.stdout));
        if !found.is_empty() {
            return found;
        }
    }
    let names: Vec<String> = std::fs::read_dir(dev_dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    davinci_ids(names.iter().map(String::as_str))
        .into_iter()
        .map(|id| DeviceInventory {
            id,
            model: "Ascend".into(),
            numa_node: None,
            ip: None,
            health: DeviceHealth::Unknown,
            network: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NPU_SMI: &str = "\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc3                 Version: 23.0.rc3                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.6        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | Critical      | 90.1        35                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
";

    #[test]
    fn npu_smi_rows_become_devices_with_health() {
        let d = parse_npu_smi(NPU_SMI);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0].id, 0);
        assert_eq!(d[0].model, "Ascend910B3");
        assert_eq!(d[0].health, DeviceHealth::Healthy);
        assert_eq!(d[1].health, DeviceHealth::Unhealthy);
    }

    #[test]
    fn unrelated_text_yields_no_devices() {
        assert!(parse_npu_smi("command not found").is_empty());
    }

    #[test]
    fn davinci_names_give_sorted_ids_and_skip_the_manager() {
        let ids = davinci_ids(["davinci3", "davinci_manager", "davinci0", "tty", "davinci1"]);
        assert_eq!(ids, [0, 1, 3]);
    }

    #[test]
    fn cpu_nodes_get_the_configured_number_of_slots() {
        let d = cpu_devices(3);
        assert_eq!(d.iter().map(|d| d.id).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(d.iter().all(|d| d.model == "cpu"));
    }
}
