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

/* y[i*ys] = sum_k T[i][k] x[k*xs], T (rows, cols); F(4x4)'s matrices by
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
#pragma GCC unroll 6
    for (int i = 0; i < rows; i++) {
        VT acc = {0};
#pragma GCC unroll 6
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
 * pixels at src[k*cols + l], NULL: zero) and T (rows x cols), every channel
 * c < C: the inputs' transform (T = BT, alpha x alpha) and the output
 * gradient's (T = A, alpha x m) */
AI void NAME(sandwich)(float *out, size_t es, const float *const *src, int C, const float *T, const int rows,
                   const int cols) {
    for (int c = 0; c < C; c += VW) {
        VT d[36], t[36], v[6];
#pragma GCC unroll 36
        for (int i = 0; i < cols * cols; i++) d[i] = src[i] ? *(const VT *)(src[i] + c) : (VT){0};
#pragma GCC unroll 6
        for (int j = 0; j < cols; j++) NAME(tr)(t + j, cols, d + j, cols, T, rows, cols);
#pragma GCC unroll 6
        for (int i = 0; i < rows; i++) {
            NAME(tr)(v, 1, t + i * cols, 1, T, rows, cols);
#pragma GCC unroll 6
            for (int j = 0; j < rows; j++) *(VT *)(out + (size_t)(i * rows + j) * es + c) = v[j];
        }
    }
}

/* V[e*es + c] = (BT d B)[e] for the patch whose pixels are src[k*a+l]
 * (NULL: outside the map, zero), every channel c < C */
AI void NAME(in_tile)(float *V, size_t es, const float *const *src, int C, const int m) {
    NAME(sandwich)(V, es, src, C, m == 2 ? BT2 : BT4, m + 2, m + 2);
}

/* Y = AT M A for one tile (M[e*es + c]), + b, ReLU, into dst[p*m+q]
 * (NULL: cropped) */
AI void NAME(out_tile)(float *const *dst, const float *M, size_t es, const float *b, int relu, int OC, const int m) {
    const int a = m + 2;
    const float *AT = m == 2 ? AT2 : AT4;
    for (int c = 0; c < OC; c += VW) {
        VT x[36], r[24], y[16];
#pragma GCC unroll 36
        for (int e = 0; e < a * a; e++) x[e] = *(const VT *)(M + (size_t)e * es + c);
#pragma GCC unroll 6
        for (int j = 0; j < a; j++) NAME(tr)(r + j, a, x + j, a, AT, m, a);
#pragma GCC unroll 4
        for (int p = 0; p < m; p++) NAME(tr)(y + p * m, 1, r + p * a, 1, AT, m, a);
        const VT bv = b ? *(const VT *)(b + c) : (VT){0}, z = {0};
#pragma GCC unroll 16
        for (int i = 0; i < m * m; i++) {
            if (!dst[i]) continue;
            VT o = b ? y[i] + bv : y[i];
            if (relu) o = (VT)((VTI)(o > z) & (VTI)o);   /* max(o, 0); NaN -> 0 as the scalar path */
            *(VT *)(dst[i] + c) = o;
        }
    }
}

/* dM = A dY AT for one tile, dY's pixels at src[p*m+q] (NULL: past the map) */
AI void NAME(grad_tile)(float *M, size_t es, const float *const *src, int OC, const int m) {
    NAME(sandwich)(M, es, src, OC, m == 2 ? A2x : A4x, m + 2, m);
}
