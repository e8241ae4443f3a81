/* The numerics of the wire (hosts/quantize.py, hosts/numerics.py): dtypes widened to double and
 * rounded back to nearest, block floating point, order-preserving int32. Every function here
 * gives the same bits as its Python counterpart (tests/hosts/test_engine_numerics.py).
 */
#include "internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

static double half_to_double(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    double v;
    if (exp == 0)
        v = ldexp(mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexp(mant | 0x400, exp - 25);
    return sign ? -v : v;
}

static double bfloat_to_double(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* `d` rounded to nearest (ties to even) in the binary format of `mbits` fraction bits and
 * `ebits` exponent bits, as its bits: what numpy's astype(float16/float32) and ml_dtypes'
 * bfloat16 give, done in integers so no C cast decides what an out-of-range value becomes. */
static uint32_t round_to_format(double d, int mbits, int ebits)
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    uint32_t sign = (uint32_t)(b >> 63) << (mbits + ebits);
    int dexp = (int)((b >> 52) & 0x7FF);
    uint64_t frac = b & ((UINT64_C(1) << 52) - 1);
    uint32_t inf = ((UINT32_C(1) << ebits) - 1) << mbits;
    if (dexp == 0x7FF)               /* inf stays inf; a NaN stays a (quiet) NaN */
        return sign | inf | (frac ? (UINT32_C(1) << (mbits - 1)) | (uint32_t)(frac >> (52 - mbits)) : 0);
    if (dexp == 0)                   /* zero, or a double subnormal: far below every target's half unit */
        return sign;
    int bias = (1 << (ebits - 1)) - 1;
    int emin = 1 - bias;
    int e = dexp - 1023;             /* |d| = sig * 2^(e - 52) */
    uint64_t sig = frac | (UINT64_C(1) << 52);
    int q = (e < emin ? emin : e) - mbits;      /* the exponent of the target's last place */
    int shift = q - (e - 52);                   /* > 0: the target has fewer bits */
    if (shift > 53)                  /* below half the last place, ties included */
        return sign;
    uint64_t n = sig >> shift;
    uint64_t rem = sig & ((UINT64_C(1) << shift) - 1);
    uint64_t half = UINT64_C(1) << (shift - 1);
    if (rem > half || (rem == half && (n & 1)))
        n++;
    if (n == 0)
        return sign;
    if (n >> (mbits + 1)) {          /* rounded up into the next binade: n was 2^(mbits+1) */
        n >>= 1;
        q++;
    }
    if (n < (UINT64_C(1) << mbits))  /* subnormal (q is emin - mbits) */
        return sign | (uint32_t)n;
    if (q + mbits > bias)
        return sign | inf;
    return sign | ((uint32_t)(q + mbits + bias) << mbits) | ((uint32_t)n & ((UINT32_C(1) << mbits) - 1));
}

void eng_widen(int dtype, const void *data, int64_t count, double *out)
{
    switch (dtype) {
    case ENG_DTYPE_INT32:
        for (int64_t i = 0; i < count; i++)
            out[i] = ((const int32_t *)data)[i];
        break;
    case ENG_DTYPE_FLOAT32:
        for (int64_t i = 0; i < count; i++)
            out[i] = ((const float *)data)[i];
        break;
    case ENG_DTYPE_FLOAT16:
        for (int64_t i = 0; i < count; i++)
            out[i] = half_to_double(((const uint16_t *)data)[i]);
        break;
    case ENG_DTYPE_BFLOAT16:
        for (int64_t i = 0; i < count; i++)
            out[i] = bfloat_to_double(((const uint16_t *)data)[i]);
        break;
    }
}

void eng_narrow(int dtype, const double *values, int64_t count, void *out)
{
    switch (dtype) {
    case ENG_DTYPE_INT32:            /* not used for sums: int32 never goes through doubles */
        for (int64_t i = 0; i < count; i++)
            ((int32_t *)out)[i] = (int32_t)values[i];
        break;
    case ENG_DTYPE_FLOAT32:
        /* A double whose float is normal and finite converts exactly as IEEE 754 rounds (to
           nearest, ties to even) whatever the FPU's flush flags: the hardware does those, 5x
           faster; the integer path does the edges (subnormal, overflow, inf, nan, zero). */
        for (int64_t i = 0; i < count; i++) {
            double a = fabs(values[i]);
            if (a >= FLT_MIN && a < FLT_MAX) {
                float f = (float)values[i];
                memcpy((uint32_t *)out + i, &f, sizeof f);
            } else {
                ((uint32_t *)out)[i] = round_to_format(values[i], 23, 8);
            }
        }
        break;
    case ENG_DTYPE_FLOAT16:
        for (int64_t i = 0; i < count; i++)
            ((uint16_t *)out)[i] = (uint16_t)round_to_format(values[i], 10, 5);
        break;
    case ENG_DTYPE_BFLOAT16:
        for (int64_t i = 0; i < count; i++)
            ((uint16_t *)out)[i] = (uint16_t)round_to_format(values[i], 7, 8);
        break;
    }
}

int eng_headroom_bits(int num_workers)
{
    int bits = 0;
    while ((1 << bits) < num_workers)
        bits++;
    return bits;
}

int quantize_scale(int num_workers, int exponent)
{
    return WIRE_BITS - eng_headroom_bits(num_workers) - exponent;
}

/* The smallest E (within int8, +1) with every |x| < 2^E; EXPONENT_MIN for an all-zero row,
 * EXPONENT_MAX + 1 for a row with inf or nan (hosts/quantize.py chunk_exponents). */
int chunk_exponent(const double *row, int64_t k)
{
    double maxabs = 0.0;
    for (int64_t i = 0; i < k; i++) {
        if (!isfinite(row[i]))
            return EXPONENT_MAX + 1;
        double a = fabs(row[i]);
        if (a > maxabs)
            maxabs = a;
    }
    if (maxabs == 0.0)
        return EXPONENT_MIN;
    int e;
    frexp(maxabs, &e);
    return e < EXPONENT_MIN + 1 ? EXPONENT_MIN + 1 : e > EXPONENT_MAX + 1 ? EXPONENT_MAX + 1 : e;
}

void eng_chunk_exponents(const double *rows, int64_t m, int64_t k, int16_t *out)
{
    for (int64_t c = 0; c < m; c++)
        out[c] = (int16_t)chunk_exponent(rows + c * k, k);
}

/* q = rint(x * 2^s), s = 30 - ceil(log2 N) - E, for a row that fits E (its chunk_exponent, `fit`,
 * is at most E): 1; else zeros and 0 (a value at or above 2^E, or not finite). Scaling by a
 * power of two is exact here: float32 and narrower values times at most 2^157 stay normal doubles. */
int quantize_row(const double *row, int64_t k, int fit, int exponent, int num_workers, int32_t *q)
{
    if (fit > exponent) {
        memset(q, 0, (size_t)k * sizeof *q);
        return 0;
    }
    double scale = ldexp(1.0, quantize_scale(num_workers, exponent));
    for (int64_t i = 0; i < k; i++)
        q[i] = (int32_t)rint(row[i] * scale);
    return 1;
}

void eng_quantize(const double *rows, int64_t m, int64_t k, const int16_t *exponents, int num_workers,
                  int32_t *q, uint8_t *fits)
{
    for (int64_t c = 0; c < m; c++)
        fits[c] = (uint8_t)quantize_row(rows + c * k, k, chunk_exponent(rows + c * k, k), exponents[c],
                                        num_workers, q + c * k);
}

void eng_dequantize(const int32_t *sums, int64_t m, int64_t k, const int16_t *exponents, int num_workers,
                    double *out)
{
    for (int64_t c = 0; c < m; c++) {
        double unit = ldexp(1.0, -quantize_scale(num_workers, exponents[c]));
        for (int64_t i = 0; i < k; i++)
            out[c * k + i] = sums[c * k + i] * unit;
    }
}

/* float32 bits as int32 whose signed order is the floats' order (hosts/numerics.py to_ordered);
 * its own inverse. */
void eng_to_ordered(const int32_t *bits, int64_t count, int32_t *out)
{
    for (int64_t i = 0; i < count; i++)
        out[i] = bits[i] < 0 ? bits[i] ^ INT32_C(0x7FFFFFFF) : bits[i];
}
