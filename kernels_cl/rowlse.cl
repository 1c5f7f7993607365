// The log-sum-exp of a contiguous row of c values, computed the same way by every kernel that
// needs one (softmax's log form, reduce.logsumexp's rows, softmax cross-entropy), so that
// their results agree bit for bit. The max first; a row whose max is not finite is summed
// unshifted, which keeps NaN and +-inf as the composed form does.
//
// With W defined (CPU devices: VT is T's vector of W), the row is read in vectors of W: PoCL
// inlines a vector exp where the scalar one is a call (4x faster on a long row). The lanes'
// partial sums are then added in lane order, then the tail. Without W, one element at a time.

#ifdef W
#define ROW_CAT_(a, b) a##b
#define ROW_CAT(a, b) ROW_CAT_(a, b)
#define ROW_VLOAD(p) ROW_CAT(vload, W)(0, p)
#define ROW_VSTORE(v, p) ROW_CAT(vstore, W)(v, 0, p)
#endif

// The row's maximum as LK_FMAX folds it (a NaN wins), in vectors of W where W is defined.
inline T lk_row_max(__global const T* row, const IDX c)
{
    T m = -INFINITY;
#ifdef W
    const IDX cv = c - c % W;
    T lanes[W];
    VT mv = (VT)(-INFINITY);
    for (IDX k = 0; k < cv; k += W) {
        const VT v = ROW_VLOAD(row + k);
        mv = select(v, mv, (mv > v) | (mv != mv));
    }
    ROW_VSTORE(mv, lanes);
    for (int j = 0; j < W; ++j) m = LK_FMAX(m, lanes[j]);
#else
    const IDX cv = 0;
#endif
    for (IDX k = cv; k < c; ++k) m = LK_FMAX(m, row[k]);
    return m;
}

// log(sum(exp(row - shift))), with the shift (the row's max, or 0 where that is not finite)
// stored at *shift: log-softmax is (x - shift) - that, which keeps the log-sum's low bits
// where x - (log-sum + shift) lost them to a large max (softmax of logits of 1e4 summed to
// 1 - 3e-4, of 1e7 to 0.87). The log-sum-exp is their sum (lk_row_lse).
inline T lk_row_shifted_logsum(__global const T* row, const IDX c, T* shift)
{
    const T m = lk_row_max(row, c);
    const T mm = isfinite(m) ? m : (T)0;
    *shift = mm;
    T s = 0;
#ifdef W
    const IDX cv = c - c % W;
    T lanes[W];
    VT sv = (VT)(0);
    for (IDX k = 0; k < cv; k += W) sv += exp(ROW_VLOAD(row + k) - (VT)(mm));
    ROW_VSTORE(sv, lanes);
    for (int j = 0; j < W; ++j) s += lanes[j];
#else
    const IDX cv = 0;
#endif
    for (IDX k = cv; k < c; ++k) s += exp(row[k] - mm);
    return log(s);
}

inline T lk_row_lse(__global const T* row, const IDX c)
{
    T mm;
    const T ls = lk_row_shifted_logsum(row, c, &mm);
    return ls + mm;
}
