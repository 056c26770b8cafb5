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
 * Where the CPU has AVX2 the fast path takes four words at once, and where all
 * four pass it (about 19 blocks of four in 20) the four values are finished
 * together: entries and steps below 2^50 are exact as doubles, so their sums
 * convert to the same int64 the scalar loop makes (checked for the call's sigma
 * and entries first; otherwise each value is finished alone). The first draw that
 * fails and the block's last few go through the scalar draw, so the words are taken
 * in numpy's order and the values are the scalar loop's, bit for bit; the sum of
 * squares is added up in another order.
 *
 * Loaded with ctypes: no Python object is touched here.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LTM_AVX2 1
#endif

#include "_ziggurat_tables.h"

#define PREFETCH 24

/* The calling convention below: gaussian.py loads the library only if this matches
 * (a library built from an older source is left unloaded, never called wrongly). */
int ltm_gaussian_abi(void) { return 4; }

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

/* The running sums of a call: the steps' sum and sum of squares, the largest |step|,
 * the smallest and largest value written. */
typedef struct {
    double s1, s2, top_step;
    int64_t lo, hi;
} sums_t;

/* One draw from words[*pos..nwords), numpy's: its fast path, or its wedge and tail.
 * Returns 0, *pos unchanged, if the words ran out within it. */
static inline __attribute__((always_inline)) int
draw(const uint64_t *words, int64_t nwords, int64_t *pos, double sigma, double *step)
{
    int64_t p = *pos;
    if (p >= nwords)
        return 0;
    uint64_t r = words[p++];
    int idx = r & 0xff;
    r >>= 8;
    uint64_t rabs = (r >> 1) & 0x000fffffffffffffULL;
    double x = rabs * wi_double[idx];  /* >= 0: the sign is its top bit */
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits |= (r & 0x1) << 63;
    memcpy(&x, &bits, sizeof x);
    if (rabs >= ki_double[idx]) {
        words_t w = {words, p, nwords};
        int short_of_words = 0;
        x = slow(&w, &short_of_words, rabs, idx, x);
        if (short_of_words)
            return 0;  /* the draw takes no word: it is drawn again whole */
        p = w.pos;
    }
    *pos = p;
    *step = rint(x * sigma);
    return 1;
}

/* Value i: its client's entry plus the step, written and summed. */
static inline __attribute__((always_inline)) void
put(double step, const double *data, const int64_t *clients, int64_t i, int64_t n,
    int64_t *out, sums_t *a)
{
    /* The entries are gathered at random from a row that may have left the cache,
     * and each draw is a chain of dependent steps: ask for the entry early. */
    if (i + PREFETCH < n)
        __builtin_prefetch(&data[clients[i + PREFETCH]]);
    a->s1 += step;
    a->s2 += step * step;
    double m = fabs(step);
    a->top_step = m > a->top_step ? m : a->top_step;
    /* unsigned: the ring's sum wraps, and a signed overflow is undefined */
    int64_t v = (int64_t)((uint64_t)(int64_t)data[clients[i]] + (uint64_t)(int64_t)step);
    a->lo = v < a->lo ? v : a->lo;
    a->hi = v > a->hi ? v : a->hi;
    out[i] = v;
}

static int64_t add_scalar(const uint64_t *words, int64_t nwords, int64_t *used, double sigma,
                          const double *data, const int64_t *clients, int64_t n,
                          int64_t *out, sums_t *a)
{
    int64_t pos = 0, i = 0;
    double step;
    for (; i < n && draw(words, nwords, &pos, sigma, &step); i++)
        put(step, data, clients, i, n, out, a);
    *used = pos;
    return i;
}

#ifdef LTM_AVX2
/* Below this, an integer and a sum of two are exact as doubles and convert to int64
 * by adding 1.5 * 2^52 (the four-value path's values). */
#define EXACT 1125899906842624.0 /* 2^50 */

__attribute__((target("avx2"))) static int64_t
add_avx2(const uint64_t *words, int64_t nwords, int64_t *used, double sigma,
         const double *data, const int64_t *clients, int64_t n, int64_t *out, sums_t *a,
         int exact)
{
    const __m256i low8 = _mm256_set1_epi64x(0xff);
    const __m256i mantissa = _mm256_set1_epi64x(0x000fffffffffffffLL);
    const __m256i sign = _mm256_set1_epi64x((long long)0x8000000000000000ULL);
    /* rabs < 2^52 as a double, exactly: 2^52's bits with rabs in the mantissa, less 2^52 */
    const __m256i two52_bits = _mm256_set1_epi64x(0x4330000000000000LL);
    const __m256d two52 = _mm256_set1_pd(4503599627370496.0);
    /* an integer |v| < 2^51 as int64: the bits of v + 1.5 * 2^52, less those of 1.5 * 2^52 */
    const __m256d magic = _mm256_set1_pd(6755399441055744.0);
    const __m256i magic_bits = _mm256_set1_epi64x(0x4338000000000000LL);
    const __m256d vsigma = _mm256_set1_pd(sigma);
    __m256d s1 = _mm256_setzero_pd(), s2 = s1, top = s1, lo = s1, hi = s1;
    int64_t pos = 0, i = 0;
    double steps[4];
    while (i < n) {
        if (i + 4 <= n && pos + 4 <= nwords) {
            __m256i r = _mm256_loadu_si256((const __m256i *)(words + pos));
            __m256i idx = _mm256_and_si256(r, low8);
            __m256i rabs = _mm256_and_si256(_mm256_srli_epi64(r, 9), mantissa);
            /* The layers' bounds and widths are loaded one by one: here four loads
             * and inserts take less time than one gather. */
            uint64_t ix[4];
            _mm256_storeu_si256((__m256i *)ix, idx);
            __m256i ki = _mm256_set_epi64x((long long)ki_double[ix[3]], (long long)ki_double[ix[2]],
                                           (long long)ki_double[ix[1]], (long long)ki_double[ix[0]]);
            /* both below 2^52: the signed comparison is the unsigned one */
            int pass = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(ki, rabs)));
            int k = pass == 15 ? 4 : __builtin_ctz(~pass);  /* the draws before a failure */
            if (k) {
                __m256d wi = _mm256_set_pd(wi_double[ix[3]], wi_double[ix[2]],
                                           wi_double[ix[1]], wi_double[ix[0]]);
                __m256d x = _mm256_sub_pd(
                    _mm256_castsi256_pd(_mm256_or_si256(rabs, two52_bits)), two52);
                x = _mm256_mul_pd(x, wi);
                /* the sign is the word's bit 8 */
                __m256d neg = _mm256_castsi256_pd(
                    _mm256_and_si256(_mm256_slli_epi64(r, 55), sign));
                __m256d st = _mm256_round_pd(_mm256_mul_pd(_mm256_or_pd(x, neg), vsigma),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                if (k == 4 && exact) {
                    const int64_t *who = clients + i;
                    __m256d v = _mm256_add_pd(
                        _mm256_set_pd(data[who[3]], data[who[2]], data[who[1]], data[who[0]]), st);
                    s1 = _mm256_add_pd(s1, st);
                    s2 = _mm256_add_pd(s2, _mm256_mul_pd(st, st));
                    top = _mm256_max_pd(top, _mm256_andnot_pd(_mm256_castsi256_pd(sign), st));
                    lo = _mm256_min_pd(lo, v);
                    hi = _mm256_max_pd(hi, v);
                    _mm256_storeu_si256((__m256i *)(out + i), _mm256_sub_epi64(
                        _mm256_castpd_si256(_mm256_add_pd(v, magic)), magic_bits));
                    i += 4;
                    pos += 4;
                    continue;
                }
                _mm256_storeu_pd(steps, st);
                for (int j = 0; j < k; j++)
                    put(steps[j], data, clients, i + j, n, out, a);
                i += k;
                pos += k;
                if (k == 4)
                    continue;
            }
        }
        double step;
        if (!draw(words, nwords, &pos, sigma, &step))
            break;
        put(step, data, clients, i, n, out, a);
        i++;
    }
    double l[4];
    _mm256_storeu_pd(l, s1);
    a->s1 += (l[0] + l[1]) + (l[2] + l[3]);
    _mm256_storeu_pd(l, s2);
    a->s2 += (l[0] + l[1]) + (l[2] + l[3]);
    _mm256_storeu_pd(l, top);
    for (int j = 0; j < 4; j++)
        a->top_step = l[j] > a->top_step ? l[j] : a->top_step;
    _mm256_storeu_pd(l, lo);
    for (int j = 0; j < 4; j++)
        a->lo = (int64_t)l[j] < a->lo ? (int64_t)l[j] : a->lo;
    _mm256_storeu_pd(l, hi);
    for (int j = 0; j < 4; j++)
        a->hi = (int64_t)l[j] > a->hi ? (int64_t)l[j] : a->hi;
    *used = pos;
    return i;
}

/* Whether every value the four-value path makes is exact: entries and steps below
 * 2^50 (the fast path's |z| is below its largest layer's edge). */
static int exact_below(double sigma, const double *data, int64_t ndata)
{
    static double edge = -1.0;  /* the tables' largest edge, found once */
    if (edge < 0.0) {
        double top = 0.0;
        for (int j = 0; j < 256; j++) {
            double e = ki_double[j] * wi_double[j];
            top = e > top ? e : top;
        }
        edge = top;
    }
    if (!(fabs(sigma) * edge + 1.0 < EXACT))
        return 0;
    for (int64_t j = 0; j < ndata; j++)
        if (!(fabs(data[j]) < EXACT))
            return 0;
    return 1;
}
#endif

/* 1 where the four-word path is used; set = 0 turns it off, 1 back on where the CPU
 * has AVX2, -1 only asks (the tests compare both paths). */
static int vector_path = -1;

int ltm_gaussian_vector(int set)
{
#ifdef LTM_AVX2
    if (vector_path < 0 || set >= 0) {
        __builtin_cpu_init();
        vector_path = set != 0 && __builtin_cpu_supports("avx2");
    }
    return vector_path;
#else
    (void)set;
    return 0;
#endif
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
    sums_t a = {acc[0], acc[1], acc[2], 0, 0};
    int64_t made;
#ifdef LTM_AVX2
    if (ltm_gaussian_vector(-1))
        made = add_avx2(words, nwords, used, sigma, data, clients, n, out, &a,
                        exact_below(sigma, data, ndata));
    else
#endif
        made = add_scalar(words, nwords, used, sigma, data, clients, n, out, &a);
    /* |out| at its largest is that of the largest or the smallest value */
    double top_lo = fabs((double)a.lo), top_hi = fabs((double)a.hi);
    double top_out = top_lo > top_hi ? top_lo : top_hi;
    acc[0] = a.s1;
    acc[1] = a.s2;
    acc[2] = a.top_step;
    acc[3] = top_out > acc[3] ? top_out : acc[3];
    return made;
}
