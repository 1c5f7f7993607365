// labkit: helpers shared by every generated kernel.
// Index arithmetic uses IDX (int when every offset fits in 31 bits, else long).
// The fp64 pragma, when a kernel needs double, comes first, from program.header().

// NaN-propagating max/min, as NumPy's maximum/minimum (fmax/fmin ignore NaN). a != a tests
// for NaN inline: PoCL calls isnan() out of line, which made maximum 12x slower.
#define LK_FMAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
#define LK_FMIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
#define LK_IMAX(a, b) ((a) > (b) ? (a) : (b))
#define LK_IMIN(a, b) ((a) < (b) ? (a) : (b))

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
