/* exl3_matvec.c: the CPU reference product y = W x of an EXL3 layer through its Hadamard scheme,
 * y = ((((x . suh) Hk) W^) Hn) . svh + bias, decoding one tile at a time (W is never held). */
#include "engine/model/exl3.h"

#include <stdlib.h>

#include "engine/model/hadamard.h"

glm_status exl3_matmul(const exl3_tensor *t, const float *x, float *y, int rows, glm_error *err)
{
    glm_status st = exl3_check(t, err);
    if (st != GLM_OK)
        return st;
    if (rows < 0)
        return glm_error_set(err, GLM_ERR_ARG, "EXL3 product: %d rows", rows);
    size_t k = (size_t)t->in, n = (size_t)t->out, r = (size_t)rows;
    double *xh = malloc(r * k * sizeof *xh);
    double *z = calloc(r * n, sizeof *z);
    float *su = malloc(k * sizeof *su);
    float *sv = malloc(n * sizeof *sv);
    float *tilef = malloc(EXL3_TILE_VALUES * sizeof *tilef);
    if (!xh || !z || !su || !sv || !tilef) {
        st = glm_error_set(err, GLM_ERR_NOMEM, "EXL3 product %zu x %zu, %zu rows: out of memory",
                           k, n, r);
        goto done;
    }
    exl3_input_scales(t, su);
    exl3_output_scales(t, sv);
    for (size_t i = 0; i < r; i++) {
        for (size_t c = 0; c < k; c++)
            xh[i * k + c] = (double)x[i * k + c] * (double)su[c];
        for (size_t b = 0; b < k; b += HADAMARD_BLOCK)
            hadamard128_f64(xh + i * k + b);
    }
    size_t per_tile = (size_t)EXL3_TILE * (size_t)t->bits;
    uint16_t tile[EXL3_TILE_VALUES];
    for (size_t tk = 0; tk < k / EXL3_TILE; tk++)
        for (size_t tn = 0; tn < n / EXL3_TILE; tn++) {
            exl3_decode_tile(t->trellis + (tk * (n / EXL3_TILE) + tn) * per_tile, t->bits,
                             t->codebook, tile);
            for (int v = 0; v < EXL3_TILE_VALUES; v++)
                tilef[v] = exl3_f16_to_f32(tile[v]);
            for (size_t i = 0; i < r; i++) {
                const double *xr = xh + i * k + tk * EXL3_TILE;
                double *zr = z + i * n + tn * EXL3_TILE;
                for (int a = 0; a < EXL3_TILE; a++)
                    for (int b = 0; b < EXL3_TILE; b++)
                        zr[b] += xr[a] * (double)tilef[a * EXL3_TILE + b];
            }
        }
    for (size_t i = 0; i < r; i++) {
        double *zr = z + i * n;
        for (size_t b = 0; b < n; b += HADAMARD_BLOCK)
            hadamard128_f64(zr + b);
        for (size_t j = 0; j < n; j++) {
            double v = zr[j] * (double)sv[j];
            if (t->bias)
                v += (double)exl3_f16_to_f32(t->bias[j]);
            y[i * n + j] = (float)v;
        }
    }
done:
    free(xh);
    free(z);
    free(su);
    free(sv);
    free(tilef);
    return st;
}

glm_status exl3_matvec(const exl3_tensor *t, const float *x, float *y, glm_error *err)
{
    return exl3_matmul(t, x, y, 1, err);
}
