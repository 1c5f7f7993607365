// labkit: matrix multiplication C = A @ B, batched, with operands read through strides.
//
// Build macros: T (element type), and for gemm_rb VT (vector type of T), VW (its width),
// RM (rows per work-item) and VN (vectors per work-item row), chosen per device by
// labkit/backend/opencl/gemm.py's tuner.
//
// gemm_rb: CPU-style register blocking. Each work-item keeps an RM x (VN*VW) block of C in
// registers; per k it loads VN vectors of one row of B and RM scalars of A. MR is the number
// of C's rows from the launch's first: the last block may hold fewer than RM of them, its
// rows past MR then reading A's last row (so that the loop is the same for every block) and
// writing nothing; each element is summed over k in the same order in every block, so the
// rows of that block are bit for bit those of a launch with fewer rows. B's rows must be
// contiguous and VW-aligned; A and C may have any strides. Column panel jv starts at vector
// jv * sbj and its rows are ldb vectors apart: B in place (sbj = VN, ldb = N / VW), or packed
// panel after panel (sbj = K * VN, ldb = VN), which the caller does for large products: the
// panel is then read sequentially instead of touching a new page for every k.
// NOTE: plain `*`/`+` and vector-pointer loads, not fma()/vloadN: in PoCL's build those are
// out-of-line calls and cost 3-5x in this loop.
//
// gemm_gen: one work-item per element of C, any strides, any dtype: edges, small or odd shapes.
//
// Both apply the epilogue of kernels_cl/epilogue.cl (a bias, relu, an SGD update) to each
// result.

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

// With LSTM 1 (labkit/backend/opencl/lstm_gemm.py: an LSTM step's h @ U + x_t and its cell
// in one kernel) B is U with its columns regrouped, VW units at a time: the gates a, i, f, o
// of units u .. u + VW - 1 are the work-item's VN = 4 vectors. LSTM_CELL adds x_t (the bias
// epilogue's array, read through its row stride), writes the gate pre-activations in U's
// order to C, and the units' new cell and output.
// With LSTM_GRAD 1 (the same module: an LSTM step's gradient and the product of its gates'
// gradient with U in one kernel) a work-item first computes the cell's gradient of its rows
// (lstm.CELL_GRAD: C's columns are all of them, so no other work-item writes them), A being
// the gates' gradient it writes.
#ifndef LSTM_GRAD
#define LSTM_GRAD 0
#endif
#if LSTM_GRAD
#define LSTM_GRAD_ARGS , const long h, __global const T* cp, const long cp_o, const long cp_ld, \
    __global const T* x, const long x_o, const long x_ld, __global const T* gc, \
    const long gc_o, const long gc_ld, __global const T* gh, const long gh_o, \
    const long gh_ld, __global T* gcp, __global T* gx
#else
#define LSTM_GRAD_ARGS
#endif
#ifndef LSTM
#define LSTM 0
#endif
#if LSTM
#define LSTM_ARGS , const long lh, __global const T* lcp, const long lcp_o, const long lcp_ld, \
                  __global T* lc, __global T* lhout
#else
#define LSTM_ARGS
#endif

#ifdef VT
__kernel void gemm_rb(const int K, const int MR,
                      __global const T* A, const long a_o, const long sam, const long sak,
                      const long sab,
                      __global const VT* B, const long b_o, const long ldb, const long sbj,
                      const long sbb,
                      __global T* C, const long c_o, const long scm, const long scn,
                      const long scb EPI_ARGS LSTM_ARGS LSTM_GRAD_ARGS)
{
    const int jv = get_global_id(0);          // block of VN*VW columns
    const int ib = get_global_id(1);          // block of RM rows
    const long bz = get_global_id(2);         // batch
#if LSTM_GRAD
    for (int r_ = 0; r_ < RM; ++r_)
        for (long j_ = 0; j_ < h; j_ += W) CELL_GRAD((long)ib * RM + r_, j_)
#endif
    __global const T* a = A + a_o + bz * sab + (long)ib * RM * sam;
    __global const VT* b = B + b_o + bz * sbb + (long)jv * sbj;
    const int rows = min(RM, MR - ib * RM);  // NOTE: RM but in a last, partial block
    long ar[RM];  // NOTE: each row's offset in A; the rows past MR read the last one
    VT acc[RM][VN];
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        ar[r] = (long)min(r, rows - 1) * sam;
#pragma unroll
        for (int v = 0; v < VN; ++v) acc[r][v] = (VT)(0);
    }
    for (int k = 0; k < K; ++k) {
        VT bv[VN];
#pragma unroll
        for (int v = 0; v < VN; ++v) bv[v] = b[v];
        b += ldb;
#pragma unroll
        for (int r = 0; r < RM; ++r) {
            const T av = a[ar[r]];
#pragma unroll
            for (int v = 0; v < VN; ++v) acc[r][v] += av * bv[v];
        }
        a += sak;
    }
#if LSTM  // NOTE: lstm_gemm's blockings divide M: every block is whole here and above
    for (int r = 0; r < RM; ++r) LSTM_CELL(acc[r], (long)ib * RM + r, (long)jv * VW);
    return;
#endif
    __global T* c = C + c_o + bz * scb + (long)ib * RM * scm + (long)jv * VN * VW * scn;
#if SGD && !BIAS && !ACT
    if (w_sj == 1 && (w_o | w_si) % VW == 0) {
        // a weight gradient's update on aligned rows of W: whole vectors, as EPI_SGD computes
        // each element (vector pointers: vloadN is a call in PoCL's build)
        __global T* w = W + w_o + (long)ib * RM * w_si + (long)jv * VN * VW;
        for (int r = 0; r < rows; ++r)
            for (int v = 0; v < VN; ++v) SGD_STEP(VT, acc[r][v], w + r * w_si + v * VW)
    } else
#endif
#if BIAS || ACT || SGD
    for (int r = 0; r < rows; ++r)
        for (int v = 0; v < VN; ++v) {
            T* p = (T*)&acc[r][v];
            for (int i = 0; i < VW; ++i) EPI(p[i], ib * RM + r, jv * VN * VW + v * VW + i);
        }
#endif
#if !STORE_C
    return;
#endif
    if (scn == 1 && (c_o | scm | scb) % VW == 0) {  // NOTE: vector pointers (vstoreN: a call)
#pragma unroll
        for (int r = 0; r < RM; ++r)
            if (r < rows)
#pragma unroll
                for (int v = 0; v < VN; ++v) *(__global VT*)(c + r * scm + v * VW) = acc[r][v];
    } else if (scn == 1) {
#pragma unroll
        for (int r = 0; r < RM; ++r)
            if (r < rows)
#pragma unroll
                for (int v = 0; v < VN; ++v)
                    CAT(vstore, VW)(acc[r][v], 0, c + r * scm + v * VW);
    } else {
        for (int r = 0; r < rows; ++r)
            for (int v = 0; v < VN; ++v) {
                const T* p = (const T*)&acc[r][v];
                for (int i = 0; i < VW; ++i) c[r * scm + (v * VW + i) * scn] = p[i];
            }
    }
}
#endif

__kernel void gemm_gen(const int M, const int N, const int K, const int i0, const int j0,
                       __global const T* A, const long a_o, const long sam, const long sak,
                       const long sab,
                       __global const T* B, const long b_o, const long sbk, const long sbn,
                       const long sbb,
                       __global T* C, const long c_o, const long scm, const long scn,
                       const long scb EPI_ARGS)
{
    const int j = get_global_id(0);
    const int i = get_global_id(1);
    const long bz = get_global_id(2);
    if (i >= M || j >= N) return;
    __global const T* a = A + a_o + bz * sab + (long)(i0 + i) * sam;
    __global const T* b = B + b_o + bz * sbb + (long)(j0 + j) * sbn;
    T acc = 0;
    for (int k = 0; k < K; ++k) acc += a[k * sak] * b[k * sbk];
    EPI(acc, i0 + i, j0 + j);
#if STORE_C
    C[c_o + bz * scb + (long)(i0 + i) * scm + (long)(j0 + j) * scn] = acc;
#endif
}

#ifdef OT
// gemm_outer: C = A @ B with K = 1 (a weight gradient at batch 1: the outer product of two
// vectors, memory-bound). A work-item computes OW columns of one row: with OW > 1 as a vector
// of type OT, B's row, C's rows and W's rows (the SGD epilogue's weight) being contiguous and
// OW-aligned, the columns past the last whole vector element by element; with OW = 1 (OT = T)
// one element, through any strides. Each element is `0 + a * b` as gemm_rb and gemm_gen
// compute it (so -0 becomes 0 alike).
__kernel void gemm_outer(const int N,
                         __global const T* A, const long a_o, const long sam, const long sab,
                         __global const T* B, const long b_o, const long sbn, const long sbb,
                         __global T* C, const long c_o, const long scm, const long scn,
                         const long scb EPI_SGD_ARGS)
{
    const long j = (long)get_global_id(0) * OW;
    const long i = get_global_id(1);
    const long bz = get_global_id(2);
    const T av = A[a_o + bz * sab + i * sam];
    __global const T* b = B + b_o + bz * sbb;
    __global T* c = C + c_o + bz * scb + i * scm;
#if OW > 1
    if (j + OW <= N) {
        OT acc = (OT)(0);
        acc += av * *(__global const OT*)(b + j);
#if SGD
        SGD_STEP(OT, acc, W + w_o + i * w_si + j)
#endif
#if STORE_C
        *(__global OT*)(c + j) = acc;
#endif
        return;
    }
#endif
    for (long jj = j; jj < min(j + OW, (long)N); ++jj) {
        T acc = 0;
        acc += av * b[jj * sbn];
        EPI_SGD(acc, i, jj);
#if STORE_C
        c[jj * scn] = acc;
#endif
    }
}
#endif

