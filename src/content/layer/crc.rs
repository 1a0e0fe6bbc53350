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
            p = Times::new(row[b]).times(p);
        }
    }
    p
}

/// Multiplication by one fixed polynomial `a`, four bits of the other factor at a time:
/// `by[n]` is a · n(x) for every nibble n, and each step multiplies what it has by x^4,
/// folding the four bits that leave back in through [`fold4`] (8 steps, not 32).
#[derive(Debug, Clone)]
struct Times {
    by: [u32; 16],
}

impl Times {
    fn new(a: u32) -> Times {
        // Nibble n's bit 3 (its first bit, reflected) is x^0: a; bit 2 is x^1: a · x; …
        let mut basis = [a; 4];
        for i in 1..4 {
            let b = basis[i - 1];
            basis[i] = (b >> 1) ^ (POLY & 0u32.wrapping_sub(b & 1));
        }
        // Each entry from one with a bit fewer: n's lowest bit is x^(3 - log2 of it).
        let mut by = [0u32; 16];
        for n in 1..16usize {
            let low = n & n.wrapping_neg();
            by[n] = by[n ^ low] ^ basis[3 - low.trailing_zeros() as usize];
        }
        Times { by }
    }

    /// a(x) · b(x) modulo the polynomial.
    fn times(&self, b: u32) -> u32 {
        let fold = fold4();
        let mut p = 0u32;
        // b's last nibble (its highest powers) first: Horner's rule over x^4.
        for k in 0..8 {
            let nibble = (b >> (4 * k)) & 0xF;
            p = (p >> 4) ^ fold[(p & 0xF) as usize] ^ self.by[nibble as usize];
        }
        p
    }
}

/// What the four bits a multiplication by x^4 shifts out of the register come back as.
fn fold4() -> &'static [u32; 16] {
    static TABLE: std::sync::OnceLock<[u32; 16]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u32; 16];
        for (n, entry) in t.iter_mut().enumerate() {
            let mut r = n as u32;
            for _ in 0..4 {
                r = (r >> 1) ^ (POLY & 0u32.wrapping_sub(r & 1));
            }
            *entry = r;
        }
        t
    })
}

/// Appends runs of zeros to CRCs, remembering the operator of the last length (a file's
/// runs have one or two lengths) ready to multiply by.
#[derive(Debug, Clone, Default)]
pub(super) struct Zeros {
    last: Option<(u64, Times)>,
}

impl Zeros {
    /// The CRC-32 of data whose CRC-32 is `crc` followed by `n` zero bytes.
    pub(super) fn append(&mut self, crc: u32, n: u64) -> u32 {
        let times = match &self.last {
            Some((len, times)) if *len == n => times,
            _ => &self.last.insert((n, Times::new(zeros_operator_fast(n)))).1,
        };
        times.times(crc ^ !0) ^ !0
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
    fn multiplying_by_nibbles_is_multiplying() {
        let mut x = 0x1234_5678u32;
        for _ in 0..200 {
            x = x.rotate_left(7) ^ x.wrapping_mul(0x9E37_79B9) ^ 0x55;
            let y = x.rotate_left(13).wrapping_add(0xDEAD_BEEF);
            assert_eq!(Times::new(x).times(y), multiply(x, y), "{x:#x} {y:#x}");
        }
        assert_eq!(Times::new(1 << 31).times(0xABCD_EF01), 0xABCD_EF01);
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
