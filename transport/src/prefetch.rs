//! Hints to the CPU that some memory will be read soon. A simulator knows
//! which QP its next event is for; asking for that QP's lines while the
//! current event runs hides most of the wait for a QP gone cold (a fabric
//! of thousands of QPs keeps few of them in any cache). The fabric asks
//! the same way for its own cold state (event slots, queued packets).

/// Asks for `size_of_val(r)` bytes' worth of cache lines from `r`'s
/// address: every line of `*r` when it starts on a line (the fabric's
/// `Lined`), all but the last at worst; not what `*r` points to. Does
/// nothing on targets without a prefetch instruction. Never faults,
/// never changes what any read returns.
#[inline]
pub fn lines_of<T: ?Sized>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let start = (r as *const T).cast::<i8>();
        let mut off = 0;
        while off < core::mem::size_of_val(r) {
            // SAFETY: SSE is part of x86_64's baseline; a prefetch never
            // faults and reads nothing the program sees (the address is
            // inside `*r` anyway).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(off)) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
