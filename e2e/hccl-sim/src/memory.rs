//! Simulated device memory. `aclrtMalloc` returns the address of a host allocation that only
//! this registry touches; every access goes through it, so a pointer that is not (or no
//! longer) a live allocation is caught, never dereferenced. A collective *pins* the buffers
//! it will read and write from the moment it is enqueued until it completes or is aborted;
//! freeing a pinned buffer is the device use-after-free the backend must never commit.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::violation;

/// One allocation. Freed entries stay, bytes and all, so that a second free or a late access
/// is recognised and the address is never handed out again (tests are small; the simulator
/// trades memory for certainty).
#[derive(Debug)]
struct Alloc {
    len: usize,
    data: Vec<u8>,
    freed: bool,
    /// Descriptions of the in-flight collectives using this allocation.
    pins: Vec<String>,
}

static MEMORY: Mutex<BTreeMap<usize, Alloc>> = Mutex::new(BTreeMap::new());

fn memory() -> std::sync::MutexGuard<'static, BTreeMap<usize, Alloc>> {
    MEMORY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why an access was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Not inside any allocation ever made.
    Unknown,
    /// Inside an allocation that was freed.
    Freed,
    /// Runs past the end of its allocation.
    OutOfBounds { len: usize },
}

/// Allocates `len` bytes (at least one, so every allocation has a distinct address).
pub fn malloc(len: usize) -> usize {
    let data = vec![0u8; len.max(1)];
    let addr = data.as_ptr() as usize;
    memory().insert(
        addr,
        Alloc {
            len,
            data,
            freed: false,
            pins: Vec::new(),
        },
    );
    addr
}

/// The allocation holding `[addr, addr + len)`: its base.
fn locate(mem: &BTreeMap<usize, Alloc>, addr: usize, len: usize) -> Result<usize, Fault> {
    let (base, alloc) = mem.range(..=addr).next_back().ok_or(Fault::Unknown)?;
    if addr >= base + alloc.len.max(1) {
        return Err(Fault::Unknown);
    }
    if alloc.freed {
        return Err(Fault::Freed);
    }
    if addr + len > base + alloc.len {
        return Err(Fault::OutOfBounds { len: alloc.len });
    }
    Ok(*base)
}

/// Checks that `[addr, addr + len)` is live device memory.
pub fn check(addr: usize, len: usize) -> Result<(), Fault> {
    locate(&memory(), addr, len).map(|_| ())
}

/// `aclrtFree`: false (and a violation) for a double free, an unknown pointer or a buffer an
/// in-flight collective still uses.
pub fn free(addr: usize) -> bool {
    let mut mem = memory();
    match mem.get_mut(&addr) {
        None => {
            violation::record(
                "invalid_free",
                &format!("aclrtFree({addr:#x}): not an address aclrtMalloc returned"),
            );
            false
        }
        Some(a) if a.freed => {
            violation::record(
                "double_free",
                &format!("aclrtFree({addr:#x}): already freed"),
            );
            false
        }
        Some(a) => {
            if !a.pins.is_empty() {
                violation::record(
                    "free_in_flight",
                    &format!(
                        "aclrtFree({addr:#x}, {} bytes) while in use by {}: the device would \
                         still write it (use after free)",
                        a.len,
                        a.pins.join(", ")
                    ),
                );
            }
            a.freed = true;
            true
        }
    }
}

/// Copies `src` into device memory at `addr`.
pub fn write(addr: usize, src: &[u8]) -> Result<(), Fault> {
    let mut mem = memory();
    let base = locate(&mem, addr, src.len())?;
    let alloc = mem.get_mut(&base).ok_or(Fault::Unknown)?;
    let off = addr - base;
    alloc.data[off..off + src.len()].copy_from_slice(src);
    Ok(())
}

/// Copies `len` bytes of device memory at `addr` out.
pub fn read(addr: usize, len: usize) -> Result<Vec<u8>, Fault> {
    let mem = memory();
    let base = locate(&mem, addr, len)?;
    let alloc = mem.get(&base).ok_or(Fault::Unknown)?;
    let off = addr - base;
    Ok(alloc.data[off..off + len].to_vec())
}

/// Marks the allocation holding `addr` as used by `what` (an in-flight collective).
pub fn pin(addr: usize, what: &str) {
    let mut mem = memory();
    if let Ok(base) = locate(&mem, addr, 0)
        && let Some(a) = mem.get_mut(&base)
    {
        a.pins.push(what.to_string());
    }
}

/// Removes one `what` pin from the allocation holding `addr` (freed or not).
pub fn unpin(addr: usize, what: &str) {
    let mut mem = memory();
    if let Some((_, a)) = mem.range_mut(..=addr).next_back()
        && let Some(i) = a.pins.iter().position(|p| p == what)
    {
        a.pins.remove(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_stay_inside_live_allocations() {
        let a = malloc(8);
        write(a + 4, &[1, 2, 3, 4]).unwrap();
        assert_eq!(read(a + 4, 4).unwrap(), [1, 2, 3, 4]);
        assert_eq!(write(a + 6, &[0; 4]), Err(Fault::OutOfBounds { len: 8 }));
        assert!(free(a));
        assert_eq!(read(a, 1), Err(Fault::Freed));
        assert!(!free(a), "a double free is refused");
    }

    #[test]
    fn a_pinned_buffer_can_still_be_freed_but_it_is_a_violation() {
        let a = malloc(4);
        pin(a, "HcclAllReduce#0");
        assert!(free(a));
        unpin(a, "HcclAllReduce#0");
    }
}
