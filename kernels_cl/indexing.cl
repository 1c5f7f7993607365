// labkit: gather along an axis and its gradient, a deterministic scatter-add.
// Arrays are viewed as (outer, axis, inner), contiguous. Build macros: T, I (index type).

// out[o, j, i] = a[o, idx[j], i]; negative indices count from the end (NumPy).
__kernel void take(const long n, const long A, const long J, const long inner,
                   __global T* out, __global const T* a, const long a_o,
                   __global const I* idx, const long idx_o)
{
    const long gid = get_global_id(0);
    if (gid >= n) return;
    const long i = gid % inner;
    const long oj = gid / inner;
    const long j = oj % J;
    const long o = oj / J;
    long k = idx[idx_o + j];
    if (k < 0) k += A;
    // NOTE: indices were bounds-checked on the host; the clamp only keeps memory safe.
    k = clamp(k, 0L, A - 1);
    out[gid] = a[a_o + (o * A + k) * inner + i];
}

// out[o, k, i] += sum over positions s with idx[perm[s]] == k of vals[o, perm[s], i],
// in the stable order of perm: no atomics, the same bits on every run.
__kernel void scatter_add(const long n, const long A, const long J, const long inner,
                          __global T* out, const long out_o,
                          __global const T* vals, const long v_o,
                          __global const long* perm, __global const long* starts)
{
    const long gid = get_global_id(0);
    if (gid >= n) return;
    const long i = gid % inner;
    const long ok = gid / inner;
    const long k = ok % A;
    const long o = ok / A;
    T acc = out[out_o + gid];
    for (long s = starts[k]; s < starts[k + 1]; ++s)
        acc += vals[v_o + (o * J + perm[s]) * inner + i];
    out[out_o + gid] = acc;
}
