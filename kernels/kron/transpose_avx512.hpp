// In-register transposes for the AVX-512 build: the right-product gather turns LW rows of a
// block into lanes, and doing it 16x16 (8x8 for double) in registers instead of element by
// element keeps the loads full-width and the stores within a few cache lines.
#ifndef KRONLINALG_TRANSPOSE_AVX512_HPP
#define KRONLINALG_TRANSPOSE_AVX512_HPP
#include <immintrin.h>

namespace kl {
// 16x16 float transpose in registers: r[i] holds row i; afterwards r[i] holds column i.
static inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 4; ++c) {
      t[8 * i + c] = _mm512_shuffle_f32x4(r[8 * i + c], r[8 * i + 4 + c], 0x88);
      t[8 * i + 4 + c] = _mm512_shuffle_f32x4(r[8 * i + c], r[8 * i + 4 + c], 0xdd);
    }
  for (int c = 0; c < 8; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[c + 8] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
  }
}
// 8x8 double transpose in registers.
static inline void transpose8(__m512d r[8]) {
  __m512d t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 2; ++c) {
      u[4 * i + c] = _mm512_shuffle_f64x2(t[4 * i + c], t[4 * i + 2 + c], 0x88);
      u[4 * i + 2 + c] = _mm512_shuffle_f64x2(t[4 * i + c], t[4 * i + 2 + c], 0xdd);
    }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_shuffle_f64x2(u[c], u[4 + c], 0x88);
    r[c + 4] = _mm512_shuffle_f64x2(u[c], u[4 + c], 0xdd);
  }
}

}  // namespace kl

#endif
