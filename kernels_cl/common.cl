// labkit: helpers shared by every generated kernel.
// Index arithmetic uses IDX (int when every offset fits in 31 bits, else long).
// The fp64 pragma, when a kernel needs double, comes first, from program.header().

// NaN-propagating max/min, as NumPy's maximum/minimum (fmax/fmin ignore NaN). a != a tests
// for NaN inline: PoCL calls isnan() out of line, which made maximum 12x slower.
#define LK_FMAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
#define LK_FMIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
#define LK_IMAX(a, b) ((a) > (b) ? (a) : (b))
#define LK_IMIN(a, b) ((a) < (b) ? (a) : (b))

// float32 tanh without the library call (PoCL's is out of line, ~70% of NumPy's speed): for
// |x| < 0.55 an odd polynomial x (1 + x^2 P(x^2)) (fitted to float64 tanh, 0.02 ulp from it;
// -0 stays -0), from 0.55 (1 - e) / (1 + e) with e = exp(-2|x|), exactly +-1 from |x| ~ 8.7.
// At most 1.5 ulp from float64 (tests/backend/test_vector_kernels.py; the library's: 1.2).
// z is x * x; both work on scalars and vectors.
#define LK_TANH_S(x, z) ((x) * (1.0f + (z) * ((((-6.287662853e-03f * (z) + 2.108205948e-02f) \
    * (z) - 5.385511985e-02f) * (z) + 1.333261687e-01f) * (z) - 3.333331865e-01f)))
#define LK_TANH_L(x, e) copysign((1.0f - (e)) / (1.0f + (e)), x)

// Integer power by squaring (NumPy: integer ** negative integer is an error; we return 0).
inline long lk_powi(long b, long e) {
    if (e < 0) return (b == 1) ? 1 : ((b == -1) ? ((e & 1) ? -1 : 1) : 0);
    long r = 1;
    while (e) { if (e & 1) r *= b; b *= b; e >>= 1; }
    return r;
}

// Python/NumPy floor division and modulo for integers (C truncates toward zero).
inline long lk_floordiv(long a, long b) {
    if (b == 0) return 0;
    if (b == -1) return (long)(0UL - (ulong)a);  // NOTE: LONG_MIN / -1 wraps (as NumPy)
    long q = a / b;
    return ((a % b != 0) && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline long lk_mod(long a, long b) {
    if (b == 0 || b == -1) return 0;  // NOTE: LONG_MIN % -1 would trap
    long m = a % b;
    return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
}
