// labkit: the epilogue of the matrix-product kernels (gemm.cl and the dot-product and GEMV
// kernels of labkit/backend/opencl/gemm.py): a linear layer or a convolution as one kernel.
// With BIAS 1 the kernel takes a bias read through its own strides (bias[bias_o + i * e_si +
// j * e_sj] for element (i, j) of C: a stride of 0 broadcasts it along rows or columns), added
// to each result; with ACT 1 the result then goes through relu, as maximum(v, 0) does
// elsewhere (NaN stays NaN, -0 becomes 0). With SGD 1 (lk.compile: a weight gradient and
// its plain SGD update as one kernel) the result is also taken from a parameter read through
// its own strides, W[w_o + i * w_si + j * w_sj] -= lr * v, as the optimizer's kernel computes it
// (two statements, two roundings: `d = v * lr; w - d`, contraction off as in that kernel). Each
// is its own rounding, in the order of the separate ops it replaces.

#ifndef BIAS
#define BIAS 0
#endif
#ifndef ACT
#define ACT 0
#endif
#ifndef SGD
#define SGD 0
#endif
#if BIAS && ACT == 2
// ACT 2 (lk.compile: a product and relu's gradient as one kernel): the array is a mask, not
// a bias; v where its element is > 0, else 0, as where_positive gives it (NaN in v passes)
#define EPI_BIAS_ARGS , __global const T* bias, const long bias_o, const long e_si, const long e_sj
#define EPI_BIAS(v, i, j) v = (bias[bias_o + (long)(i) * e_si + (long)(j) * e_sj] > (T)0) ? v : (T)0
#elif BIAS
#define EPI_BIAS_ARGS , __global const T* bias, const long bias_o, const long e_si, const long e_sj
#define EPI_BIAS(v, i, j) v = v + bias[bias_o + (long)(i) * e_si + (long)(j) * e_sj]
#else
#define EPI_BIAS_ARGS
#define EPI_BIAS(v, i, j)
#endif
#if SGD
#define EPI_SGD_ARGS , __global T* W, const long w_o, const long w_si, const long w_sj, const T lr
// SGD_STEP(V, v, p): the update of the values v (a T, or a vector type V of them) at p in W,
// *p -= v * lr in two roundings; EPI_SGD: element (i, j)'s, through W's strides
#define SGD_STEP(V, v, p) {                                                         \
        _Pragma("OPENCL FP_CONTRACT OFF")                                           \
        const V d_ = (v) * lr;                                                      \
        __global V* w_ = (__global V*)(p);                                          \
        *w_ = *w_ - d_;                                                             \
    }
#define EPI_SGD(v, i, j) SGD_STEP(T, v, W + w_o + (long)(i) * w_si + (long)(j) * w_sj)
#else
#define EPI_SGD_ARGS
#define EPI_SGD(v, i, j)
#endif
// SGD 2 (lk.compile: a weight's gradient that nothing reads in the step, made again where it
// is read): the update alone, C not written
#if SGD == 2
#define STORE_C 0
#else
#define STORE_C 1
#endif
#define EPI_ARGS EPI_BIAS_ARGS EPI_SGD_ARGS
#if ACT == 1
#define EPI_ACT(v) v = (v > (T)0 || v != v) ? v : (T)0
#else
#define EPI_ACT(v)
#endif
#define EPI(v, i, j) { EPI_BIAS(v, i, j); EPI_ACT(v); EPI_SGD(v, i, j); }
