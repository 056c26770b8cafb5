/* A block of Gaussian noise on the lattice, drawn and added in one pass.
 *
 * Each draw is numpy's Generator.standard_normal (random_standard_normal in
 * numpy/random/src/distributions/distributions.c: its ziggurat, its tables, its
 * wedge and its tail) over the words the caller's bit generator would give, in
 * their order: next_uint64 is the next word, next_double the next word's top 53
 * bits, as randomgen's AESCounter makes them. The caller hands the words over in
 * bulk (gaussian.py computes the generator's keystream with one cipher call), so
 * the same generator state gives the same normals, bit for bit. Only the sign is
 * applied without a branch (numpy's branch is mispredicted half the time); the
 * value is the same.
 *
 * out[j] = data[clients[j]] + rint(sigma * z_j), as 64-bit integers (mod 2^64);
 * acc += (sum of the steps, their sum of squares, max |step|, max |out|).
 * Loaded with ctypes: no Python object is touched here.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_ziggurat_tables.h"

#define PREFETCH 24

/* The calling convention below: gaussian.py loads the library only if this matches
 * (a library built from an older source is left unloaded, never called wrongly). */
int ltm_gaussian_abi(void) { return 3; }

typedef struct {
    const uint64_t *words;
    int64_t pos, end;
} words_t;

/* The next word; 0 when there is none left, with *out set (the draw is then void). */
static inline uint64_t next64(words_t *w, int *out)
{
    if (w->pos >= w->end) {
        *out = 1;
        return 0;
    }
    return w->words[w->pos++];
}

static inline double next_double(words_t *w, int *out)
{
    return (next64(w, out) >> 11) * (1.0 / 9007199254740992.0);
}

/* Where numpy's fast path fails (about once in 80): its wedge and tail, from the
 * word that failed. Sets *out if the words ran out first. */
static double __attribute__((noinline))
slow(words_t *w, int *out, uint64_t rabs, int idx, double x)
{
    for (;;) {
        if (*out)
            return 0.0;
        if (idx == 0) {
            for (;;) {
                double xx = -ZIGGURAT_NOR_INV_R * log1p(-next_double(w, out));
                double yy = -log1p(-next_double(w, out));
                if (*out)
                    return 0.0;
                if (yy + yy > xx * xx)
                    return ((rabs >> 8) & 0x1) ? -(ZIGGURAT_NOR_R + xx)
                                               : ZIGGURAT_NOR_R + xx;
            }
        }
        double u = next_double(w, out);
        if (*out)
            return 0.0;
        if (((fi_double[idx - 1] - fi_double[idx]) * u + fi_double[idx]) <
            exp(-0.5 * x * x))
            return x;
        /* rejected: numpy draws afresh */
        uint64_t r = next64(w, out);
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

/* words[0..nwords): the generator's next words. Draws until n values are made or
 * the words run out within a draw; returns the values made (their draws took *used
 * words; a draw the words did not complete took none), or -1 at the first index
 * outside data[0..ndata) (nothing read there, no word taken). */
int64_t ltm_add_gaussian(const uint64_t *words, int64_t nwords, int64_t *used,
                         double sigma, const double *data, int64_t ndata,
                         const int64_t *clients, int64_t n, int64_t *out, double *acc)
{
    for (int64_t i = 0; i < n; i++)
        if ((uint64_t)clients[i] >= (uint64_t)ndata)
            return -1;
    words_t w = {words, 0, nwords};
    int short_of_words = 0;
    double s1 = acc[0], s2 = acc[1], top_step = acc[2];
    /* |out| at its largest is that of the largest or the smallest value */
    int64_t lo = 0, hi = 0;
    int64_t pos = 0, i = 0;
    for (; i < n; i++) {
        /* The entries are gathered at random from a row that may have left the cache,
         * and each draw is a chain of dependent steps: ask for the entry early. */
        if (i + PREFETCH < n)
            __builtin_prefetch(&data[clients[i + PREFETCH]]);
        if (pos >= nwords)
            break;
        uint64_t r = words[pos++];
        int idx = r & 0xff;
        r >>= 8;
        uint64_t rabs = (r >> 1) & 0x000fffffffffffffULL;
        double x = rabs * wi_double[idx];  /* >= 0: the sign is its top bit */
        uint64_t bits;
        memcpy(&bits, &x, sizeof bits);
        bits |= (r & 0x1) << 63;
        memcpy(&x, &bits, sizeof x);
        if (rabs >= ki_double[idx]) {
            w.pos = pos;
            x = slow(&w, &short_of_words, rabs, idx, x);
            if (short_of_words) {
                pos--;  /* back to this draw's first word: it takes none */
                break;
            }
            pos = w.pos;
        }
        double step = rint(x * sigma);
        s1 += step;
        s2 += step * step;
        double a = fabs(step);
        top_step = a > top_step ? a : top_step;
        /* unsigned: the ring's sum wraps, and a signed overflow is undefined */
        int64_t v = (int64_t)((uint64_t)(int64_t)data[clients[i]] + (uint64_t)(int64_t)step);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        out[i] = v;
    }
    double top_lo = fabs((double)lo), top_hi = fabs((double)hi);
    double top_out = top_lo > top_hi ? top_lo : top_hi;
    acc[0] = s1;
    acc[1] = s2;
    acc[2] = top_step;
    acc[3] = top_out > acc[3] ? top_out : acc[3];
    *used = pos;
    return i;
}
