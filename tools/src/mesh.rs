//! Triangle meshes for the renderer: the built-in torus and Wavefront OBJ
//! and PLY files, normalised to fit the unit sphere, with per-vertex
//! normals and texture coordinates.

use std::path::Path;

/// One vertex: position, normal, texture coordinates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Vertex {
    /// Object-space position.
    pub position: [f32; 3],
    /// Unit normal.
    pub normal: [f32; 3],
    /// Texture coordinates.
    pub uv: [f32; 2],
}

/// An indexed triangle mesh.
#[derive(Debug, Clone, Default)]
pub struct Mesh {
    /// Vertices.
    pub vertices: Vec<Vertex>,
    /// Three indices per triangle.
    pub indices: Vec<u32>,
}

/// Why a mesh file did not load.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    /// Reading failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A line of a text file is not what a mesh has there.
    #[error("{path}:{line}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// Line, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The file as a whole is not a mesh we can draw (no triangles, a
    /// truncated binary body, a vertex that is not a finite point).
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The extension is neither .obj nor .ply.
    #[error("{0}: not an .obj or .ply file")]
    UnknownFormat(String),
}

impl Mesh {
    /// A torus of `rings` x `sides` quads (two triangles each), texture
    /// coordinates wrapping 8 times around and 2 times across.
    pub fn torus(rings: u32, sides: u32) -> Mesh {
        let (big, small) = (0.7f32, 0.28f32);
        let mut mesh = Mesh::default();
        for i in 0..=rings {
            let u = i as f32 / rings as f32;
            let theta = u * std::f32::consts::TAU;
            for j in 0..=sides {
                let v = j as f32 / sides as f32;
                let phi = v * std::f32::consts::TAU;
                let normal = [theta.cos() * phi.cos(), phi.sin(), theta.sin() * phi.cos()];
                let centre = [big * theta.cos(), 0.0, big * theta.sin()];
                mesh.vertices.push(Vertex {
                    position: std::array::from_fn(|c| centre[c] + small * normal[c]),
                    normal,
                    uv: [8.0 * u, 2.0 * v],
                });
            }
        }
        let at = |i: u32, j: u32| i * (sides + 1) + j;
        for i in 0..rings {
            for j in 0..sides {
                mesh.indices.extend([at(i, j), at(i, j + 1), at(i + 1, j)]);
                mesh.indices
                    .extend([at(i + 1, j), at(i, j + 1), at(i + 1, j + 1)]);
            }
        }
        mesh
    }

    /// Triangles.
    pub fn triangle_count(&self) -> usize {
        self.indices.len() / 3
    }

    /// Loads an OBJ or PLY file (by extension).
    pub fn load(path: &Path) -> Result<Mesh, MeshError> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| MeshError::Io {
            path: name.clone(),
            source,
        })?;
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        let (positions, indices) = match ext.as_deref() {
            Some("obj") => parse_obj(&name, &String::from_utf8_lossy(&bytes))?,
            Some("ply") => parse_ply(&name, &bytes)?,
            _ => return Err(MeshError::UnknownFormat(name)),
        };
        if indices.is_empty() {
            return Err(invalid(&name, "no triangles"));
        }
        // A NaN or infinite coordinate would spoil the whole mesh's
        // bounds and draw nothing: refused, naming the vertex.
        if let Some(k) = positions
            .iter()
            .position(|p| p.iter().any(|c| !c.is_finite()))
        {
            return Err(invalid(
                &name,
                format!("vertex {} is not a finite point: {:?}", k + 1, positions[k]),
            ));
        }
        Ok(Mesh::from_triangles(&positions, indices))
    }

    /// A mesh from positions and triangles: scaled to the unit sphere
    /// about its bounding-box centre, with area-weighted vertex normals and
    /// spherical texture coordinates.
    pub fn from_triangles(positions: &[[f32; 3]], indices: Vec<u32>) -> Mesh {
        let mut lo = [f32::MAX; 3];
        let mut hi = [f32::MIN; 3];
        for p in positions {
            for c in 0..3 {
                lo[c] = lo[c].min(p[c]);
                hi[c] = hi[c].max(p[c]);
            }
        }
        let centre: [f32; 3] = std::array::from_fn(|c| (lo[c] + hi[c]) / 2.0);
        let radius = positions
            .iter()
            .map(|p| {
                (0..3)
                    .map(|c| (p[c] - centre[c]).powi(2))
                    .sum::<f32>()
                    .sqrt()
            })
            .fold(0.0f32, f32::max)
            .max(f32::MIN_POSITIVE);
        let scaled: Vec<[f32; 3]> = positions
            .iter()
            .map(|p| std::array::from_fn(|c| (p[c] - centre[c]) / radius))
            .collect();
        let mut normals = vec![[0.0f32; 3]; scaled.len()];
        for t in indices.chunks_exact(3) {
            let [a, b, c] = [t[0], t[1], t[2]].map(|i| scaled[i as usize]);
            let e1: [f32; 3] = std::array::from_fn(|k| b[k] - a[k]);
            let e2: [f32; 3] = std::array::from_fn(|k| c[k] - a[k]);
            let n = [
                e1[1] * e2[2] - e1[2] * e2[1],
                e1[2] * e2[0] - e1[0] * e2[2],
                e1[0] * e2[1] - e1[1] * e2[0],
            ];
            for &i in t {
                for k in 0..3 {
                    normals[i as usize][k] += n[k];
                }
            }
        }
        let vertices = scaled
            .iter()
            .zip(normals)
            .map(|(p, n)| {
                let len = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2]).sqrt();
                let normal = if len > 0.0 {
                    n.map(|c| c / len)
                } else {
                    [0.0, 1.0, 0.0]
                };
                let u = 0.5 + p[2].atan2(p[0]) / std::f32::consts::TAU;
                let v = 0.5 - p[1].clamp(-1.0, 1.0).asin() / std::f32::consts::PI;
                Vertex {
                    position: *p,
                    normal,
                    uv: [4.0 * u, 2.0 * v],
                }
            })
            .collect();
        Mesh { vertices, indices }
    }
}

fn invalid(path: &str, message: impl Into<String>) -> MeshError {
    MeshError::Invalid {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn parse_error(path: &str, line: usize, message: impl Into<String>) -> MeshError {
    MeshError::Parse {
        path: path.to_owned(),
        line,
        message: message.into(),
    }
}

/// Positions (`v`) and faces (`f`, polygons fanned into triangles, with
/// negative indices counting back) of an OBJ file.
fn parse_obj(path: &str, text: &str) -> Result<(Vec<[f32; 3]>, Vec<u32>), MeshError> {
    let mut positions = Vec::new();
    let mut indices = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("v") => {
                let p: Vec<f32> = words
                    .take(3)
                    .map(|w| w.parse::<f32>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| parse_error(path, n + 1, e.to_string()))?;
                if p.len() != 3 {
                    return Err(parse_error(path, n + 1, "a vertex needs x, y, z"));
                }
                positions.push([p[0], p[1], p[2]]);
            }
            Some("f") => {
                let face: Vec<u32> = words
                    .map(|w| {
                        let index: i64 =
                            w.split('/').next().unwrap_or("").parse().map_err(|_| {
                                parse_error(path, n + 1, format!("bad index {w:?}"))
                            })?;
                        let resolved = if index < 0 {
                            positions.len() as i64 + index
                        } else {
                            index - 1
                        };
                        if resolved < 0 || resolved >= positions.len() as i64 {
                            return Err(parse_error(
                                path,
                                n + 1,
                                format!("index {index} out of range"),
                            ));
                        }
                        Ok(resolved as u32)
                    })
                    .collect::<Result<_, _>>()?;
                for k in 1..face.len().saturating_sub(1) {
                    indices.extend([face[0], face[k], face[k + 1]]);
                }
            }
            _ => {}
        }
    }
    Ok((positions, indices))
}

/// A PLY scalar type's size and reader.
fn ply_scalar(ty: &str) -> Option<usize> {
    Some(match ty {
        "char" | "uchar" | "int8" | "uint8" => 1,
        "short" | "ushort" | "int16" | "uint16" => 2,
        "int" | "uint" | "float" | "int32" | "uint32" | "float32" => 4,
        "double" | "float64" => 8,
        _ => return None,
    })
}

fn ply_read(ty: &str, bytes: &[u8]) -> f64 {
    match ty {
        "char" | "int8" => f64::from(bytes[0] as i8),
        "uchar" | "uint8" => f64::from(bytes[0]),
        "short" | "int16" => f64::from(i16::from_le_bytes([bytes[0], bytes[1]])),
        "ushort" | "uint16" => f64::from(u16::from_le_bytes([bytes[0], bytes[1]])),
        "int" | "int32" => f64::from(i32::from_le_bytes(
            bytes[..4].try_into().unwrap_or_default(),
        )),
        "uint" | "uint32" => f64::from(u32::from_le_bytes(
            bytes[..4].try_into().unwrap_or_default(),
        )),
        "float" | "float32" => f64::from(f32::from_le_bytes(
            bytes[..4].try_into().unwrap_or_default(),
        )),
        _ => f64::from_le_bytes(bytes[..8].try_into().unwrap_or_default()),
    }
}

#[derive(Debug)]
enum PlyProperty {
    Scalar(String, String),
    List(String, String, String),
}

/// Positions and faces of an ASCII or binary little-endian PLY file.
fn parse_ply(path: &str, bytes: &[u8]) -> Result<(Vec<[f32; 3]>, Vec<u32>), MeshError> {
    let end = bytes
        .windows(11)
        .position(|w| w == b"end_header\n")
        .ok_or_else(|| invalid(path, "no end_header"))?;
    let header = String::from_utf8_lossy(&bytes[..end]);
    let body = &bytes[end + 11..];
    let mut format = "";
    let mut elements: Vec<(String, usize, Vec<PlyProperty>)> = Vec::new();
    for (n, line) in header.lines().enumerate() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["format", f, ..] => {
                format = if *f == "ascii" {
                    "ascii"
                } else if *f == "binary_little_endian" {
                    "le"
                } else {
                    "?"
                }
            }
            ["element", name, count] => elements.push((
                (*name).to_owned(),
                count
                    .parse()
                    .map_err(|_| parse_error(path, n + 1, "bad element count"))?,
                Vec::new(),
            )),
            ["property", "list", count_ty, item_ty, name] => elements
                .last_mut()
                .ok_or_else(|| parse_error(path, n + 1, "property before element"))?
                .2
                .push(PlyProperty::List(
                    (*name).into(),
                    (*count_ty).into(),
                    (*item_ty).into(),
                )),
            ["property", ty, name] => elements
                .last_mut()
                .ok_or_else(|| parse_error(path, n + 1, "property before element"))?
                .2
                .push(PlyProperty::Scalar((*name).into(), (*ty).into())),
            _ => {}
        }
    }
    if format == "?" || format.is_empty() {
        return Err(parse_error(
            path,
            0,
            "only ascii and binary_little_endian PLY",
        ));
    }
    let mut positions = Vec::new();
    let mut indices = Vec::new();
    let mut words = std::str::from_utf8(body)
        .unwrap_or("")
        .split_ascii_whitespace();
    let mut at = 0usize;
    let mut next = |ty: &str| -> Result<f64, MeshError> {
        if format == "ascii" {
            words
                .next()
                .and_then(|w| w.parse::<f64>().ok())
                .ok_or_else(|| invalid(path, "truncated ASCII body"))
        } else {
            let size = ply_scalar(ty).ok_or_else(|| invalid(path, format!("type {ty}")))?;
            let b = body
                .get(at..at + size)
                .ok_or_else(|| invalid(path, "truncated binary body"))?;
            at += size;
            Ok(ply_read(ty, b))
        }
    };
    for (name, count, properties) in &elements {
        for _ in 0..*count {
            let mut p = [0.0f32; 3];
            for property in properties {
                match property {
                    PlyProperty::Scalar(pname, ty) => {
                        let v = next(ty)? as f32;
                        match pname.as_str() {
                            "x" => p[0] = v,
                            "y" => p[1] = v,
                            "z" => p[2] = v,
                            _ => {}
                        }
                    }
                    PlyProperty::List(pname, count_ty, item_ty) => {
                        let n = next(count_ty)? as usize;
                        let mut face = Vec::with_capacity(n);
                        for _ in 0..n {
                            face.push(next(item_ty)? as u32);
                        }
                        if name == "face" && (pname == "vertex_indices" || pname == "vertex_index")
                        {
                            for k in 1..face.len().saturating_sub(1) {
                                indices.extend([face[0], face[k], face[k + 1]]);
                            }
                        }
                    }
                }
            }
            if name == "vertex" {
                positions.push(p);
            }
        }
    }
    if indices.iter().any(|&i| i as usize >= positions.len()) {
        return Err(invalid(path, "a face index is out of range"));
    }
    Ok((positions, indices))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_torus_has_the_triangles_it_says() {
        let m = Mesh::torus(30, 10);
        assert_eq!(m.triangle_count(), 600);
        assert_eq!(m.vertices.len(), 31 * 11);
        for v in &m.vertices {
            let len: f32 = v.normal.iter().map(|c| c * c).sum::<f32>().sqrt();
            assert!((len - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn obj_and_ply_give_the_same_mesh() {
        let obj = "# a square\nv 0 0 0\nv 2 0 0\nv 2 2 0\nv 0 2 0\nf 1 2 3 4\n";
        let (p, i) = parse_obj("t.obj", obj).unwrap();
        assert_eq!(i, [0, 1, 2, 0, 2, 3]);
        let ply = b"ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n0 0 0\n2 0 0\n2 2 0\n0 2 0\n4 0 1 2 3\n";
        let (q, j) = parse_ply("t.ply", ply).unwrap();
        assert_eq!((p, i), (q, j));
        let mut binary = b"ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n".to_vec();
        for v in [[0.0f32, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]] {
            for c in v {
                binary.extend(c.to_le_bytes());
            }
        }
        binary.push(3);
        for k in [0i32, 1, 2] {
            binary.extend(k.to_le_bytes());
        }
        let (p, i) = parse_ply("b.ply", &binary).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(i, [0, 1, 2]);
        assert!(parse_obj("bad.obj", "v 0 0 0\nf 1 2 3\n").is_err());
    }

    #[test]
    fn a_mesh_that_cannot_be_drawn_is_refused_naming_file_and_reason() {
        let dir = std::env::temp_dir().join(format!("agx-mesh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let load = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            Mesh::load(&path).map(|_| ()).unwrap_err().to_string()
        };
        // A NaN vertex would make the bounds, and so every vertex, NaN.
        let message = load("nan.obj", "v 0 0 0\nv nan 1 0\nv 0 1 0\nf 1 2 3\n");
        assert!(
            message.ends_with("nan.obj: vertex 2 is not a finite point: [NaN, 1.0, 0.0]"),
            "{message}"
        );
        let message = load("inf.obj", "v 0 0 0\nv 1 inf 0\nv 0 1 0\nf 1 2 3\n");
        assert!(
            message.contains("vertex 2 is not a finite point"),
            "{message}"
        );
        // File-level errors have no line, rather than line 0.
        let message = load("empty.obj", "# nothing\n");
        assert!(message.ends_with("empty.obj: no triangles"), "{message}");
        let message = load("short.ply", "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\nend_header\n0 0\n");
        assert!(
            message.ends_with("short.ply: truncated ASCII body"),
            "{message}"
        );
        // A line-level error keeps its line.
        let message = load("bad.obj", "v 0 0 0\nv 1 x 0\n");
        assert!(message.contains("bad.obj:2: "), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
