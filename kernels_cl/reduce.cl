// labkit: reductions over any set of axes.
//
// The reduced axes are viewed as the "inner" dimensions and the kept ones as "outer"; the
// Python side (labkit/backend/opencl/reduce.py) generates the offset code for both:
//   outer: computes `base` (offset of the first reduced element) from the output index `r`
//   inner: computes `off` (offset within the reduction) from the reduction index `q`
// Macros from the build options: IN, ACC, OUT, IDX, NEUTRAL, MAP(x), COMBINE(a, b), and with
// ARG defined (argmax/argmin) BETTER(x, best): the kernels then carry (value, index) pairs.
//
// Two shapes of work: NAME_wi gives each output one work-item (many small reductions);
// NAME_wg gives each (output, segment) one work-group that strides over its segment and
// finishes with a tree in local memory (few large reductions). With several segments a second
// pass reduces the partial results. Both visit elements in a fixed order: deterministic.

__kernel void ${name}_wi(const IDX n_out, const IDX n_red,
                         __global OUT* out, const IDX out_o,
                         __global const IN* a, const IDX a_o${params})
{
    const IDX gid = (IDX)get_global_id(0);
    if (gid >= n_out) return;
    IDX r = gid;
${outer}
    ACC acc = NEUTRAL;
#ifdef ARG
    long best_i = 0;
#endif
    for (IDX k = 0; k < n_red; ++k) {
        IDX q = k;
${inner}
        const ACC x = (ACC)(MAP(a[base + off]));
#ifdef ARG
        if (k == 0 || BETTER(x, acc)) { acc = x; best_i = k; }
#else
        acc = COMBINE(acc, x);
#endif
    }
#ifdef ARG
    out[out_o + gid] = (OUT)best_i;
#else
    out[out_o + gid] = (OUT)acc;
#endif
}

__kernel void ${name}_wg(const IDX n_out, const IDX n_red, const IDX n_seg,
                         __global OUT* out, const IDX out_o,
                         __global const IN* a, const IDX a_o${params})
{
    __local ACC lacc[LK_WG];
#ifdef ARG
    __local long lidx[LK_WG];
#endif
    const IDX g = (IDX)get_group_id(0);
    const int lid = get_local_id(0);
    IDX r = g / n_seg;
    const IDX seg = g - r * n_seg;
${outer}
    const IDX chunk = (n_red + n_seg - 1) / n_seg;
    const IDX start = seg * chunk;
    const IDX stop = min(start + chunk, n_red);
    ACC acc = NEUTRAL;
#ifdef ARG
    long best_i = -1;
#endif
    for (IDX k = start + lid; k < stop; k += LK_WG) {
        IDX q = k;
${inner}
        const ACC x = (ACC)(MAP(a[base + off]));
#ifdef ARG
        if (best_i < 0 || BETTER(x, acc)) { acc = x; best_i = k; }
#else
        acc = COMBINE(acc, x);
#endif
    }
    lacc[lid] = acc;
#ifdef ARG
    lidx[lid] = best_i;
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = LK_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
#ifdef ARG
            const long j = lidx[lid + s];
            const ACC y = lacc[lid + s];
            const long i = lidx[lid];
            if (j >= 0 && (i < 0 || BETTER(y, lacc[lid]) ||
                           (!BETTER(lacc[lid], y) && j < i))) {
                lacc[lid] = y;
                lidx[lid] = j;
            }
#else
            lacc[lid] = COMBINE(lacc[lid], lacc[lid + s]);
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
#ifdef ARG
        out[out_o + g] = (OUT)lidx[0];
#else
        out[out_o + g] = (OUT)lacc[0];
#endif
    }
}
