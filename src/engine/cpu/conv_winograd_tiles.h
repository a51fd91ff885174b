/*
 * conv_winograd_tiles.h - the tiles' transforms of conv_winograd.c for
 * channel counts that are multiples of the vector width, included there once
 * per width: VT / VTI the float and int vector types (GCC vector
 * extensions) of VW lanes, NAME(x) the width's names. One tile's whole
 * alpha x alpha patch of VW channels is held in vector registers, the
 * matrices unrolled at compile time (m is a constant at every call site of
 * these always-inline functions, so the zero entries vanish and +-1 adds no
 * multiply). The 16-lane copy is called only from functions compiled for
 * AVX-512 (conv_winograd.c), so its vectors are zmm registers there.
 * Not a header to include anywhere else: it has no guard, by design.
 */

/* F(4x4)'s three one-sided transforms with their common terms shared (12,
 * 10 and 9 operations against 22, 18 and 18 for the rows one by one); each
 * output still goes through at most 3 roundings, within the bound's
 * alpha - 1 = 5 per side. y = BT x (6 from 6): */
AI void NAME(bt4)(VT *y, int ys, const VT *x, int xs) {
    const VT x0 = x[0], x1 = x[xs], x2 = x[2 * xs], x3 = x[3 * xs], x4 = x[4 * xs], x5 = x[5 * xs];
    const VT a = x4 - 4.0f * x2, b = x3 - 4.0f * x1, c = x4 - x2, e = x3 - x1;
    y[0] = 4.0f * x0 + (x4 - 5.0f * x2);
    y[ys] = a + b;
    y[2 * ys] = a - b;
    y[3 * ys] = c + 2.0f * e;
    y[4 * ys] = c - 2.0f * e;
    y[5 * ys] = 4.0f * x1 + (x5 - 5.0f * x3);
}
/* y = AT x (4 from 6) */
AI void NAME(at4)(VT *y, int ys, const VT *x, int xs) {
    const VT x1 = x[xs], x2 = x[2 * xs], x3 = x[3 * xs], x4 = x[4 * xs];
    const VT s1 = x1 + x2, d1 = x1 - x2, s2 = x3 + x4, d2 = x3 - x4;
    y[0] = x[0] + s1 + s2;
    y[ys] = d1 + 2.0f * d2;
    y[2 * ys] = s1 + 4.0f * s2;
    y[3 * ys] = (d1 + 8.0f * d2) + x[5 * xs];
}
/* y = A x (6 from 4), A = AT's transpose */
AI void NAME(a4)(VT *y, int ys, const VT *x, int xs) {
    const VT x0 = x[0], x1 = x[xs], x2 = x[2 * xs], x3 = x[3 * xs];
    const VT p = x0 + x2, q = x1 + x3, r = x0 + 4.0f * x2, s = 2.0f * x1 + 8.0f * x3;
    y[0] = x0;
    y[ys] = p + q;
    y[2 * ys] = p - q;
    y[3 * ys] = r + s;
    y[4 * ys] = r - s;
    y[5 * ys] = x3;
}

/* F(6x6)'s, by the same even / odd pairing. y = BT x (8 from 8): */
AI void NAME(bt6)(VT *y, int ys, const VT *x, int xs) {
    const VT x0 = x[0], x1 = x[xs], x2 = x[2 * xs], x3 = x[3 * xs], x4 = x[4 * xs], x5 = x[5 * xs],
             x6 = x[6 * xs], x7 = x[7 * xs];
    const VT p1 = (x2 + x6) - 4.25f * x4, q1 = (x1 + x5) - 4.25f * x3;
    const VT p2 = (x6 + 0.25f * x2) - 1.25f * x4, q2 = (0.5f * x1 - 2.5f * x3) + 2.0f * x5;
    const VT p3 = x6 + 4.0f * (x2 - 1.25f * x4), q3 = (2.0f * x1 - 2.5f * x3) + 0.5f * x5;
    y[0] = (x0 - x6) + 5.25f * (x4 - x2);
    y[ys] = p1 + q1;
    y[2 * ys] = p1 - q1;
    y[3 * ys] = p2 + q2;
    y[4 * ys] = p2 - q2;
    y[5 * ys] = p3 + q3;
    y[6 * ys] = p3 - q3;
    y[7 * ys] = (x7 - x1) + 5.25f * (x3 - x5);
}
/* y = AT x (6 from 8) */
AI void NAME(at6)(VT *y, int ys, const VT *x, int xs) {
    const VT x1 = x[xs], x2 = x[2 * xs], x3 = x[3 * xs], x4 = x[4 * xs], x5 = x[5 * xs], x6 = x[6 * xs];
    const VT s1 = x1 + x2, d1 = x1 - x2, s2 = x3 + x4, d2 = x3 - x4, s3 = x5 + x6, d3 = x5 - x6;
    y[0] = ((x[0] + s1) + s2) + s3;
    y[ys] = (d1 + 2.0f * d2) + 0.5f * d3;
    y[2 * ys] = (s1 + 4.0f * s2) + 0.25f * s3;
    y[3 * ys] = (d1 + 8.0f * d2) + 0.125f * d3;
    y[4 * ys] = (s1 + 16.0f * s2) + 0.0625f * s3;
    y[5 * ys] = ((d1 + 32.0f * d2) + 0.03125f * d3) + x[7 * xs];
}
/* y = A x (8 from 6), A = AT's transpose */
AI void NAME(a6)(VT *y, int ys, const VT *x, int xs) {
    const VT x0 = x[0], x1 = x[xs], x2 = x[2 * xs], x3 = x[3 * xs], x4 = x[4 * xs], x5 = x[5 * xs];
    const VT e1 = (x0 + x2) + x4, o1 = (x1 + x3) + x5;
    const VT e2 = (x0 + 4.0f * x2) + 16.0f * x4, o2 = (2.0f * x1 + 8.0f * x3) + 32.0f * x5;
    const VT e3 = (x0 + 0.25f * x2) + 0.0625f * x4, o3 = (0.5f * x1 + 0.125f * x3) + 0.03125f * x5;
    y[0] = x0;
    y[ys] = e1 + o1;
    y[2 * ys] = e1 - o1;
    y[3 * ys] = e2 + o2;
    y[4 * ys] = e2 - o2;
    y[5 * ys] = e3 + o3;
    y[6 * ys] = e3 - o3;
    y[7 * ys] = x5;
}

/* y[i*ys] = sum_k T[i][k] x[k*xs], T (rows, cols); F(4x4)'s and F(6x6)'s matrices by
 * their shared-term forms above (T is a constant at every inlined call, so
 * the choice is made at compile time) */
AI void NAME(tr)(VT *y, int ys, const VT *x, int xs, const float *T, int rows, int cols) {
    if (T == BT4) {
        NAME(bt4)(y, ys, x, xs);
        return;
    }
    if (T == AT4) {
        NAME(at4)(y, ys, x, xs);
        return;
    }
    if (T == A4x) {
        NAME(a4)(y, ys, x, xs);
        return;
    }
    if (T == BT6) {
        NAME(bt6)(y, ys, x, xs);
        return;
    }
    if (T == AT6) {
        NAME(at6)(y, ys, x, xs);
        return;
    }
    if (T == A6x) {
        NAME(a6)(y, ys, x, xs);
        return;
    }
#pragma GCC unroll 8
    for (int i = 0; i < rows; i++) {
        VT acc = {0};
#pragma GCC unroll 8
        for (int k = 0; k < cols; k++) {
            const float t = T[i * cols + k];
            if (t == 1.0f) acc += x[k * xs];
            else if (t == -1.0f) acc -= x[k * xs];
            else if (t != 0.0f) acc += t * x[k * xs];
        }
        y[i * ys] = acc;
    }
}

/* out[(i*rows + j)*es + c] = (T X T')[i][j] for a tile X (cols x cols, its
 * pixels at src[k*cols + l]: a row of zeros outside the map) and T (rows x
 * cols), every channel c < C: the inputs' transform (T = BT, alpha x alpha)
 * and the output gradient's (T = A, alpha x m). Column by column, each
 * column's pixels loaded just before their transform (T X), then row by row
 * (. T'): the half-transformed tile is the only array the registers do not
 * hold, and no pixel is tested (the caller points outside ones at zeros). */
AI void NAME(sandwich)(float *out, size_t es, const float *const *src, int C, const float *T, const int rows,
                   const int cols) {
    for (int c = 0; c < C; c += VW) {
        VT t[64], d[8], v[8];
#pragma GCC unroll 8
        for (int j = 0; j < cols; j++) {
#pragma GCC unroll 8
            for (int k = 0; k < cols; k++) d[k] = *(const VT *)(src[k * cols + j] + c);
            NAME(tr)(t + j, cols, d, 1, T, rows, cols);
        }
#pragma GCC unroll 8
        for (int i = 0; i < rows; i++) {
            NAME(tr)(v, 1, t + i * cols, 1, T, rows, cols);
#pragma GCC unroll 8
            for (int j = 0; j < rows; j++) *(VT *)(out + (size_t)(i * rows + j) * es + c) = v[j];
        }
    }
}

/* V[e*es + c] = (BT d B)[e] for the patch whose pixels are src[k*a+l]
 * (NULL: outside the map, zero), every channel c < C */
AI void NAME(in_tile)(float *V, size_t es, const float *const *src, int C, const int m) {
    NAME(sandwich)(V, es, src, C, m == 2 ? BT2 : m == 4 ? BT4 : BT6, m + 2, m + 2);
}

/* Y = AT M A for one tile (M[e*es + c]), + b, ReLU, into dst[p*m+q] (a
 * discard row where cropped): M's columns loaded one by one, each
 * transformed (AT M) at once, then the rows (. A). */
AI void NAME(out_tile)(float *const *dst, const float *M, size_t es, const float *b, int relu, int OC, const int m) {
    const int a = m + 2;
    const float *AT = m == 2 ? AT2 : m == 4 ? AT4 : AT6;
    for (int c = 0; c < OC; c += VW) {
        VT x[8], r[48], y[6];
#pragma GCC unroll 8
        for (int j = 0; j < a; j++) {
#pragma GCC unroll 8
            for (int k = 0; k < a; k++) x[k] = *(const VT *)(M + (size_t)(k * a + j) * es + c);
            NAME(tr)(r + j, a, x, 1, AT, m, a);
        }
        const VT bv = b ? *(const VT *)(b + c) : (VT){0}, z = {0};
#pragma GCC unroll 6
        for (int p = 0; p < m; p++) {
            NAME(tr)(y, 1, r + p * a, 1, AT, m, a);
#pragma GCC unroll 6
            for (int q = 0; q < m; q++) {
                VT o = b ? y[q] + bv : y[q];
                if (relu) o = (VT)((VTI)(o > z) & (VTI)o);   /* max(o, 0); NaN -> 0 as the scalar path */
                *(VT *)(dst[p * m + q] + c) = o;
            }
        }
    }
}

/* dM = A dY AT for one tile, dY's pixels at src[p*m+q] (NULL: past the map) */
AI void NAME(grad_tile)(float *M, size_t es, const float *const *src, int OC, const int m) {
    NAME(sandwich)(M, es, src, OC, m == 2 ? A2x : m == 4 ? A4x : A6x, m + 2, m);
}
