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
