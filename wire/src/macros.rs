//! The boilerplate every fixed-size header view shares.

/// Declares a zero-copy view `$name<T: AsRef<[u8]>>` over a header of
/// `$len` bytes, with `new_unchecked`, `new_checked` (which proves the
/// length, after which no accessor can panic), `into_inner` and `as_bytes`.
macro_rules! header_view {
    ($(#[$meta:meta])* $name:ident, $len:expr, $label:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the header in bytes.
            pub const LEN: usize = $len;
            /// Name used in error messages.
            pub const NAME: &'static str = $label;

            /// Wraps `buffer` without checking its length: accessors panic if
            /// it is shorter than [`Self::LEN`]. Prefer [`Self::new_checked`].
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps `buffer` after checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                $crate::error::check_len($label, buffer.as_ref(), $len)?;
                Ok(Self { buffer })
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The header's own bytes.
            pub fn as_bytes(&self) -> &[u8] {
                &self.buffer.as_ref()[..$len]
            }

            #[inline]
            #[allow(dead_code)]
            fn b(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            #[inline]
            #[allow(dead_code)]
            fn bm(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}
