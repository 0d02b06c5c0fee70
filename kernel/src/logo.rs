//! The kernelspec's logos (`logo-32x32.png`, `logo-64x64.png`), drawn when the kernelspec is
//! installed: a chip with four cores on a rounded square. A small PNG encoder (stored,
//! uncompressed deflate blocks) writes them; the images are a few kilobytes.

/// RGBA colours of the drawing.
const BACKGROUND: [u8; 4] = [15, 23, 42, 255];
const CHIP: [u8; 4] = [234, 88, 12, 255];
const CORE: [u8; 4] = [45, 212, 191, 255];

/// A shape of the drawing in unit coordinates: `(x0, y0, x1, y1, corner radius, colour)`.
type Shape = (f32, f32, f32, f32, f32, [u8; 4]);

/// The shapes, back to front.
fn shapes() -> Vec<Shape> {
    let mut shapes = vec![(0.0, 0.0, 1.0, 1.0, 0.18, BACKGROUND)];
    // Pins on the four sides of the chip.
    for c in [0.36, 0.5, 0.64] {
        let (a, b) = (c - 0.035, c + 0.035);
        shapes.push((a, 0.14, b, 0.3, 0.0, CHIP));
        shapes.push((a, 0.7, b, 0.86, 0.0, CHIP));
        shapes.push((0.14, a, 0.3, b, 0.0, CHIP));
        shapes.push((0.7, a, 0.86, b, 0.0, CHIP));
    }
    shapes.push((0.24, 0.24, 0.76, 0.76, 0.05, CHIP));
    for (x, y) in [(0.3, 0.3), (0.52, 0.3), (0.3, 0.52), (0.52, 0.52)] {
        shapes.push((x, y, x + 0.18, y + 0.18, 0.03, CORE));
    }
    shapes
}

/// Whether unit point `(x, y)` is inside a rounded rectangle.
fn inside(&(x0, y0, x1, y1, r, _): &Shape, x: f32, y: f32) -> bool {
    if x < x0 || x > x1 || y < y0 || y > y1 {
        return false;
    }
    let cx = x.clamp(x0 + r, x1 - r);
    let cy = y.clamp(y0 + r, y1 - r);
    (x - cx).powi(2) + (y - cy).powi(2) <= r * r
}

/// The logo as `size` x `size` RGBA pixels, anti-aliased by 4x4 supersampling.
pub fn pixels(size: u32) -> Vec<u8> {
    const SAMPLES: u32 = 4;
    let shapes = shapes();
    let mut out = Vec::with_capacity((size * size * 4) as usize);
    for py in 0..size {
        for px in 0..size {
            let mut sum = [0u32; 4];
            for sy in 0..SAMPLES {
                for sx in 0..SAMPLES {
                    let x = (px as f32 + (sx as f32 + 0.5) / SAMPLES as f32) / size as f32;
                    let y = (py as f32 + (sy as f32 + 0.5) / SAMPLES as f32) / size as f32;
                    let colour = shapes
                        .iter()
                        .rev()
                        .find(|s| inside(s, x, y))
                        .map_or([0; 4], |s| s.5);
                    // Premultiplied, so transparent samples do not darken the edges.
                    let a = u32::from(colour[3]);
                    for (i, total) in sum.iter_mut().enumerate().take(3) {
                        *total += u32::from(colour[i]) * a / 255;
                    }
                    sum[3] += a;
                }
            }
            let n = SAMPLES * SAMPLES;
            let alpha = sum[3] / n;
            for total in &sum[..3] {
                let premultiplied = total / n;
                let straight = (premultiplied * 255).checked_div(alpha).unwrap_or(0);
                out.push(straight.min(255) as u8);
            }
            out.push(alpha as u8);
        }
    }
    out
}

/// The logo as a PNG file of `size` x `size` pixels.
pub fn png(size: u32) -> Vec<u8> {
    encode_png(size, size, &pixels(size))
}

/// Encodes RGBA pixels (`width * height * 4` bytes) as a PNG.
pub fn encode_png(width: u32, height: u32, rgba: &[u8]) -> Vec<u8> {
    let row = width as usize * 4;
    let mut raw = Vec::with_capacity((row + 1) * height as usize);
    for line in rgba.chunks(row) {
        raw.push(0); // filter: none
        raw.extend_from_slice(line);
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = Vec::new();
    header.extend_from_slice(&width.to_be_bytes());
    header.extend_from_slice(&height.to_be_bytes());
    header.extend_from_slice(&[8, 6, 0, 0, 0]); // 8 bits, RGBA, deflate, no filter, no interlace
    chunk(&mut png, b"IHDR", &header);
    chunk(&mut png, b"IDAT", &zlib_stored(&raw));
    chunk(&mut png, b"IEND", &[]);
    png
}

/// Appends one PNG chunk: length, type, data, CRC of type and data.
fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

/// A zlib stream of stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = if data.is_empty() {
        vec![&[]]
    } else {
        data.chunks(0xffff).collect()
    };
    for (i, block) in blocks.iter().enumerate() {
        out.push(u8::from(i + 1 == blocks.len())); // BFINAL, BTYPE = stored
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_match_known_values() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
    }

    #[test]
    fn logos_are_pngs_of_their_size() {
        for size in [32, 64] {
            let png = png(size);
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
            assert_eq!(&png[12..16], b"IHDR");
            assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), size);
            assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), size);
            assert!(png.ends_with(&[0xae, 0x42, 0x60, 0x82]));
            let px = pixels(size);
            // Transparent corners, opaque middle.
            assert_eq!(px[3], 0);
            let mid = ((size / 2 * size + size / 2) * 4) as usize;
            assert_eq!(px[mid + 3], 255);
        }
    }

    #[test]
    fn large_images_use_several_stored_blocks() {
        let data = vec![7u8; 0x1_0000 + 10];
        let z = zlib_stored(&data);
        assert_eq!(z.len(), 2 + 2 * 5 + data.len() + 4);
    }
}
