//! Giving freed memory back to the system.

/// Hands memory freed by a large change (a snapshot, a purge of the Raft
/// log, many cache entries dropped at once) back to the system: glibc
/// otherwise keeps freed small allocations in its heaps, and RSS would
/// stay at its peak after a large delete or deregistration.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// glibc's `mallinfo2()`, or `None` where that cannot be asked (another
/// allocator, or a glibc older than 2.33: the function is looked up at run
/// time, so the binary still starts there).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn mallinfo2() -> Option<libc::mallinfo2> {
    type MallInfo2 = unsafe extern "C" fn() -> libc::mallinfo2;
    static MALLINFO2: std::sync::OnceLock<Option<MallInfo2>> = std::sync::OnceLock::new();
    let function = MALLINFO2.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name only looks it up.
        let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallinfo2".as_ptr()) };
        // SAFETY: glibc's mallinfo2 has exactly this signature.
        (!symbol.is_null())
            .then(|| unsafe { std::mem::transmute::<*mut libc::c_void, MallInfo2>(symbol) })
    });
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    function.map(|f| unsafe { f() })
}

/// Bytes the allocator holds free (glibc's `mallinfo2().fordblks`), or
/// `None` where that cannot be asked.
pub fn free_heap_bytes() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    return mallinfo2().map(|info| info.fordblks as u64);
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    return None;
}

/// Bytes allocated and in use (`mallinfo2().uordblks + hblkhd`: the heap's
/// and the separately mapped large blocks'), or `None` where that cannot
/// be asked.
pub fn allocated_heap_bytes() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    return mallinfo2().map(|info| (info.uordblks + info.hblkhd) as u64);
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    return None;
}

/// The process's resident memory in bytes (`/proc/self/statm`).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).unwrap_or(4096))
}

/// Hands free memory back when the allocator holds more than `threshold`
/// bytes of it; returns whether it did. Called now and then by the binary,
/// so memory a burst of work (thousands of finished blocking queries, a
/// deregistered proxy) left free does not stay counted against the agent.
pub fn release_if_more_free_than(threshold: u64) -> bool {
    match free_heap_bytes() {
        Some(free) if free > threshold => {
            release_free_memory();
            true
        }
        _ => false,
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    fn rss_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    #[test]
    fn free_heap_is_handed_back_once_over_the_threshold() {
        // 96 MiB of small allocations with a live one after them, so the
        // freed ones sit below the top of the heap, which glibc never
        // trims by itself.
        let chunks: Vec<Box<[u8; 480]>> = (0..200_000).map(|_| Box::new([1u8; 480])).collect();
        let sentinel = Box::new([2u8; 480]);
        drop(chunks);
        let free = free_heap_bytes().unwrap();
        assert!(free > 64 << 20, "{free} bytes free");
        assert!(!release_if_more_free_than(u64::MAX));
        let before = rss_bytes();
        assert!(release_if_more_free_than(32 << 20));
        let after = rss_bytes();
        assert!(
            before.saturating_sub(after) > 48 << 20,
            "RSS {before} -> {after}"
        );
        assert_eq!(sentinel[0], 2);
    }
}
