//! Generated layers decoded by independent decoders (flate2, ruzstd) and read as tar.

use std::io::Read;

use super::*;

fn key(n: u64) -> [u64; 4] {
    [
        0x1234_5678_9abc_def0 ^ n,
        0x0fed_cba9_8765_4321 ^ (n << 7),
        0x1111_2222_3333_4444 ^ (n << 13),
        0x5555_6666_7777_8888,
    ]
}

fn whole(key: [u64; 4], form: LayerForm, size: u64) -> Vec<u8> {
    let mut frames = Frames::new(key, form, size);
    let mut out = vec![0u8; size as usize];
    frames.fill(0, &mut out);
    out
}

fn decode(form: LayerForm, blob: &[u8]) -> Vec<u8> {
    match form.compression {
        Compression::None => blob.to_vec(),
        Compression::Gzip => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(blob)
                .read_to_end(&mut out)
                .expect("gzip decodes");
            out
        }
        Compression::Zstd => {
            let mut out = Vec::with_capacity(blob.len() * 200 + 4096);
            ruzstd::decoding::FrameDecoder::new()
                .decode_all_to_vec(blob, &mut out)
                .expect("zstd decodes");
            out
        }
    }
}

/// A tar entry as a reader of ustar sees it.
#[derive(Debug)]
struct Entry {
    name: String,
    kind: u8,
    size: u64,
}

fn octal(field: &[u8]) -> u64 {
    let text = std::str::from_utf8(field).unwrap();
    u64::from_str_radix(text.trim_end_matches(['\0', ' ']), 8).unwrap()
}

/// Reads a tar as Go's archive/tar does: headers with valid checksums up to two zero blocks;
/// returns the entries and where the end marker ends.
fn read_tar(tar: &[u8]) -> (Vec<Entry>, usize) {
    let mut at = 0;
    let mut entries = Vec::new();
    loop {
        let block = &tar[at..at + 512];
        if block.iter().all(|b| *b == 0) {
            assert!(
                tar[at + 512..at + 1024].iter().all(|b| *b == 0),
                "two zero blocks"
            );
            return (entries, at + 1024);
        }
        let mut copy = block.to_vec();
        copy[148..156].fill(b' ');
        let sum: u64 = copy.iter().map(|b| u64::from(*b)).sum();
        assert_eq!(octal(&block[148..155]), sum, "checksum of header at {at}");
        assert_eq!(&block[257..263], b"ustar\0");
        let name_end = block[..100].iter().position(|b| *b == 0).unwrap_or(100);
        let name = String::from_utf8(block[..name_end].to_vec()).unwrap();
        let size = octal(&block[124..136]);
        entries.push(Entry {
            name,
            kind: block[156],
            size,
        });
        at += 512 + size.div_ceil(512) as usize * 512;
    }
}

fn forms() -> Vec<LayerForm> {
    [Compression::Gzip, Compression::Zstd, Compression::None]
        .into_iter()
        .flat_map(|c| [0.35, 0.1, 1.0].map(|r| LayerForm::new(c, r).unwrap()))
        .collect()
}

#[test]
fn every_size_decodes_to_a_tar_of_a_file_tree_exactly_that_long() {
    let sizes = [
        13, 32, 33, 100, 700, 1024, 1500, 2048, 2049, 3000, 4095, 10_000, 65_535, 65_536, 65_537,
        131_071, 131_072, 200_003, 1_000_000,
    ];
    for form in forms() {
        for (i, size) in sizes.into_iter().enumerate() {
            if size < form.min_size() {
                continue;
            }
            let blob = whole(key(i as u64), form, size);
            assert_eq!(blob.len() as u64, size);
            let tar = decode(form, &blob);
            let (entries, end) = read_tar(&tar);
            if size < 8192 {
                // Small layers: an empty tar, or a tree as soon as one fits.
                if let Some(top) = entries.first() {
                    assert_eq!(top.kind, b'5');
                }
                continue;
            }
            assert!(
                entries.len() >= 2,
                "{form:?} {size}: a directory and a file at least: {entries:?}"
            );
            assert_eq!(entries[0].kind, b'5');
            assert!(entries[0].name.starts_with("creb-"));
            assert!(entries.iter().any(|e| e.kind == b'0'), "{form:?} {size}");
            for e in &entries {
                assert!(!e.name.contains(".."), "{}", e.name);
                assert!(e.name.starts_with(&entries[0].name), "{}", e.name);
            }
            // After the end marker: less than what a frame's estimate keeps back.
            let trailing = tar.len() - end;
            assert!(
                trailing < 4096 || form.compression == Compression::None && trailing < 512,
                "{form:?} {size}: {trailing} bytes after the end marker"
            );
        }
    }
}

#[test]
fn layers_unpack_to_their_ratio() {
    for form in forms() {
        for size in [3_000_000u64, 8_000_000] {
            let blob = whole(key(size), form, size);
            let tar = decode(form, &blob);
            let want = match form.compression {
                Compression::None => size as f64,
                _ => size as f64 / form.ratio(),
            };
            let got = tar.len() as f64;
            assert!(
                (got / want - 1.0).abs() <= 0.10,
                "{form:?} {size}: {got} bytes of tar, {want} wanted"
            );
        }
    }
}

#[test]
fn any_range_equals_the_whole() {
    for form in forms() {
        let size = 700_001;
        let blob = whole(key(3), form, size);
        let mut frames = Frames::new(key(3), form, size);
        for (start, len) in [
            (0u64, 10usize),
            (65_530, 20),
            (400_000, 70_000),
            (size - 5, 5),
            (3, 200_000),
        ] {
            let mut part = vec![0u8; len];
            frames.fill(start, &mut part);
            assert_eq!(
                &part[..],
                &blob[start as usize..start as usize + len],
                "{form:?} at {start}"
            );
        }
    }
}

#[test]
fn the_diff_digest_is_the_tars_and_the_blob_digest_the_blobs() {
    for form in forms() {
        let size = 300_000;
        let blob = whole(key(9), form, size);
        let tar = decode(form, &blob);
        let (b, d) = digests_while(key(9), form, size, |_| true).unwrap();
        assert_eq!(b, <[u8; 32]>::from(Sha256::digest(&blob)));
        assert_eq!(d, <[u8; 32]>::from(Sha256::digest(&tar)));
    }
}

#[test]
fn distinct_keys_give_distinct_trees_and_bytes() {
    let form = LayerForm::default();
    let a = whole(key(1), form, 100_000);
    let b = whole(key(2), form, 100_000);
    assert_ne!(a, b);
    let (ea, _) = read_tar(&decode(form, &a));
    let (eb, _) = read_tar(&decode(form, &b));
    assert_ne!(ea[0].name, eb[0].name);
}

#[test]
fn file_sizes_are_mostly_small_with_a_few_large_ones() {
    let form = LayerForm::new(Compression::None, 0.35).unwrap();
    let size = 24 << 20;
    let tar = decode(form, &whole(key(5), form, size));
    let (entries, _) = read_tar(&tar);
    let mut sizes: Vec<u64> = entries
        .iter()
        .filter(|e| e.kind == b'0')
        .map(|e| e.size)
        .collect();
    sizes.sort_unstable();
    let q = |p: f64| sizes[((sizes.len() - 1) as f64 * p) as usize];
    assert!(sizes.len() > 300, "{} files", sizes.len());
    assert!((1000..4000).contains(&q(0.5)), "median {}", q(0.5));
    assert!((10_000..60_000).contains(&q(0.9)), "p90 {}", q(0.9));
    let dirs = entries.iter().filter(|e| e.kind == b'5').count();
    assert!(
        dirs > sizes.len() / 20 && dirs < sizes.len() / 4,
        "{dirs} directories"
    );
}

#[test]
fn the_smallest_layer_is_an_empty_tar_unique_to_its_key() {
    for c in [Compression::Gzip, Compression::Zstd, Compression::None] {
        let form = LayerForm::new(c, 0.35).unwrap();
        let min = form.min_size();
        let blob = whole(key(1), form, min);
        let tar = decode(form, &blob);
        assert!(tar.len() >= 1024, "{c:?}: the end marker");
        assert!(
            tar[..1024].iter().all(|b| *b == 0),
            "{c:?}: the end marker alone"
        );
        assert_ne!(blob, whole(key(2), form, min), "{c:?}: unique to its key");
    }
    // The empty gzip layer is as small as docker's (32 bytes).
    assert_eq!(LayerForm::default().min_size(), 32);
}

/// Pins the layers' bytes (the walk, the pool of random words, the framing): if this
/// changes, hosts of different versions disagree on every layer's digest and a dataset's
/// digest cache no longer matches. Change it deliberately, with the cache's scheme.
#[test]
fn golden_layer_digests() {
    let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let mut got = Vec::new();
    for compression in [Compression::Gzip, Compression::Zstd, Compression::None] {
        let form = LayerForm::new(compression, 0.35).unwrap();
        let (blob, diff) = digests_while(key(42), form, 300_000, |_| true).unwrap();
        got.push(format!("{compression} {} {}", hex(blob), hex(diff)));
    }
    assert_eq!(got, GOLDEN_LAYERS);
}

const GOLDEN_LAYERS: [&str; 3] = [
    "gzip cbedac9cbff4336dbe719b36d197739c1d537f4b425cef96518a5cbc873b431d \
     d724b038d2d241f22e31a59cfb65a91d4d8f68a9e67760a9b6bc0910e77fd5ab",
    "zstd d5d69e7e2998afb96e310db473fe257fc8b13dd9af1a4d74325bbcafe913c382 \
     4bc0a493c89192d75ccc36f45e4d2067bb63586c0d2232936ac957be5be87e5c",
    "none 4333127b48a64f054f2f9169c3f5a7262e0b82e060c9d850f5d6f4ea44660be3 \
     4333127b48a64f054f2f9169c3f5a7262e0b82e060c9d850f5d6f4ea44660be3",
];

#[test]
fn known_frame_crcs_make_the_same_bytes_and_a_wrong_one_is_never_the_layer() {
    let (k, form, size) = (key(0xC0C), LayerForm::default(), 1_200_000);
    let layer = known_layer(k, form, size);
    known::forget([layer]);
    // A pass over the frames in order learns their CRCs: each one its member's trailer.
    let truth = whole(k, form, size);
    let crcs = known::get(&layer).expect("a pass in order learns the CRCs");
    assert_eq!(crcs.len() as u64, frame_count(size));
    for (i, crc) in crcs.iter().enumerate() {
        let end = frame_range(size, i as u64).end as usize;
        assert_eq!(truth[end - 8..end - 4], crc.to_le_bytes(), "frame {i}");
    }
    // Made again from them: the same bytes, which decode as before.
    assert_eq!(whole(k, form, size), truth);
    // A wrong one makes a member no decoder accepts and no check passes: never the layer.
    let mut wrong = crcs.to_vec();
    wrong[3] ^= 1;
    known::remember(layer, wrong.into());
    let made = whole(k, form, size);
    let end = frame_range(size, 3).end as usize;
    let first = made.iter().zip(&truth).position(|(a, b)| a != b);
    assert_eq!(first, Some(end - 8));
    assert!(flate2::read::MultiGzDecoder::new(&made[..])
        .read_to_end(&mut Vec::new())
        .is_err());
    known::forget([layer]);
}
