//! Comparing two RGBA8 images of the same size: how many pixels differ,
//! by how much, and the peak signal-to-noise ratio, as the llvmpipe
//! benchmark and image test report them.

/// How two RGBA8 images differ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageDiff {
    /// Pixels compared.
    pub pixels: usize,
    /// Pixels with any channel different.
    pub differing_pixels: usize,
    /// Pixels with a channel more than [`ImageDiff::LARGE_ERROR`] levels
    /// off: coverage, depth or shading disagreements rather than the
    /// rounding of two correct float pipelines.
    pub large_error_pixels: usize,
    /// The largest difference of one channel, in levels of 255.
    pub max_channel_error: u8,
    /// The mean difference over all four channels of all pixels, in
    /// levels (alpha included: where it always agrees, it dilutes the mean
    /// and raises the PSNR by a quarter of the colour channels' error).
    pub mean_channel_error: f64,
    /// Peak signal-to-noise ratio over all channels in dB (infinite for
    /// identical images).
    pub psnr_db: f64,
}

impl ImageDiff {
    /// A channel error above this many levels counts as large (two
    /// renderers that interpolate and shade in fp32 and round to 8 bits
    /// differ by 1).
    pub const LARGE_ERROR: u8 = 2;

    /// Compares `a` and `b`, RGBA8 pixels of equal length.
    ///
    /// # Panics
    ///
    /// If the lengths differ or are not whole pixels.
    pub fn of(a: &[u8], b: &[u8]) -> ImageDiff {
        assert_eq!(a.len(), b.len(), "images of different sizes");
        assert_eq!(a.len() % 4, 0, "not whole RGBA8 pixels");
        let mut diff = ImageDiff {
            pixels: a.len() / 4,
            differing_pixels: 0,
            large_error_pixels: 0,
            max_channel_error: 0,
            mean_channel_error: 0.0,
            psnr_db: f64::INFINITY,
        };
        let (mut sum, mut sum_squares) = (0u64, 0u64);
        for (pa, pb) in a.chunks_exact(4).zip(b.chunks_exact(4)) {
            let worst = pa
                .iter()
                .zip(pb)
                .map(|(x, y)| x.abs_diff(*y))
                .fold(0, |m, e| {
                    let e64 = u64::from(e);
                    sum += e64;
                    sum_squares += e64 * e64;
                    m.max(e)
                });
            diff.differing_pixels += usize::from(worst > 0);
            diff.large_error_pixels += usize::from(worst > Self::LARGE_ERROR);
            diff.max_channel_error = diff.max_channel_error.max(worst);
        }
        if !a.is_empty() {
            let samples = a.len() as f64;
            diff.mean_channel_error = sum as f64 / samples;
            let mse = sum_squares as f64 / samples;
            if mse > 0.0 {
                diff.psnr_db = 10.0 * (255.0 * 255.0 / mse).log10();
            }
        }
        diff
    }
}

impl std::fmt::Display for ImageDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} pixels differ ({:.2}%), {} by more than {} levels; max {}, mean {:.3}, PSNR {:.1} dB",
            self.differing_pixels,
            self.pixels,
            100.0 * self.differing_pixels as f64 / self.pixels.max(1) as f64,
            self.large_error_pixels,
            Self::LARGE_ERROR,
            self.max_channel_error,
            self.mean_channel_error,
            self.psnr_db
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_images_differ_nowhere() {
        let a = [1, 2, 3, 255, 9, 9, 9, 255];
        let d = ImageDiff::of(&a, &a);
        assert_eq!((d.differing_pixels, d.max_channel_error), (0, 0));
        assert_eq!(d.psnr_db, f64::INFINITY);
    }

    #[test]
    fn errors_are_counted_per_pixel_and_channel() {
        let a = [0, 0, 0, 255, 10, 10, 10, 255];
        let b = [0, 0, 0, 255, 30, 10, 11, 255];
        assert_eq!(
            ImageDiff::of(&a, &[0, 0, 2, 255, 10, 10, 10, 255]).large_error_pixels,
            0
        );
        let d = ImageDiff::of(&a, &b);
        assert_eq!(d.differing_pixels, 1);
        assert_eq!(d.large_error_pixels, 1);
        assert_eq!(d.max_channel_error, 20);
        assert_eq!(d.mean_channel_error, 21.0 / 8.0);
        // MSE = (400 + 1) / 8.
        let expected = 10.0 * (255.0f64 * 255.0 / (401.0 / 8.0)).log10();
        assert!((d.psnr_db - expected).abs() < 1e-9);
    }
}
