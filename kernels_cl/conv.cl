// labkit: the windows of a convolution or pooling (im2col) and their adjoint (col2im), for the
// Im2Col, Col2Im and Conv2d functions of labkit/functions/connection.py. The window, stride,
// dilation, padding and sizes are compile-time constants (KH, KW, SH, SW, DH, DW, PH, PW,
// OH, OW, H, W), so the index arithmetic is multiplications by constants. CFIRST selects the
// column layout:
//   CFIRST 1: (C, KH, KW, N, OH, OW)   (a convolution: one GEMM operand)
//   CFIRST 0: (N, C, KH, KW, OH, OW)   (pooling)
// H and W are the input's sizes before padding: a window position outside them reads 0 (the
// zero padding of a convolution, without a padded copy of the input).

#ifndef PH
#define PH 0
#define PW 0
#endif

// im2col: one work-item per ``rows`` rows of a window offset's plane for one image (OH x OW
// column elements; on CPU devices a whole plane, unless planes are few; on others a row): the
// index arithmetic once per work-item, then each output row, which with unit strides along x
// is a shifted copy between zero edges (loops the compiler vectorises; a work-item per row
// spent much of its time dividing, a work-item per element ran 4.5x slower on PoCL). x (N, C,
// H, W) is read through its strides (a convolution's output is (C, N, H, W) in memory).
// ``total`` counts work-items.
__kernel void lk_im2col(const IDX total, const IDX rows, const IDX N, const IDX C,
                        __global T* col, __global const T* x, const IDX x_o,
                        const IDX sn, const IDX sc, const IDX sy, const IDX sx)
{
    const IDX item = (IDX)get_global_id(0);
    if (item >= total) return;
    const IDX blocks = (OH + rows - 1) / rows;
    const IDX gid = item / blocks, oy0 = (item % blocks) * rows;
    IDX r = gid;
#if CFIRST
    const IDX n = r % N; r /= N;
    const IDX j = r % KW; r /= KW;
    const IDX i = r % KH; r /= KH;
    const IDX c = r;
#else
    const IDX j = r % KW; r /= KW;
    const IDX i = r % KH; r /= KH;
    const IDX c = r % C; r /= C;
    const IDX n = r;
#endif
    __global const T* pc = x + x_o + n * sn + c * sc;
    const IDX shift = j * DW - PW;  // ix = ox * SW + shift
    for (IDX oy = oy0; oy < min(oy0 + rows, (IDX)OH); ++oy) {
        __global T* out = col + (gid * OH + oy) * OW;
        const IDX iy = oy * SH + i * DH - PH;
#if PH || PW
        if (iy < 0 || iy >= H) {
            for (IDX ox = 0; ox < OW; ++ox) out[ox] = (T)0;
            continue;
        }
#endif
        __global const T* px = pc + iy * sy;
#if SW == 1
        if (sx == 1) {
            const IDX lo = min(max(-shift, (IDX)0), (IDX)OW);
            const IDX hi = max(min((IDX)W - shift, (IDX)OW), lo);
            for (IDX ox = 0; ox < lo; ++ox) out[ox] = (T)0;
            for (IDX ox = lo; ox < hi; ++ox) out[ox] = px[ox + shift];
            for (IDX ox = hi; ox < OW; ++ox) out[ox] = (T)0;
            continue;
        }
#endif
        for (IDX ox = 0; ox < OW; ++ox) {
            const IDX ix = ox * SW + shift;
#if PH || PW
            out[ox] = (ix >= 0 && ix < W) ? px[ix * sx] : (T)0;
#else
            out[ox] = px[ix * sx];
#endif
        }
    }
}

// col2im: one work-item per ``rows`` rows of an image plane of the (N, C, H, W) result (as
// im2col: on CPU devices a plane unless planes are few, on others a row), each element
// gathering every window that covers it, in (i, j) order: no atomics, and the same sums in the
// same order as adding the window slices one after another (bit for bit). Which window rows
// reach a row is worked out once per row. On CPU devices (ROW_SUMS), with unit strides
// along x and rows of at most 64, a row is summed window offset by window offset into a private row (contiguous loops the
// compiler vectorises; each element still adds its windows in (i, j) order). col is read
// through its strides (in the layout's order: s0..s5). With padding, the result is the
// unpadded part (the data gradient of a convolution). OUT_CNHW 1 writes it in (C, N, H, W)
// memory order. ``total`` counts work-items.
#ifndef OUT_CNHW
#define OUT_CNHW 0
#endif
#ifndef ROW_SUMS
#define ROW_SUMS 0
#endif
__kernel void lk_col2im(const IDX total, const IDX rows, const IDX N, const IDX C,
                        __global T* out, __global const T* col, const IDX col_o,
                        const IDX s0, const IDX s1, const IDX s2, const IDX s3, const IDX s4,
                        const IDX s5)
{
    const IDX item = (IDX)get_global_id(0);
    if (item >= total) return;
    const IDX blocks = (H + rows - 1) / rows;
    const IDX gid = item / blocks, yu0 = (item % blocks) * rows;
    IDX r = gid;
#if OUT_CNHW
    const IDX n = r % N; r /= N;
    const IDX c = r;
#else
    const IDX c = r % C; r /= C;
    const IDX n = r;
#endif
#if CFIRST
    const IDX sj = s2;
#else
    const IDX sj = s3;
#endif
    for (IDX yu = yu0; yu < min(yu0 + rows, (IDX)H); ++yu) {
        const IDX y = yu + PH;
        // the window rows i that cover row y, and where each starts in col
        IDX row_at[KH];
        char covers[KH];
        for (int i = 0; i < KH; ++i) {
            const IDX ty = y - i * DH;
            covers[i] = 0;
            if (ty < 0 || ty % SH != 0) continue;
            const IDX oy = ty / SH;
            if (oy >= OH) continue;
            covers[i] = 1;
#if CFIRST
            row_at[i] = col_o + c * s0 + i * s1 + n * s3 + oy * s4;
#else
            row_at[i] = col_o + n * s0 + c * s1 + i * s2 + oy * s4;
#endif
        }
        __global T* dst = out + (gid * H + yu) * W;
#if SW == 1 && W <= 64 && ROW_SUMS
        T acc[W];
        for (IDX xu = 0; xu < W; ++xu) acc[xu] = 0;
        for (int i = 0; i < KH; ++i) {
            if (!covers[i]) continue;
            for (int j = 0; j < KW; ++j) {
                // ox = xu + PW - j * DW, for the xu where 0 <= ox < OW
                const IDX shift = PW - j * DW;
                const IDX lo = min(max(-shift, (IDX)0), (IDX)W);
                const IDX hi = max(min((IDX)OW - shift, (IDX)W), lo);
                __global const T* src = col + row_at[i] + j * sj + shift * s5;
                if (s5 == 1)
                    for (IDX xu = lo; xu < hi; ++xu) acc[xu] += src[xu];
                else
                    for (IDX xu = lo; xu < hi; ++xu) acc[xu] += src[xu * s5];
            }
        }
        for (IDX xu = 0; xu < W; ++xu) dst[xu] = acc[xu];
#else
        for (IDX xu = 0; xu < W; ++xu) {
            const IDX xx = xu + PW;
            T acc = 0;
            for (int i = 0; i < KH; ++i) {
                if (!covers[i]) continue;
                for (int j = 0; j < KW; ++j) {
                    const IDX tx = xx - j * DW;
                    if (tx < 0 || tx % SW != 0) continue;
                    const IDX ox = tx / SW;
                    if (ox >= OW) continue;
                    acc += col[row_at[i] + j * sj + ox * s5];
                }
            }
            dst[xu] = acc;
        }
#endif
    }
}
