//! The unpacker against generated layers of every compression and hand-made bad ones: a
//! wrong diff_id, a body that is no tar or not its compression, paths and links that
//! would leave the directory, a decompression bomb.

use std::io::Write;

use super::*;
use crate::content::layer::{Compression, LayerForm};
use crate::content::ContentSpec;
use crate::metrics::ErrorKind;

fn generated(compression: Compression, size: u64) -> (Vec<u8>, String) {
    let form = LayerForm::new(compression, 0.5).unwrap();
    let spec = ContentSpec::layer(7, b"unpack-test", size, form);
    let mut body = vec![0u8; size as usize];
    spec.fill(0, &mut body);
    (body, spec.sums().diff_digest().to_string())
}

fn layer(compression: LayerCompression, body: &[u8], diff_id: Option<&str>) -> Layer<'static> {
    Layer {
        compression,
        size: body.len() as u64,
        diff_id: diff_id.map(|d| &*Box::leak(d.to_owned().into_boxed_str())),
    }
}

/// A tar entry to make: path, kind, link target, body.
type Made<'a> = (&'a str, tar::EntryType, Option<&'a str>, &'a [u8]);

/// A tar of `entries` (path, kind, link target, body), written by the tar crate's builder
/// without its path checks, so that a test can make what a hostile registry would serve.
fn tar_of(entries: &[Made<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, kind, link, body) in entries {
        let mut header = tar::Header::new_old();
        {
            let name = &mut header.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
        }
        if let Some(link) = link {
            let field = &mut header.as_old_mut().linkname;
            field[..link.len()].copy_from_slice(link.as_bytes());
        }
        header.set_entry_type(*kind);
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(body);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn generated_layers_unpack_to_their_diff_id_in_every_compression() {
    for (compression, kind) in [
        (Compression::Gzip, LayerCompression::Gzip),
        (Compression::Zstd, LayerCompression::Zstd),
        (Compression::None, LayerCompression::None),
    ] {
        let (body, diff_id) = generated(compression, 3 << 20);
        let got = unpack_bytes(&body, layer(kind, &body, Some(&diff_id)), None)
            .unwrap_or_else(|e| panic!("{compression:?}: {e}"));
        assert_eq!(got.diff_id, diff_id, "{compression:?}");
        assert_eq!(got.compressed, body.len() as u64);
        assert!(got.files > 1 && got.entries > got.files, "{got:?}");
        if kind != LayerCompression::None {
            // Ratio 0.5: the tar is about twice the layer.
            let ratio = got.compressed as f64 / got.uncompressed as f64;
            assert!((0.45..0.55).contains(&ratio), "{compression:?} {ratio}");
        }
    }
}

#[test]
fn a_wrong_diff_id_is_its_own_error() {
    let (body, _) = generated(Compression::Gzip, 1 << 20);
    let wrong = format!("sha256:{}", "0".repeat(64));
    let e = unpack_bytes(
        &body,
        layer(LayerCompression::Gzip, &body, Some(&wrong)),
        None,
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DiffIdMismatch, "{e}");
}

#[test]
fn a_body_that_is_not_its_compression_or_not_a_tar_is_layer_invalid() {
    let tar = tar_of(&[("a.txt", tar::EntryType::Regular, None, b"hello")]);
    // A plain tar declared gzip.
    let e = unpack_bytes(&tar, layer(LayerCompression::Gzip, &tar, None), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LayerInvalid, "{e}");
    assert!(e.to_string().contains("not gzip"), "{e}");
    // Gzip of something that is no tar.
    let junk = gzip(&[0x55u8; 4096]);
    let e = unpack_bytes(&junk, layer(LayerCompression::Gzip, &junk, None), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LayerInvalid, "{e}");
    assert!(e.to_string().contains("not a tar"), "{e}");
    // zstd declared, gzip sent.
    let gz = gzip(&tar);
    let e = unpack_bytes(&gz, layer(LayerCompression::Zstd, &gz, None), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LayerInvalid, "{e}");
    // A gzip cut short.
    let cut = &gz[..gz.len() / 2];
    let e = unpack_bytes(cut, layer(LayerCompression::Gzip, cut, None), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LayerInvalid, "{e}");
}

#[test]
fn paths_and_links_that_leave_the_directory_are_refused_and_nothing_is_written_outside() {
    use tar::EntryType::{Link, Regular, Symlink};
    let cases: [&[Made<'_>]; 5] = [
        &[("/etc/evil", Regular, None, b"x")],
        &[("a/../../evil", Regular, None, b"x")],
        &[("up", Symlink, Some("../../evil"), b"")],
        &[("hard", Link, Some("../evil"), b"")],
        // A link inside the layer, then a file written through it.
        &[
            ("d", Symlink, Some("/tmp"), b""),
            ("d/evil", Regular, None, b"x"),
        ],
    ];
    for entries in cases {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let tar = tar_of(entries);
        let mut target = Target::new(&root).unwrap();
        let e = unpack_bytes(
            &tar,
            layer(LayerCompression::None, &tar, None),
            Some(&mut target),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnsafePath, "{entries:?}: {e}");
        // Nothing beside the root, and no `evil` anywhere.
        let beside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(beside.len(), 1, "{entries:?}");
        assert!(!std::path::Path::new("/tmp/evil").exists());
        // Refused when only read, too.
        let e = unpack_bytes(&tar, layer(LayerCompression::None, &tar, None), None);
        if entries.len() == 1 {
            assert_eq!(e.unwrap_err().kind(), ErrorKind::UnsafePath, "{entries:?}");
        }
    }
}

#[test]
fn entries_are_applied_in_order_with_links_and_whiteouts() {
    use tar::EntryType::{Directory, Regular, Symlink};
    let dir = tempfile::tempdir().unwrap();
    let mut target = Target::new(dir.path()).unwrap();
    let first = tar_of(&[
        ("etc/", Directory, None, b""),
        ("etc/hosts", Regular, None, b"127.0.0.1 localhost\n"),
        ("etc/old", Regular, None, b"gone soon"),
        ("var/cache/", Directory, None, b""),
        ("var/cache/a", Regular, None, b"a"),
        ("bin", Symlink, Some("usr/bin"), b""),
        ("abs", Symlink, Some("/etc/hosts"), b""),
    ]);
    let second = tar_of(&[
        ("etc/.wh.old", Regular, None, b""),
        ("var/cache/.wh..wh..opq", Regular, None, b""),
        ("var/cache/b", Regular, None, b"b"),
        ("etc/hosts", Regular, None, b"changed\n"),
    ]);
    for tar in [&first, &second] {
        let got = unpack_bytes(
            tar,
            layer(LayerCompression::None, tar, None),
            Some(&mut target),
        )
        .unwrap();
        assert!(got.entries >= 4, "{got:?}");
    }
    let root = dir.path();
    assert_eq!(
        std::fs::read_to_string(root.join("etc/hosts")).unwrap(),
        "changed\n"
    );
    assert!(!root.join("etc/old").exists());
    assert!(!root.join("var/cache/a").exists());
    assert_eq!(std::fs::read(root.join("var/cache/b")).unwrap(), b"b");
    assert_eq!(
        std::fs::read_link(root.join("bin")).unwrap(),
        std::path::Path::new("usr/bin")
    );
    assert_eq!(
        std::fs::read_link(root.join("abs")).unwrap(),
        std::path::Path::new("/etc/hosts")
    );
}

#[test]
fn a_layer_that_grows_past_its_bound_is_stopped() {
    // 64 MiB of zeros in a tar, gzipped to about 64 KiB: a thousand times its size.
    let big = vec![0u8; 64 << 20];
    let tar = tar_of(&[("zeros", tar::EntryType::Regular, None, &big)]);
    let gz = gzip(&tar);
    let e = unpack_bytes(&gz, layer(LayerCompression::Gzip, &gz, None), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DecompressionBomb, "{e}");
    // Within a bound that allows it, the same layer unpacks.
    let loose = Limits {
        ratio: 10_000,
        floor: 1 << 20,
    };
    let got = unpack(
        &gz[..],
        layer(LayerCompression::Gzip, &gz, None),
        None,
        loose,
    )
    .unwrap();
    assert_eq!(got.uncompressed, tar.len() as u64);
}

#[test]
fn media_types_name_their_compression() {
    use crate::oci::manifest::{OCI_LAYER_GZIP, OCI_LAYER_ZSTD};
    assert_eq!(
        LayerCompression::of_media_type(OCI_LAYER_GZIP),
        Some(LayerCompression::Gzip)
    );
    assert_eq!(
        LayerCompression::of_media_type(OCI_LAYER_ZSTD),
        Some(LayerCompression::Zstd)
    );
    assert_eq!(
        LayerCompression::of_media_type("application/vnd.oci.image.layer.v1.tar"),
        Some(LayerCompression::None)
    );
    assert_eq!(
        LayerCompression::of_media_type("application/vnd.docker.image.rootfs.diff.tar.gzip"),
        Some(LayerCompression::Gzip)
    );
    assert_eq!(
        LayerCompression::of_media_type("application/vnd.oci.image.config.v1+json"),
        None
    );
}
