//! The process's allocator: mimalloc instead of glibc's malloc. Its
//! per-thread free lists take frees from other threads without the arena
//! locks glibc's threads contend on: a wake of 10,000 blocking queries
//! spent ~8% of the agent in malloc and free, with futex waits, and the
//! wake's p99 fell by about a quarter with mimalloc (BENCHMARKS.md).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_arena_eager_commit` in mimalloc 3's `mi_option_e` (the
/// bindings lack it; `libmimalloc-sys` is pinned to the version whose
/// header says so).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// mimalloc commits each arena it reserves up front where the kernel
/// overcommits, which put 11 MB more in an idle agent's RSS than glibc
/// did; committed on demand it is the same as glibc's. The option must be
/// set before the first allocation reserves the first arena, so this runs
/// from `.init_array`, before the Rust runtime allocates anything.
extern "C" fn commit_arenas_on_demand() {
    // SAFETY: sets one of mimalloc's options, a plain store the allocator
    // reads when it reserves an arena; no memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) }
}

#[used]
#[unsafe(link_section = ".init_array")]
static COMMIT_ARENAS_ON_DEMAND: extern "C" fn() = commit_arenas_on_demand;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arenas_are_committed_on_demand_from_the_start() {
        // SAFETY: reads one of mimalloc's options.
        let eager = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ARENA_EAGER_COMMIT) };
        assert_eq!(eager, 0, "the .init_array hook ran before main");
    }

    #[test]
    fn allocations_come_from_mimalloc() {
        let block = vec![7u8; 4096];
        // SAFETY: asks mimalloc whether the pointer is one of its blocks.
        let ours = unsafe { libmimalloc_sys::mi_is_in_heap_region(block.as_ptr().cast()) };
        assert!(ours);
    }
}
