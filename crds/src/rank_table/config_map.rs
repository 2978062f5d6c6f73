//! Where a group's rank table lives: the ConfigMap the operator publishes per group, its
//! keys, and where the table is mounted in every worker container.

/// ConfigMap key (and mounted file name) of the rank table.
pub const KEY_RANK_TABLE: &str = "rank_table.json";
/// ConfigMap key holding the epoch of the rank table.
pub const KEY_EPOCH: &str = "epoch";
/// ConfigMap key holding the member (Pod) names of the epoch, one per line (the
/// operator's durable record of the planned set).
pub const KEY_MEMBERS: &str = "members";
/// Where the rank table ConfigMap is mounted in every worker container.
pub const MOUNT_DIR: &str = "/etc/hcomm/rank-table";
/// The value of `RANK_TABLE_FILE` in the workers: [`KEY_RANK_TABLE`] under [`MOUNT_DIR`].
pub const RANK_TABLE_FILE: &str = "/etc/hcomm/rank-table/rank_table.json";

/// The most bytes a ConfigMap's data may hold: the API server refuses a larger one
/// (`ConfigMap ... must have at most 1048576 bytes`), whatever etcd's request limit
/// (1.5 MiB by default) would take. The rank table, the epoch and the member list share it.
pub const CONFIG_MAP_MAX_BYTES: usize = 1024 * 1024;

/// The name of the ConfigMap holding group `group`'s rank table.
pub fn config_map_name(group: &str) -> String {
    format!("{group}-rank-table")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rank_table_file_is_the_key_under_the_mount_dir() {
        assert_eq!(RANK_TABLE_FILE, format!("{MOUNT_DIR}/{KEY_RANK_TABLE}"));
        assert_eq!(config_map_name("decode"), "decode-rank-table");
    }
}
