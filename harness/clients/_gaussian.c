/* A block of Gaussian noise on the lattice, drawn and added in one pass.
 *
 * Each draw is numpy's Generator.standard_normal (random_standard_normal in
 * numpy/random/src/distributions/distributions.c: its ziggurat, its tables, its
 * wedge and tail) over the caller's bit generator, called through the same
 * function pointers numpy calls: the same generator state gives the same
 * normals, bit for bit. Only the sign is applied without a branch (numpy's
 * branch is mispredicted half the time); the value is the same.
 *
 * out[j] = data[clients[j]] + rint(sigma * z_j), as 64-bit integers (mod 2^64);
 * acc += (sum of the steps, their sum of squares, max |step|, max |out|).
 * Returns 0, or -1 at the first index outside data[0..ndata) (nothing read there).
 * Loaded with ctypes: no Python object is touched here.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_ziggurat_tables.h"

#define PREFETCH 24

/* The calling convention below: gaussian.py loads the library only if this matches
 * (a library built from an older source is left unloaded, never called wrongly). */
int ltm_gaussian_abi(void) { return 2; }

typedef uint64_t (*next_uint64_fn)(void *);
typedef double (*next_double_fn)(void *);

/* Where numpy's fast path fails (about once in 80): its wedge and tail, from the
 * word that failed. */
static double __attribute__((noinline))
slow(void *st, next_uint64_fn next64, next_double_fn nextd, uint64_t rabs, int idx,
     double x)
{
    for (;;) {
        if (idx == 0) {
            for (;;) {
                double xx = -ZIGGURAT_NOR_INV_R * log1p(-nextd(st));
                double yy = -log1p(-nextd(st));
                if (yy + yy > xx * xx)
                    return ((rabs >> 8) & 0x1) ? -(ZIGGURAT_NOR_R + xx)
                                               : ZIGGURAT_NOR_R + xx;
            }
        }
        if (((fi_double[idx - 1] - fi_double[idx]) * nextd(st) + fi_double[idx]) <
            exp(-0.5 * x * x))
            return x;
        /* rejected: numpy draws afresh */
        uint64_t r = next64(st);
        idx = r & 0xff;
        r >>= 8;
        int sign = r & 0x1;
        rabs = (r >> 1) & 0x000fffffffffffffULL;
        x = rabs * wi_double[idx];
        if (sign)
            x = -x;
        if (rabs < ki_double[idx])
            return x;
    }
}

int ltm_add_gaussian(void *st, next_uint64_fn next64, next_double_fn nextd, double sigma,
                     const double *data, int64_t ndata, const int64_t *clients, int64_t n,
                     int64_t *out, double *acc)
{
    for (int64_t i = 0; i < n; i++)
        if ((uint64_t)clients[i] >= (uint64_t)ndata)
            return -1;
    double s1 = acc[0], s2 = acc[1], top_step = acc[2], top_out = acc[3];
    for (int64_t i = 0; i < n; i++) {
        /* The entries are gathered at random from a row that may have left the cache,
         * and each draw is a chain of dependent steps: ask for the entry early. */
        if (i + PREFETCH < n)
            __builtin_prefetch(&data[clients[i + PREFETCH]]);
        uint64_t r = next64(st);
        int idx = r & 0xff;
        r >>= 8;
        uint64_t rabs = (r >> 1) & 0x000fffffffffffffULL;
        double x = rabs * wi_double[idx];  /* >= 0: the sign is its top bit */
        uint64_t bits;
        memcpy(&bits, &x, sizeof bits);
        bits |= (r & 0x1) << 63;
        memcpy(&x, &bits, sizeof x);
        if (rabs >= ki_double[idx])
            x = slow(st, next64, nextd, rabs, idx, x);
        double step = rint(x * sigma);
        s1 += step;
        s2 += step * step;
        double a = fabs(step);
        top_step = a > top_step ? a : top_step;
        /* unsigned: the ring's sum wraps, and a signed overflow is undefined */
        uint64_t v = (uint64_t)(int64_t)data[clients[i]] + (uint64_t)(int64_t)step;
        double b = fabs((double)(int64_t)v);
        top_out = b > top_out ? b : top_out;
        out[i] = (int64_t)v;
    }
    acc[0] = s1;
    acc[1] = s2;
    acc[2] = top_step;
    acc[3] = top_out;
    return 0;
}
