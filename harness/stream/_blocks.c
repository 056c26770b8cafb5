/* A chunk's grouped shares copied into the blocks of the fast program's share file.
 *
 * ltm_place_blocks is placing.NumpyPlacer.place step for step: the same bytes in the
 * same places. numpy pays a few calls per accumulator and block (about 15 us each,
 * 200 accumulators a chunk); here a block is one pass of d column copies.
 * Loaded with ctypes: no Python object is touched here.
 */
#include <stdint.h>
#include <string.h>

/* The calling convention below: placing.py loads the library only if this matches. */
int ltm_blocks_abi(void) { return 1; }

/* rows rows of a column-major run (d columns, column j at src + j * stride) into
 * row-major rows of d shares, dst_step bytes apart: a row written whole, read from d
 * streams that each go forward. A fixed width lets the compiler move a share in one
 * or two registers. */
#define COPY_ROWS(W)                                                                    \
    for (int64_t r = 0; r < rows; r++) {                                                \
        uint8_t *t = dst + r * dst_step;                                                \
        const uint8_t *s = src + r * (W);                                               \
        for (int64_t j = 0; j < d; j++)                                                 \
            memcpy(t + j * (W), s + j * stride, (W));                                   \
    }

static void copy_rows(uint8_t *dst, int64_t dst_step, const uint8_t *src, int64_t stride,
                      int64_t rows, int64_t d, int64_t width)
{
    if (width == 8)
        COPY_ROWS(8)
    else if (width == 16)
        COPY_ROWS(16)
    else
        COPY_ROWS(width)
}

/* A carried row into its block: words at a time, not a library call per row. */
static void copy_row(uint8_t *dst, const uint8_t *src, int64_t bytes)
{
    for (int64_t i = 0; i < bytes; i += 8)
        memcpy(dst + i, src + i, 8);
}

/* src: (d, slots) shares of width bytes, slots grouped by accumulator with counts[a]
 * of accumulator a. carry: (accs, R, d) shares, held[a] of them accumulator a's rows
 * carried from earlier chunks. building: (R, K, d) shares, the engine chunk being made,
 * its first filled blocks in place, block_acc their accumulators. state: where this
 * chunk's placing stands (accumulator, its run's first slot, its rows placed), zeros
 * at first. Places blocks until the engine chunk is full or the chunk is placed, and
 * returns how many blocks are in place: K means call again, once the chunk is written. */
int64_t ltm_place_blocks(const uint8_t *src, int64_t d, int64_t slots, int64_t width,
                         const int64_t *counts, int64_t accs, int64_t *state,
                         int64_t *held, uint8_t *carry, int64_t R,
                         uint8_t *building, int64_t K, int64_t filled, int64_t *block_acc)
{
    const int64_t stride = slots * width, row = d * width, brow = K * row;
    int64_t a = state[0], first = state[1], p = state[2];
    for (; a < accs; first += counts[a], a++, p = 0) {
        int64_t c = counts[a];
        const uint8_t *run = src + first * width;
        uint8_t *own = carry + a * R * row;
        if (p == 0) {
            int64_t h = held[a];
            if (h + c < R) {
                copy_rows(own + h * row, row, run, stride, c, d, width);
                held[a] = h + c;
                continue;
            }
            if (h) {  /* the carried rows, then the run's first, make one block */
                uint8_t *block = building + filled * row;
                for (int64_t r = 0; r < h; r++)
                    copy_row(block + r * brow, own + r * row, row);
                p = R - h;
                copy_rows(block + h * brow, brow, run, stride, p, d, width);
                held[a] = 0;
                block_acc[filled++] = a;
                if (filled == K)
                    goto full;
            }
        }
        while (c - p >= R) {
            copy_rows(building + filled * row, brow, run + p * width, stride, R, d, width);
            p += R;
            block_acc[filled++] = a;
            if (filled == K)
                goto full;
        }
        copy_rows(own, row, run + p * width, stride, c - p, d, width);
        held[a] = c - p;
    }
    state[0] = a;
    state[1] = first;
    state[2] = 0;
    return filled;
full:
    state[0] = a;
    state[1] = first;
    state[2] = p;
    return filled;
}
