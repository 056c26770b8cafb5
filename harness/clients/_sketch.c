/* The sparse sketch's columns and a chunk's grouping by accumulator, in one pass each.
 *
 * ltm_distinct_picks is picks.NumpyLoops.picks (Floyd's algorithm over the public words,
 * then the cyclic shift, then the sign's accumulator) step for step, client by client
 * instead of step by step over thousands of clients: the same integers, bit for bit.
 * ltm_group_slots is a stable counting sort of a chunk's slots by accumulator (what
 * numpy's radix sort of them gives), with the slot counts per accumulator.
 * Loaded with ctypes: no Python object is touched here.
 */
#include <stdint.h>
#include <string.h>

/* The calling convention below: picks.py loads the library only if this matches. */
int ltm_sketch_abi(void) { return 1; }

/* words: (k, s) uint64, a client's s words together; out: (s, k) int64. taken: m zero
 * bytes, left zero; local: s int64 of scratch. Needs 1 <= s <= m < 2^32. */
void ltm_distinct_picks(const uint64_t *words, int64_t k, int64_t s, int64_t m,
                        int accumulators, uint8_t *taken, int64_t *local, int64_t *out)
{
    for (int64_t j = 0; j < k; j++) {
        const uint64_t *w = words + j * s;
        for (int64_t t = 0; t < s; t++) {
            /* step t draws below m - s + t + 1; a clash takes m - s + t, never taken yet */
            uint64_t top = (uint64_t)(m - s + 1 + t);
            int64_t pick = (int64_t)(((w[t] & 0xFFFFFFFFULL) * top) >> 32);
            /* without a branch: a clash is as likely as not late in the column */
            int64_t clash = taken[pick];
            pick += ((m - s + t) - pick) & -clash;
            taken[pick] = 1;
            local[t] = pick;
        }
        int64_t shift = (int64_t)((((w[0] >> 32) & 0x7FFFFFFFULL) * (uint64_t)m) >> 31);
        for (int64_t t = 0; t < s; t++) {
            int64_t c = local[t];
            taken[c] = 0;
            c += shift;
            c -= c >= m ? m : 0;
            if (accumulators)  /* a top bit of 0 is sign -1: accumulator bucket + m */
                c += (int64_t)(((w[t] >> 63) ^ 1) * (uint64_t)m);
            out[t * k + j] = c;
        }
    }
}

/* acc: (s, clients) accumulators in [0, accs). counts: accs int64; order: s * clients
 * int64, each grouped slot's client. Returns 0, or -1 at an accumulator out of range
 * (before anything is written to order). */
int ltm_group_slots(const int64_t *acc, int64_t s, int64_t clients, int64_t accs,
                    int64_t *counts, int64_t *order)
{
    int64_t n = s * clients;
    memset(counts, 0, (size_t)accs * sizeof *counts);
    for (int64_t i = 0; i < n; i++) {
        if ((uint64_t)acc[i] >= (uint64_t)accs)
            return -1;
        counts[acc[i]]++;
    }
    /* the counts become each run's next free place, then back into counts */
    int64_t run = 0;
    for (int64_t a = 0; a < accs; a++) {
        int64_t c = counts[a];
        counts[a] = run;
        run += c;
    }
    for (int64_t t = 0; t < s; t++) {
        const int64_t *row = acc + t * clients;
        for (int64_t j = 0; j < clients; j++)
            order[counts[row[j]]++] = j;
    }
    int64_t start = 0;
    for (int64_t a = 0; a < accs; a++) {
        int64_t end = counts[a];
        counts[a] = end - start;
        start = end;
    }
    return 0;
}
