//! The size of `/dev/shm`, from `stat -f` (no `unsafe` statvfs call needed).

use std::path::Path;

/// Parses `stat -f -c '%S %b'` output: fundamental block size and total blocks.
pub fn parse_stat_f(text: &str) -> Option<u64> {
    let mut it = text.split_whitespace();
    let bsize: u64 = it.next()?.parse().ok()?;
    let blocks: u64 = it.next()?.parse().ok()?;
    bsize.checked_mul(blocks)
}

/// The size of the filesystem at `path`, or None when it cannot be read.
pub async fn size_of(path: &Path) -> Option<u64> {
    let o = tokio::process::Command::new("stat")
        .args(["-f", "-c", "%S %b"])
        .arg(path)
        .output()
        .await
        .ok()?;
    if !o.status.success() {
        return None;
    }
    parse_stat_f(&String::from_utf8_lossy(&o.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_times_blocks() {
        assert_eq!(parse_stat_f("4096 16384\n"), Some(64 << 20));
        assert_eq!(parse_stat_f("garbage"), None);
    }

    #[tokio::test]
    async fn the_real_dev_shm_has_a_size_and_a_missing_path_has_none() {
        assert!(size_of(Path::new("/dev/shm")).await.is_some_and(|s| s > 0));
        assert_eq!(size_of(Path::new("/nonexistent/x")).await, None);
    }
}
