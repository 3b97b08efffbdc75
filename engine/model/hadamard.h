/* hadamard.h: the 128-point natural-order Sylvester Hadamard transform that EXL3 layers apply to
 * every 128-block of their inputs and outputs, scaled by 1/sqrt(128) so that it is its own inverse. */
#ifndef GLMCHAT_HADAMARD_H
#define GLMCHAT_HADAMARD_H

#include <stddef.h>

#define HADAMARD_BLOCK 128

/* v[0..127] <- v * H / sqrt(128), H[i][j] = (-1)^popcount(i & j). */
void hadamard128(float *v);

/* The same transform on each of the n / 128 consecutive blocks of v (n a multiple of 128). */
void hadamard128_blocks(float *v, size_t n);

/* The same on doubles, for references that must not lose precision. */
void hadamard128_f64(double *v);

#endif
