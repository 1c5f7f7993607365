// labkit: counter-based random numbers, Philox4x32-10 (Salmon et al., SC'11).
// Block b of a stream with key (k0, k1) is philox(counter = (lo(b), hi(b), 0, 0), key); each
// block gives four 32-bit words. labkit/backend/random.py has the same function in NumPy: the
// words, and so uniform and bernoulli draws, are the same bits on every device.
// Build macros: T (float or double) for the float kernels.
#pragma OPENCL FP_CONTRACT OFF

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

inline uint4 philox4x32_10(uint4 c, uint2 k)
{
    for (int i = 0; i < 10; ++i) {
        const uint hi0 = mul_hi(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
        const uint hi1 = mul_hi(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k += (uint2)(PHILOX_W0, PHILOX_W1);
    }
    return c;
}

inline uint4 lk_block(const ulong b, const uint2 key)
{
    return philox4x32_10((uint4)((uint)b, (uint)(b >> 32), 0u, 0u), key);
}

// Every kernel: work item g computes block (counter + g), whose values are values
// per * g - skip + j (j < per) of the output; those outside [0, n) are not written. skip < per
// lets a draw start inside a block (a rank's rows of a global batch's draw).

// Raw 32-bit words: out[i] is word (skip + i) % 4 of block counter + (skip + i) / 4.
__kernel void random_bits(const long n, __global uint* out, const ulong counter,
                          const int skip, const uint k0, const uint k1)
{
    const long g = get_global_id(0);
    const long o = 4 * g - skip;
    if (o >= n) return;
    const uint4 w = lk_block(counter + (ulong)g, (uint2)(k0, k1));
    const uint ws[4] = {w.x, w.y, w.z, w.w};
    for (int j = 0; j < 4; ++j)
        if (o + j >= 0 && o + j < n) out[o + j] = ws[j];
}

#ifdef T
// float: 24 random bits -> [0, 1) exactly; double: 53 bits from two words.
inline T lk_unit(const uint a, const uint b)
{
#if LK_DOUBLE
    return ((double)(a >> 5) * 67108864.0 + (double)(b >> 6)) * (1.0 / 9007199254740992.0);
#else
    return (float)(a >> 8) * (1.0f / 16777216.0f);
#endif
}

// Uniform on [low, high). float: one word per value; double: two words per value.
__kernel void random_uniform(const long n, __global T* out, const ulong counter,
                             const int skip, const uint k0, const uint k1, const T low,
                             const T high)
{
    const long g = get_global_id(0);
    const uint4 w = lk_block(counter + (ulong)g, (uint2)(k0, k1));
#if LK_DOUBLE
    const T u[2] = {lk_unit(w.x, w.y), lk_unit(w.z, w.w)};
    const int per = 2;
#else
    const T u[4] = {lk_unit(w.x, 0), lk_unit(w.y, 0), lk_unit(w.z, 0), lk_unit(w.w, 0)};
    const int per = 4;
#endif
    const long o = per * g - skip;
    for (int j = 0; j < per; ++j) {
        if (o + j < 0 || o + j >= n) continue;
        const T scaled = (high - low) * u[j];
        out[o + j] = low + scaled;
    }
}

// Normal by Box-Muller: each block gives two values (float and double alike).
__kernel void random_normal(const long n, __global T* out, const ulong counter,
                            const int skip, const uint k0, const uint k1, const T mean,
                            const T stddev)
{
    const long g = get_global_id(0);
    const uint4 w = lk_block(counter + (ulong)g, (uint2)(k0, k1));
    const T u1 = (T)1 - lk_unit(w.x, w.y);   // (0, 1]
    const T u2 = lk_unit(w.z, w.w);
    const T r = sqrt((T)(-2) * log(u1));
    const T t = (T)(2 * M_PI) * u2;
    const long o = 2 * g - skip;
    if (o >= 0 && o < n) out[o] = mean + stddev * (r * cos(t));
    if (o + 1 >= 0 && o + 1 < n) out[o + 1] = mean + stddev * (r * sin(t));
}
#endif
