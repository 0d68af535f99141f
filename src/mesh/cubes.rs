//! Marching cubes without a case table: one cube's surface polygons found by walking its faces.
//!
//! A cube's corners are numbered by their offset bits, corner `c` at `(c & 1, c >> 1 & 1,
//! c >> 2 & 1)`; its 12 edges by axis, edge `4·a + k` joining the `k`-th corner with bit `a`
//! clear ([`EDGES`]) to that corner plus `1 << a`. A corner is *inside* when its value is below
//! zero (a signed distance: behind the surface), and the surface crosses every edge whose two
//! corners differ.
//!
//! # How the polygons are found
//! On each face, walked counter-clockwise as seen from outside the cube, the crossing edges
//! alternate between *entries* (outside → inside) and *exits*; the surface's trace on the face is
//! a segment from an entry to an exit. A face with four crossings (inside corners on one
//! diagonal) is ambiguous; the asymptotic decider settles it from the face's four values alone:
//! the bilinear interpolant's saddle value `(a·c − b·d)/(a + c − b − d)` (a, c one diagonal)
//! is inside when below zero, and then the two inside corners are joined across the face
//! (each entry pairs with the *other* run's exit), otherwise cut off one by one. Every crossing
//! edge ends one segment (on the face that walks it inside → outside) and starts one (on the
//! other face, which walks it the other way), so the segments chain into closed loops. A loop
//! becomes triangles by [`fan_apex`] and [`triangulate`]: a fan from a corner of the loop that
//! draws no diagonal between two edges of one face, or a fan round the loop's own centre when
//! no corner can.
//!
//! # Invariants
//! - Two cubes sharing a face trace the same segments on it, in opposite directions (the
//!   decider's inputs are the face's values and its sign is computed identically from either
//!   side), and no two cubes draw the same diagonal, so a surface assembled from cubes that
//!   share edge vertices is closed wherever the cubes are, and consistently oriented: every
//!   edge between them is walked once each way.
//! - Triangles wind counter-clockwise seen from the outside (the side of non-negative values):
//!   their right-hand normals point from negative values to positive ones.

/// The corners each edge joins, lower corner first: edge `4·a + k` runs along axis `a`.
pub const EDGES: [(u8, u8); 12] = edges();

/// The faces' corners, counter-clockwise seen from outside the cube (right-handed about the
/// outward normal): face `2·a + s` is the face of axis `a` at offset `s`.
const FACES: [[u8; 4]; 6] = faces();

const fn edges() -> [(u8, u8); 12] {
    let mut out = [(0u8, 0u8); 12];
    let mut a = 0;
    while a < 3 {
        let mut k = 0;
        let mut c = 0u8;
        while c < 8 {
            if c & (1 << a) == 0 {
                out[4 * a + k] = (c, c | (1 << a));
                k += 1;
            }
            c += 1;
        }
        a += 1;
    }
    out
}

const fn faces() -> [[u8; 4]; 6] {
    let mut out = [[0u8; 4]; 6];
    let mut a = 0;
    while a < 3 {
        // (u, v, a) is a cyclic permutation of (x, y, z): e_u × e_v = e_a, so (0,0) → (1,0) →
        // (1,1) → (0,1) in (u, v) turns counter-clockwise about +e_a.
        let (u, v) = ((a + 1) % 3, (a + 2) % 3);
        let square = [(0u8, 0u8), (1, 0), (1, 1), (0, 1)];
        let mut s = 0;
        while s < 2 {
            let mut k = 0;
            while k < 4 {
                // The face at offset 0 looks along −e_a: the same square walked backwards.
                let (du, dv) = if s == 1 {
                    square[k]
                } else {
                    square[(4 - k) % 4]
                };
                out[2 * a + s][k] = (du << u) | (dv << v) | ((s as u8) << a);
                k += 1;
            }
            s += 1;
        }
        a += 1;
    }
    out
}

/// The edges of each face (of [`FACES`]), in its walking order.
const FACE_EDGES: [[u8; 4]; 6] = face_edges();

const fn face_edges() -> [[u8; 4]; 6] {
    let mut out = [[0u8; 4]; 6];
    let mut f = 0;
    while f < 6 {
        let mut k = 0;
        while k < 4 {
            out[f][k] = edge_of(FACES[f][k], FACES[f][(k + 1) % 4]);
            k += 1;
        }
        f += 1;
    }
    out
}

/// Whether edges `a` and `b` lie on one face of the cube.
fn share_a_face(a: u8, b: u8) -> bool {
    FACE_EDGES.iter().any(|f| f.contains(&a) && f.contains(&b))
}

/// The edge joining corners `p` and `q` (which differ in one bit).
const fn edge_of(p: u8, q: u8) -> u8 {
    let bit = p ^ q;
    debug_assert!(bit.is_power_of_two() && bit < 8, "corners share no edge");
    let a = bit.trailing_zeros() as u8;
    let base = p & !bit;
    // The base corners of axis a, in increasing order, are the corners with bit a clear: the
    // rank of `base` among them is its value with bit a squeezed out.
    let low = base & (bit - 1);
    let high = (base >> (a + 1)) << a;
    4 * a + (low | high)
}

/// Calls `polygon` with the crossing edges of each loop of the surface through one cube whose
/// corner values are `v`, in winding order (see the module doc for the numbering, the rule and
/// the winding); [`fan_apex`] says how to cut one into triangles. A cube whose corners are all
/// inside or all outside has none; every crossing edge is in exactly one loop.
pub fn polygonise(v: &[f32; 8], mut polygon: impl FnMut(&[u8])) {
    let inside = v.map(|x| x < 0.0);
    let mask = inside
        .iter()
        .enumerate()
        .fold(0u8, |m, (c, &i)| m | (u8::from(i) << c));
    if mask == 0 || mask == 0xff {
        return;
    }
    // next[e]: the crossing edge the surface's loop reaches after edge e.
    let mut next = [u8::MAX; 12];
    for q in &FACES {
        let mut entries = [0u8; 2];
        let mut exits = [0u8; 2];
        let (mut ne, mut nx) = (0, 0);
        for k in 0..4 {
            let (p, n) = (q[k], q[(k + 1) % 4]);
            match (inside[p as usize], inside[n as usize]) {
                (false, true) => {
                    entries[ne] = edge_of(p, n);
                    ne += 1;
                }
                (true, false) => {
                    exits[nx] = edge_of(p, n);
                    nx += 1;
                }
                _ => {}
            }
        }
        match ne {
            0 => {}
            1 => next[entries[0] as usize] = exits[0],
            _ => {
                // Walking from entries[0], the first exit met is the one ending its own run.
                // The corners alternate, so entries and exits do too: entry, exit, entry, exit
                // starting at whichever transition comes first.
                let first = (0..4)
                    .find(|&k| {
                        let (p, n) = (q[k], q[(k + 1) % 4]);
                        inside[p as usize] != inside[n as usize]
                    })
                    .expect("a face with crossings has a first one");
                let starts_with_entry = !inside[q[first] as usize];
                // Runs: (entries[0], its exit), (entries[1], its exit), where "its exit" is the
                // next transition after the entry going round.
                let (own0, own1) = if starts_with_entry {
                    (exits[0], exits[1])
                } else {
                    (exits[1], exits[0])
                };
                let [a, b, c, d] = q.map(|c| v[c as usize]);
                // Saddle value (a·c − b·d)/(a + c − b − d): the denominator's sign is a's
                // (a, c share a sign, b, d the other), so its sign is known without dividing,
                // and a·c − b·d is the same product difference from either cube.
                let num = a * c - b * d;
                let joined = if a < 0.0 { num > 0.0 } else { num < 0.0 };
                if joined {
                    next[entries[0] as usize] = own1;
                    next[entries[1] as usize] = own0;
                } else {
                    next[entries[0] as usize] = own0;
                    next[entries[1] as usize] = own1;
                }
            }
        }
    }
    let mut seen = [false; 12];
    let mut ring = [0u8; 12];
    for start in 0..12 {
        if next[start] == u8::MAX || seen[start] {
            continue;
        }
        let mut n = 0;
        let mut e = start;
        while !seen[e] {
            seen[e] = true;
            ring[n] = e as u8;
            n += 1;
            e = next[e] as usize;
            debug_assert!(e < 12, "a crossing edge without a successor");
        }
        debug_assert_eq!(e, start, "the loop closes where it began");
        polygon(&ring[..n]);
    }
}

/// The position in `ring` (a loop of [`polygonise`]) from which its triangle fan draws no
/// diagonal between two edges of one face, if there is one; without one, cut the loop around
/// a vertex of its own inside the cube.
///
/// Why: a diagonal between two edges of one face could be drawn by the cube across that face
/// too, and the two cubes' triangles would then meet along it, the surface pinched there.
/// Diagonals between edges with no face in common belong to this cube alone, and the loop's
/// sides are face segments, shared once each way with the neighbours: the surface stays a
/// closed, consistently wound manifold.
pub fn fan_apex(ring: &[u8]) -> Option<usize> {
    let n = ring.len();
    (0..n).find(|&a| (2..n - 1).all(|j| !share_a_face(ring[a], ring[(a + j) % n])))
}

/// Calls `triangle` with each triangle of the loop `ring` as positions in it, fanned from
/// `apex`; with `None`, as `[n, k, k + 1]` around an extra vertex `n = ring.len()` (the loop's
/// centre).
pub fn triangulate(ring: &[u8], apex: Option<usize>, mut triangle: impl FnMut([usize; 3])) {
    let n = ring.len();
    match apex {
        Some(a) => (1..n - 1).for_each(|k| triangle([a, (a + k) % n, (a + k + 1) % n])),
        None => (0..n).for_each(|k| triangle([n, k, (k + 1) % n])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_and_faces_are_the_cube_s() {
        for (e, &(p, q)) in EDGES.iter().enumerate() {
            assert_eq!(
                (p ^ q).trailing_zeros() as usize,
                e / 4,
                "edge {e} runs along its axis"
            );
            assert!(p < q);
            assert_eq!(edge_of(p, q) as usize, e);
            assert_eq!(edge_of(q, p) as usize, e);
        }
        for (f, q) in FACES.iter().enumerate() {
            let (a, s) = (f / 2, f % 2);
            let corner = |c: u8| [c & 1, c >> 1 & 1, c >> 2 & 1].map(f64::from);
            // Counter-clockwise about the outward normal: (q1 − q0) × (q2 − q1) points out.
            let (p0, p1, p2) = (corner(q[0]), corner(q[1]), corner(q[2]));
            let d1 = [p1[0] - p0[0], p1[1] - p0[1], p1[2] - p0[2]];
            let d2 = [p2[0] - p1[0], p2[1] - p1[1], p2[2] - p1[2]];
            let n = [
                d1[1] * d2[2] - d1[2] * d2[1],
                d1[2] * d2[0] - d1[0] * d2[2],
                d1[0] * d2[1] - d1[1] * d2[0],
            ];
            let mut out = [0.0; 3];
            out[a] = if s == 1 { 1.0 } else { -1.0 };
            assert_eq!(n, out, "face {f}");
            for &c in q {
                assert_eq!((c >> a) & 1, s as u8, "face {f} holds corner {c}");
            }
        }
    }

    #[test]
    fn one_inside_corner_gives_one_triangle_facing_out() {
        let mut v = [1.0f32; 8];
        v[0] = -1.0;
        let mut loops = Vec::new();
        polygonise(&v, |r| loops.push(r.to_vec()));
        assert_eq!(loops.len(), 1);
        // Edges 0 (x), 4 (y), 8 (z) from corner 0, wound about (1, 1, 1).
        let t: [u8; 3] = loops[0][..].try_into().unwrap();
        let rot = [t, [t[1], t[2], t[0]], [t[2], t[0], t[1]]];
        assert!(rot.contains(&[0, 4, 8]), "{t:?}");
    }

    #[test]
    fn every_case_s_loops_close() {
        // Every sign pattern, with generic magnitudes: each crossing edge is used, and every
        // loop's edges are walked once each way within the cube's triangles plus its boundary.
        for mask in 1u32..255 {
            let v: [f32; 8] = std::array::from_fn(|c| {
                let m = 0.3 + 0.1 * c as f32;
                if mask >> c & 1 == 1 {
                    -m
                } else {
                    m
                }
            });
            let mut used = [false; 12];
            polygonise(&v, |r| {
                for &e in r {
                    assert!(!used[e as usize], "mask {mask:08b}: edge {e} in two loops");
                    used[e as usize] = true;
                }
                let apex = fan_apex(r);
                let mut tris = Vec::new();
                triangulate(r, apex, |t| tris.push(t));
                assert_eq!(tris.len(), r.len() - if apex.is_some() { 2 } else { 0 });
                // Every side of the loop is a side of exactly one triangle, walked its way.
                for k in 0..r.len() {
                    let side = (k, (k + 1) % r.len());
                    let walked = tris
                        .iter()
                        .filter(|t| (0..3).any(|i| (t[i], t[(i + 1) % 3]) == side))
                        .count();
                    assert_eq!(walked, 1, "mask {mask:08b}, loop {r:?}");
                }
            });
            for (e, &(p, q)) in EDGES.iter().enumerate() {
                let crossing = (mask >> p & 1) != (mask >> q & 1);
                assert_eq!(used[e], crossing, "mask {mask:08b} edge {e}");
            }
        }
    }
}
