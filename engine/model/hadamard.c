/* hadamard.c: fast Walsh-Hadamard transform in natural (Sylvester) order over 128-blocks,
 * the rotation of the EXL3 weight format (research/exl3.md section 2.5). */
#include "engine/model/hadamard.h"

#include <math.h>

void hadamard128(float *v)
{
    for (int half = 1; half < HADAMARD_BLOCK; half <<= 1)
        for (int base = 0; base < HADAMARD_BLOCK; base += 2 * half)
            for (int i = base; i < base + half; i++) {
                float a = v[i];
                float b = v[i + half];
                v[i] = a + b;
                v[i + half] = a - b;
            }
    const float scale = (float)(1.0 / sqrt((double)HADAMARD_BLOCK));
    for (int i = 0; i < HADAMARD_BLOCK; i++)
        v[i] *= scale;
}

void hadamard128_blocks(float *v, size_t n)
{
    for (size_t off = 0; off + HADAMARD_BLOCK <= n; off += HADAMARD_BLOCK)
        hadamard128(v + off);
}

void hadamard128_f64(double *v)
{
    for (int half = 1; half < HADAMARD_BLOCK; half <<= 1)
        for (int base = 0; base < HADAMARD_BLOCK; base += 2 * half)
            for (int i = base; i < base + half; i++) {
                double a = v[i];
                double b = v[i + half];
                v[i] = a + b;
                v[i + half] = a - b;
            }
    const double scale = 1.0 / sqrt((double)HADAMARD_BLOCK);
    for (int i = 0; i < HADAMARD_BLOCK; i++)
        v[i] *= scale;
}
