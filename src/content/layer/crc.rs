//! CRC-32 arithmetic for runs of zeros: appending `n` zero bytes to data multiplies its CRC
//! register by x^(8n) modulo the polynomial, a few dozen shifts instead of hashing the bytes
//! (the method of zlib's `crc32_combine`, over the reflected CRC-32 polynomial gzip uses).

/// The reflected CRC-32 polynomial.
const POLY: u32 = 0xEDB8_8320;

/// a(x) · b(x) modulo the polynomial (bit 31 is x^0), without branches: each of a's bits
/// masks a multiple of b in.
fn multiply(a: u32, mut b: u32) -> u32 {
    let mut p = 0u32;
    for i in (0..32).rev() {
        p ^= b & 0u32.wrapping_sub((a >> i) & 1);
        b = (b >> 1) ^ (POLY & 0u32.wrapping_sub(b & 1));
    }
    p
}

/// x^(2^k) modulo the polynomial, for k = 0..32.
fn powers() -> &'static [u32; 32] {
    static TABLE: std::sync::OnceLock<[u32; 32]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u32; 32];
        let mut p = 1u32 << 30;
        for entry in &mut t {
            *entry = p;
            p = multiply(p, p);
        }
        t
    })
}

/// x^(8n) modulo the polynomial: the operator of appending `n` zero bytes.
fn zeros_operator(mut n: u64) -> u32 {
    let table = powers();
    let mut p = 1u32 << 31;
    let mut k = 3usize;
    while n != 0 {
        if n & 1 != 0 {
            p = multiply(table[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// x^(8 · b · 256^k) for every byte `b` of a length and its place `k` (lengths below 2^40):
/// any length's operator in five products.
fn byte_powers() -> &'static [[u32; 256]; 5] {
    static TABLE: std::sync::OnceLock<Box<[[u32; 256]; 5]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([[0u32; 256]; 5]);
        for (k, row) in t.iter_mut().enumerate() {
            let step = zeros_operator(1u64 << (8 * k));
            row[0] = 1u32 << 31;
            for b in 1..256 {
                row[b] = multiply(row[b - 1], step);
            }
        }
        t
    })
}

/// [`zeros_operator`] from the table: one product per non-zero byte of `n`.
fn zeros_operator_fast(n: u64) -> u32 {
    let table = byte_powers();
    let mut p = 1u32 << 31;
    for (k, row) in table.iter().enumerate() {
        let b = ((n >> (8 * k)) & 0xFF) as usize;
        if b != 0 {
            p = multiply(row[b], p);
        }
    }
    p
}

/// Appends runs of zeros to CRCs, remembering the operator of the last length (a file's
/// runs have one or two lengths).
#[derive(Debug, Clone, Default)]
pub(super) struct Zeros {
    last: Option<(u64, u32)>,
}

impl Zeros {
    /// The CRC-32 of data whose CRC-32 is `crc` followed by `n` zero bytes.
    pub(super) fn append(&mut self, crc: u32, n: u64) -> u32 {
        let op = match self.last {
            Some((len, op)) if len == n => op,
            _ => {
                let op = zeros_operator_fast(n);
                self.last = Some((n, op));
                op
            }
        };
        multiply(op, crc ^ !0) ^ !0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_every_lengths_operator() {
        for n in [
            0u64,
            1,
            255,
            256,
            257,
            65_535,
            65_536,
            1 << 33,
            (1 << 39) + 12_345,
        ] {
            assert_eq!(zeros_operator_fast(n), zeros_operator(n), "{n}");
        }
    }

    #[test]
    fn appending_zeros_is_hashing_them() {
        let mut zeros = Zeros::default();
        for prefix in [&b""[..], b"a", b"creb-rs layer", &[0xFF; 77]] {
            for n in [0u64, 1, 2, 7, 8, 258, 4095, 4096, 7_607, 65_535, 1 << 20] {
                let mut h = crc32fast::Hasher::new();
                h.update(prefix);
                let before = h.clone().finalize();
                h.update(&vec![0u8; n as usize]);
                assert_eq!(
                    zeros.append(before, n),
                    h.finalize(),
                    "{prefix:?} + {n} zeros"
                );
            }
        }
    }
}
