// labkit: the epilogue of the matrix-product kernels (gemm.cl and the dot-product and GEMV
// kernels of labkit/backend/opencl/gemm.py): a linear layer or a convolution as one kernel.
// With BIAS 1 the kernel takes a bias read through its own strides (bias[bias_o + i * e_si +
// j * e_sj] for element (i, j) of C: a stride of 0 broadcasts it along rows or columns), added
// to each result; with ACT 1 the result then goes through relu, as maximum(v, 0) does
// elsewhere (NaN stays NaN, -0 becomes 0). Each is its own rounding, in the order of the
// separate ops it replaces.

#ifndef BIAS
#define BIAS 0
#endif
#ifndef ACT
#define ACT 0
#endif
#if BIAS
#define EPI_ARGS , __global const T* bias, const long bias_o, const long e_si, const long e_sj
#define EPI_BIAS(v, i, j) v = v + bias[bias_o + (long)(i) * e_si + (long)(j) * e_sj]
#else
#define EPI_ARGS
#define EPI_BIAS(v, i, j)
#endif
#if ACT
#define EPI_ACT(v) v = (v > (T)0 || v != v) ? v : (T)0
#else
#define EPI_ACT(v)
#endif
#define EPI(v, i, j) { EPI_BIAS(v, i, j); EPI_ACT(v); }
