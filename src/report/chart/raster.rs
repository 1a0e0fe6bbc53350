//! Chart SVGs rendered to PNG, for papers: pure Rust (usvg parses, tiny-skia paints) with
//! the system's fonts.

/// Renders chart SVGs to PNG (pure Rust: usvg parses, tiny-skia paints), with the
/// system's fonts. Without any font installed, PNGs have no text; the SVGs are unaffected.
pub struct Rasterizer {
    options: resvg::usvg::Options<'static>,
}

impl std::fmt::Debug for Rasterizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rasterizer")
            .field("fonts", &self.options.fontdb.len())
            .finish()
    }
}

/// Families tried, in order, for the charts' text.
const RASTER_FAMILIES: [&str; 6] = [
    "DejaVu Sans",
    "Liberation Sans",
    "Noto Sans",
    "Arial",
    "Helvetica",
    "FreeSans",
];

impl Rasterizer {
    /// Loads the system fonts (once; reuse the rasterizer for many charts).
    pub fn new() -> Rasterizer {
        let mut options = resvg::usvg::Options::default();
        let db = options.fontdb_mut();
        db.load_system_fonts();
        let family = RASTER_FAMILIES
            .iter()
            .find(|name| {
                db.faces()
                    .any(|f| f.families.iter().any(|(n, _)| n.as_str() == **name))
            })
            .map(|s| (*s).to_owned())
            .or_else(|| {
                db.faces()
                    .find_map(|f| f.families.first().map(|(n, _)| n.clone()))
            });
        if let Some(family) = family {
            // Generic families resolve to a font that exists here, never to nothing.
            db.set_sans_serif_family(family.clone());
            db.set_serif_family(family.clone());
            options.font_family = family;
        }
        Rasterizer { options }
    }

    /// Whether any font was found (text renders).
    pub fn has_fonts(&self) -> bool {
        !self.options.fontdb.is_empty()
    }

    /// The PNG of `svg`, `scale` times its size.
    pub fn png(&self, svg: &str, scale: f32) -> anyhow::Result<Vec<u8>> {
        use resvg::tiny_skia::{Pixmap, Transform};
        let tree = resvg::usvg::Tree::from_str(svg, &self.options)
            .map_err(|e| anyhow::anyhow!("invalid chart SVG: {e}"))?;
        let size = tree.size().to_int_size().scale_by(scale).ok_or_else(|| {
            anyhow::anyhow!(
                "chart of {}×{} cannot be scaled",
                tree.size().width(),
                tree.size().height()
            )
        })?;
        let mut pixmap = Pixmap::new(size.width(), size.height())
            .ok_or_else(|| anyhow::anyhow!("chart of {size:?} is too large to rasterize"))?;
        pixmap.fill(resvg::tiny_skia::Color::WHITE);
        resvg::render(
            &tree,
            Transform::from_scale(scale, scale),
            &mut pixmap.as_mut(),
        );
        pixmap
            .encode_png()
            .map_err(|e| anyhow::anyhow!("cannot encode PNG: {e}"))
    }
}

impl Default for Rasterizer {
    fn default() -> Self {
        Rasterizer::new()
    }
}
