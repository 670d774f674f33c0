// The three products of a Linear layer, all computed by one blocked GEMM, C (+)= A·B, where A and B
// are strided views, so that transposes cost nothing but a different packing loop (except the
// forward of a few rows, a KV-cache decode step's, and one-row attention products: dot products,
// see "Few rows" and "One row of A" below):
//   forward  out  (M,N) = inp (M,K) · W^T       + bias     A = inp,    B(k,n) = W[n,k]
//   dinp     dinp (M,K) += dout (M,N) · W                  A = dout,   B = W
//   dweight  dW   (N,K) += dout^T (N,M) · inp (M,K)        A(n,m) = dout[m,n], B = inp
//
// Blocking follows BLIS (Goto's algorithm), simplified for the shapes of this model (K, N <= a few
// thousand): C is split into a few blocks of rows or of columns per thread (see run_gemm). For
// each NC-wide, KC-deep block of B the thread packs B once into its scratch as NR-column
// micro-panels (contiguous in the order the micro-kernel reads them, zero-padded at the edge) and
// then sweeps all its rows, MC at a time: the MC×KC block of A stays in L2 while the jr loop walks
// the B micro-panels (KC×NR, in L1); the micro-kernel keeps an MR×NR block of C in registers (MR
// broadcasts of A times NR/kWidth vectors of B per step of k). A is packed when its columns are
// contiguous (dout^T of the dweight product); when its rows are (inp, dout) it is read in place
// natively and packed in WebAssembly (kPackA).
//
// Every element of C is reduced in the same order (KC-slices in order, k ascending within one)
// whatever the tiling, so results are bit-identical for any thread count.
#include "matmul.h"

#include <algorithm>

#include "simd.h"

namespace tg {

namespace {

using namespace simd;

// Micro-tile shape per back end: MR rows × NV vectors of kWidth columns. MR×NV accumulators plus
// NV B vectors and a broadcast must fit in the register file (16 on AVX2 and WASM, 32 on AVX-512).
#if defined(TG_SIMD_AVX512)
constexpr int MR = 8, NV = 2;
#elif defined(TG_SIMD_AVX2)
constexpr int MR = 6, NV = 2;
#elif defined(TG_SIMD_WASM128)
constexpr int MR = 4, NV = 2;
#else
constexpr int MR = 4, NV = 4;
#endif
constexpr int NR = NV * kWidth;

// Whether A with contiguous rows (inp, dout) is packed too. In WebAssembly the packed kernel's
// single pointer and constant offsets pay for the packing (measured in Node: matmul 1.1-1.2x);
// natively the in-place rows are faster (x86 addressing handles the row pointers for free).
#if defined(TG_SIMD_WASM128)
constexpr bool kPackA = true;
#else
constexpr bool kPackA = false;
#endif

// Cache blocking: an MC×KC block of A (144 KiB) stays in L2, a KC×NR micro-panel of B (16 KiB on
// AVX2) in L1, and a KC×NC block of B (1 MiB, packed once per thread) in L2/L3, so that one pass
// covers N up to 1024 (every Linear of tiny..xl). 144 is a multiple of every MR, 1024 of every NR.
constexpr int64_t MC = 144, KC = 256, NC = 1024;
static_assert(MC % MR == 0 && NC % NR == 0, "tiles must hold whole micro-panels");
static_assert(KC * NC + MC * KC <= ThreadPool::kScratchFloats,
              "packed blocks must fit the scratch");

// Below this many flops per chunk a GEMM is not split across threads: the wake-up and the
// imbalance of a small split cost more than they save.
constexpr int64_t kMinFlopsPerChunk = int64_t(1) << 20;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A read-only strided view: element (i, j) is p[i * rs + j * cs].
struct View {
  const float* p;
  int64_t rs, cs;
};

// Packs columns [j0, j0+nb) × depth [p0, p0+kb) of B as NR-column micro-panels: panel q holds
// dst[q*kb*NR + p*NR + j] = B(p0+p, j0+q*NR+j), columns past nb zero. B(p, j) = b.p[p*b.rs +
// j*b.cs]; one of the strides is 1: row-major weight or activations (rows copied p by p, each read
// once, contiguously, and spread over the panels) or a transposed weight (gathered column by
// column).
void pack_b_block(float* dst, View b, int64_t p0, int64_t kb, int64_t j0, int64_t nb) {
  if (b.cs == 1) {
    for (int64_t p = 0; p < kb; p++) {
      const float* sp = b.p + (p0 + p) * b.rs + j0;
      float* d = dst + p * NR;
      for (int64_t jr = 0; jr < nb; jr += NR, d += kb * NR) {
        int64_t cols = std::min<int64_t>(NR, nb - jr);
        int64_t j = 0;
        for (; j < cols; j++) d[j] = sp[jr + j];
        for (; j < NR; j++) d[j] = 0.0f;
      }
    }
    return;
  }
  for (int64_t jr = 0; jr < nb; jr += NR, dst += kb * NR) {
    int64_t cols = std::min<int64_t>(NR, nb - jr);
    for (int64_t j = 0; j < cols; j++) {
      const float* sj = b.p + p0 * b.rs + (j0 + jr + j) * b.cs;
      for (int64_t p = 0; p < kb; p++) dst[p * NR + j] = sj[p * b.rs];
    }
    for (int64_t j = cols; j < NR; j++)
      for (int64_t p = 0; p < kb; p++) dst[p * NR + j] = 0.0f;
  }
}

// Packs rows [i0, i1) × depth [p0, p0+kb) of A as MR-row micro-panels: dst[(i - i0)*kb + p*MR +
// i%MR], rows past i1 zero, so the micro-kernel reads A from one pointer at constant offsets.
// Always done for an A with unit row stride (dout^T in the dweight product): read in place, such an
// A walks MR adjacent floats per step at a stride of a whole dout row, a few KiB, and the rows of
// one micro-panel fall into the same L1 sets and evict each other. For an A with contiguous rows,
// only where kPackA says so (see there).
void pack_a_block(float* dst, View a, int64_t i0, int64_t i1, int64_t p0, int64_t kb) {
  if (a.rs == 1) {
    // p outer: each source row segment [i0, i1) is read once, contiguously (i inner), and spread
    // over the micro-panels; a panel at a time instead re-read every row once per panel.
    for (int64_t p = 0; p < kb; p++) {
      const float* sp = a.p + (p0 + p) * a.cs + i0;
      float* d = dst + p * MR;
      for (int64_t ir = 0; ir < i1 - i0; ir += MR, d += MR * kb) {
        int64_t rows = std::min<int64_t>(MR, i1 - i0 - ir);
        int64_t i = 0;
        for (; i < rows; i++) d[i] = sp[ir + i];
        for (; i < MR; i++) d[i] = 0.0f;
      }
    }
    return;
  }
  // Contiguous rows: each row segment is read once, contiguously, and scattered at stride MR.
  for (int64_t ir = 0; ir < i1 - i0; ir += MR, dst += MR * kb) {
    int64_t rows = std::min<int64_t>(MR, i1 - i0 - ir);
    for (int64_t i = 0; i < MR; i++) {
      if (i >= rows) {
        for (int64_t p = 0; p < kb; p++) dst[p * MR + i] = 0.0f;
        continue;
      }
      const float* sp = a.p + (i0 + ir + i) * a.rs + p0 * a.cs;
      for (int64_t p = 0; p < kb; p++) dst[p * MR + i] = sp[p];
    }
  }
}

// c (rows×cols of an MR×NR tile, row stride ldc) = acc + bias   if overwrite (bias may be null)
//                                                 += acc         otherwise
inline void store_tile(const vf (&acc)[MR][NV], float* c, int64_t ldc, int64_t rows, int64_t cols,
                       const float* bias, bool overwrite) {
  if (rows == MR && cols == NR) {
    for (int i = 0; i < MR; i++)
      for (int v = 0; v < NV; v++) {
        float* cp = c + i * ldc + v * kWidth;
        vf r = acc[i][v];
        if (!overwrite)
          r = add(load(cp), r);
        else if (bias)
          r = add(r, load(bias + v * kWidth));
        store(cp, r);
      }
    return;
  }
  float tile[MR * NR];  // edge tile: spill, then copy the valid part
  for (int i = 0; i < MR; i++)
    for (int v = 0; v < NV; v++) store(tile + i * NR + v * kWidth, acc[i][v]);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      float r = tile[i * NR + j];
      float* cp = c + i * ldc + j;
      if (!overwrite)
        *cp = *cp + r;
      else
        *cp = bias ? r + bias[j] : r;
    }
}

// One step of k for the MR×NR tile: MR broadcasts of A (a[i]) times NV vectors of B (b[v*kWidth]).
inline void tile_step(vf (&acc)[MR][NV], const float* a, const float* b) {
  vf bv[NV];
  for (int v = 0; v < NV; v++) bv[v] = load(b + v * kWidth);
  for (int i = 0; i < MR; i++) {
    vf ai = set1(a[i]);
    for (int v = 0; v < NV; v++) acc[i][v] = fma(ai, bv[v], acc[i][v]);
  }
}

// The tile (see store_tile) from A rows read in place: A(i, p) = a[i][p * a_cs] (row i of the tile;
// rows past `rows` repeat the last row and are computed but not stored), b packed (kb, NR). Its MR
// rows are MR sequential streams that the caches and prefetchers serve well.
// Not inlined: on its own the compiler keeps all MR row pointers in registers.
__attribute__((noinline)) void micro_kernel(int64_t kb, const float* const* a, int64_t a_cs,
                                            const float* b, float* c, int64_t ldc, int64_t rows,
                                            int64_t cols, const float* bias, bool overwrite) {
  const float* ar[MR];
  for (int i = 0; i < MR; i++) ar[i] = a[i];
  vf acc[MR][NV];
  for (int i = 0; i < MR; i++)
    for (int v = 0; v < NV; v++) acc[i][v] = zero();
  for (int64_t p = 0; p < kb; p++) {
    vf bv[NV];
    for (int v = 0; v < NV; v++) bv[v] = load(b + v * kWidth);
    for (int i = 0; i < MR; i++) {
      vf ai = set1(*ar[i]);
      ar[i] += a_cs;
      for (int v = 0; v < NV; v++) acc[i][v] = fma(ai, bv[v], acc[i][v]);
    }
    b += NR;
  }
  store_tile(acc, c, ldc, rows, cols, bias, overwrite);
}

// The same tile from a packed A micro-panel (a[p*MR + i], see pack_a_block): one pointer per
// operand, so every load has a constant offset (in WebAssembly, the load's immediate) and a step of
// k costs two pointer increments instead of MR + 1. Same order of operations as micro_kernel.
// Unrolling k (by 2 or 4) was slower in V8: clang hoists the loads of the unrolled steps, and the
// extra live vectors spill.
__attribute__((noinline)) void micro_kernel_packed(int64_t kb, const float* a, const float* b,
                                                   float* c, int64_t ldc, int64_t rows,
                                                   int64_t cols, const float* bias,
                                                   bool overwrite) {
  vf acc[MR][NV];
  for (int i = 0; i < MR; i++)
    for (int v = 0; v < NV; v++) acc[i][v] = zero();
  for (int64_t p = 0; p < kb; p++, a += MR, b += NR) tile_step(acc, a, b);
  store_tile(acc, c, ldc, rows, cols, bias, overwrite);
}

// C (M,N) row stride ldc; (=) A·B + bias when !accumulate, (+=) A·B when accumulate.
struct Gemm {
  int64_t M, N, K;
  View A, B;
  float* C;
  int64_t ldc;
  const float* bias;
  bool accumulate;

  // Rows [r0, r1) × columns [c0, c1) of C, all of K, on one thread. Each KC×NC block of B is packed
  // once into `scratch` and then used by all the rows; the MC×KC block of A rows stays in L2 while
  // the jr loop walks the B micro-panels (each KC×NR, in L1).
  void block(int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* scratch) const {
    float* b_packed = scratch;            // (NC/NR panels) × KC × NR
    float* a_packed = scratch + KC * NC;  // (MC/MR panels) × KC × MR, when A is packed
    for (int64_t jc = c0; jc < c1; jc += NC) {
      int64_t nb = std::min(NC, c1 - jc);
      for (int64_t pc = 0; pc < K; pc += KC) {
        int64_t kb = std::min(KC, K - pc);
        pack_b_block(b_packed, B, pc, kb, jc, nb);
        bool overwrite = pc == 0 && !accumulate;
        for (int64_t ic = r0; ic < r1; ic += MC) {
          int64_t ic_end = std::min(ic + MC, r1);
          bool packed = kPackA || A.rs == 1;
          if (packed) pack_a_block(a_packed, A, ic, ic_end, pc, kb);
          for (int64_t jr = 0; jr < nb; jr += NR)
            for (int64_t ir = ic; ir < ic_end; ir += MR) {
              int64_t rows = std::min<int64_t>(MR, ic_end - ir),
                      cols = std::min<int64_t>(NR, nb - jr);
              float* c = C + ir * ldc + jc + jr;
              const float* bias_j = bias ? bias + jc + jr : nullptr;
              if (packed) {
                micro_kernel_packed(kb, a_packed + (ir - ic) * kb, b_packed + jr * kb, c, ldc, rows,
                                    cols, bias_j, overwrite);
                continue;
              }
              const float* a[MR];
              for (int i = 0; i < MR; i++)
                a[i] = A.p + (ir + std::min<int64_t>(i, rows - 1)) * A.rs + pc * A.cs;
              micro_kernel(kb, a, A.cs, b_packed + jr * kb, c, ldc, rows, cols, bias_j, overwrite);
            }
        }
      }
    }
  }
};

// The empty cases: nothing to do, or an empty reduction (C = bias or 0; += nothing). True if
// handled.
bool gemm_trivial(const Gemm& g) {
  if (g.M <= 0 || g.N <= 0) return true;
  if (g.K > 0) return false;
  if (!g.accumulate)
    for (int64_t i = 0; i < g.M; i++)
      for (int64_t j = 0; j < g.N; j++) g.C[i * g.ldc + j] = g.bias ? g.bias[j] : 0.0f;
  return true;
}

// Splits C across the pool into up to kChunksPerThread blocks per thread (one block on a 1-thread
// pool), tm row blocks (whole micro-tiles) × tn column blocks, claimed by whichever thread is free.
// Each block packs its columns of B and its rows of A (when A is packed); an A read in place still
// streams through the caches. Of the splits into the most blocks, the one with the least of that
// traffic per block, in floats moved:
//   A: (M/tm)·K, twice if packed (read + write);  B: K·(N/tn), twice (it is always packed).
// E.g. dweight of fc_out, (C, 4C) over B·T rows, splits its 4C columns; dweight of fc_in its rows.
void run_gemm(const Gemm& g, ThreadPool& pool) {
  if (gemm_trivial(g)) return;
  int64_t wanted = pool.size() == 1 ? 1 : int64_t(pool.size()) * ThreadPool::kChunksPerThread;
  int64_t units =
      std::min<int64_t>(wanted, std::max<int64_t>(1, 2 * g.M * g.N * g.K / kMinFlopsPerChunk));
  int64_t row_tiles = ceil_div(g.M, MR), col_tiles = ceil_div(g.N, NR);
  double a_moves = g.A.rs == 1 || kPackA ? 2.0 : 1.0;
  int64_t tm = 1, tn = 1;
  double best = -1;
  for (int64_t r = 1; r <= std::min(units, row_tiles); r++) {
    int64_t c = std::min(units / r, col_tiles);
    double a = double(ceil_div(row_tiles, r) * MR) * double(g.K) * a_moves;
    double b = 2.0 * double(g.K) * double(ceil_div(col_tiles, c) * NR);
    if (r * c > tm * tn || (r * c == tm * tn && (best < 0 || a + b < best))) {
      best = a + b;
      tm = r;
      tn = c;
    }
  }
  pool.parallel_for_scratch(tm * tn, 1, [&](int64_t begin, int64_t end, float* scratch) {
    for (int64_t u = begin; u < end; u++) {
      int64_t r = u / tn, c = u % tn;
      int64_t r0 = std::min(g.M, row_tiles * r / tm * MR),
              r1 = std::min(g.M, row_tiles * (r + 1) / tm * MR);
      int64_t c0 = std::min(g.N, col_tiles * c / tn * NR),
              c1 = std::min(g.N, col_tiles * (c + 1) / tn * NR);
      if (r0 < r1 && c0 < c1) g.block(r0, r1, c0, c1, scratch);
    }
  });
}

// ---- Few rows: dot products with the weight rows where they lie ---------------------------------
// A KV-cache decode step multiplies one row (M = 1) by every weight. The GEMM would pack the whole
// weight (K·N floats read and written) to use it once, and compute MR rows to keep one; here each
// output is the dot product of an input row with a weight row W[n, :], contiguous in PyTorch's
// [out, in] layout, read once where it lies. A tile of two input rows × kDotCols weight rows shares
// each load of x across its columns and each load of W across its rows.
// The summation order is not the GEMM's (k in kWidth lanes, then a reduction), so a row computed
// here and the same row in a larger product agree to rounding, not bit for bit; it does not depend
// on the thread count (columns are split, each output is one tile's).

// Weight rows per tile. On x86 the W vectors beyond the register file are memory operands of the
// FMA, and 8 columns were up to 1.4x faster than 4 at M = 1 (AVX2); in V8, 8 columns (or 4 input
// rows) spill accumulators and ran 10-30% slower than 2 rows × 4 columns.
#if defined(TG_SIMD_AVX512) || defined(TG_SIMD_AVX2)
constexpr int kDotCols = 8;
#else
constexpr int kDotCols = 4;
#endif

// Products of at most this many rows take the dot-product path. Measured against the GEMM on the
// Linear shapes of small, large and xl (K, N = 96..1024), one thread: at M = 1 4-12x faster
// (AVX-512, AVX2, relaxed WebAssembly in Node), at M = 8 1.0-2.3x; natively the GEMM overtakes
// from M = 10 or 11 on the K = 96 shapes (its cost barely grows up to MR rows, the dot path's
// grows with every row).
constexpr int64_t kFewRows = 8;

// A few-rows product streams its weights once and does little arithmetic on each, so memory
// bandwidth, not kMinFlopsPerChunk's arithmetic, decides when a split pays: each thread then reads
// its share of the weight (from its own cache, where the same thread takes the same columns at the
// next token). Chunks of at least 8192 weights (32 KiB): a KV decode step, 2 threads, against
// kMinFlopsPerChunk's split, medium 5,842 -> 8,578 and large 1,962 -> 2,893 tokens/s; splitting
// every product took tiny from 52,183 to 37,985.
constexpr int64_t kMinWeightsPerFewRowsChunk = 8192;

// out (R,cols) row stride ldo = x (R,K) row stride K · w (cols,K)^T + bias (may be null), for R
// rows of x and cols <= kDotCols weight rows from w, ldw apart. Columns past `cols` repeat the last
// weight row: computed, not stored. bias may be `out` itself (R = 1): out += x · w^T.
template <int R>
void dot_tile(float* out, int64_t ldo, const float* x, const float* w, int64_t ldw, int64_t K,
              int64_t cols, const float* bias) {
  const float* wr[kDotCols];
  for (int j = 0; j < kDotCols; j++) wr[j] = w + std::min<int64_t>(j, cols - 1) * ldw;
  vf acc[R][kDotCols];
  for (int r = 0; r < R; r++)
    for (int j = 0; j < kDotCols; j++) acc[r][j] = zero();
  int64_t k = 0;
  for (; k + kWidth <= K; k += kWidth) {
    vf wv[kDotCols];
    for (int j = 0; j < kDotCols; j++) wv[j] = load(wr[j] + k);
    for (int r = 0; r < R; r++) {
      vf xv = load(x + r * K + k);
      for (int j = 0; j < kDotCols; j++) acc[r][j] = fma(xv, wv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int64_t j = 0; j < cols; j++) {
      float s = reduce_add(acc[r][j]);
      for (int64_t t = k; t < K; t++) s += x[r * K + t] * wr[j][t];  // the K % kWidth tail
      out[r * ldo + j] = bias ? s + bias[j] : s;
    }
}

// out (M,N) = inp (M,K) · weight (N,K)^T + bias, for M <= kFewRows: tiles of kDotCols output
// columns, split across the pool in chunks of at least kMinWeightsPerFewRowsChunk weights.
void few_rows_forward(float* out, const float* inp, const float* weight, const float* bias,
                      int64_t M, int64_t K, int64_t N, ThreadPool& pool) {
  int64_t tiles = ceil_div(N, kDotCols);
  int64_t min_tiles =
      std::max<int64_t>(1, kMinWeightsPerFewRowsChunk / std::max<int64_t>(1, K * kDotCols));
  pool.parallel_for(tiles, min_tiles, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; t++) {
      int64_t n = t * kDotCols, cols = std::min<int64_t>(kDotCols, N - n);
      const float* w = weight + n * K;
      const float* b = bias ? bias + n : nullptr;
      int64_t m = 0;
      for (; m + 2 <= M; m += 2) dot_tile<2>(out + m * N + n, N, inp + m * K, w, K, K, cols, b);
      if (m < M) dot_tile<1>(out + m * N + n, N, inp + m * K, w, K, K, cols, b);
    }
  });
}

// ---- One row of A: attention for a decoded token ----------------------------------------------
// A KV-cache decode step's attention is, per head, S = q·K^T and y = P·V for a single query. The
// GEMM would pack K or V (as much memory traffic as the product) and compute MR rows to keep one;
// here each is read once where it lies. c (1,N) (+)= a (1,K) · B (K,N).

// B with contiguous columns (B(p,j) = b[p + j*b.cs], keys' rows for S = q·K^T): the few-row
// forward's dot products, B's columns as the weight rows. Needs a with unit stride.
void one_row_dots(int64_t N, int64_t K, View a, View b, float* c, bool accumulate) {
  for (int64_t j0 = 0; j0 < N; j0 += kDotCols)
    dot_tile<1>(c + j0, 0, a.p, b.p + j0 * b.cs, b.cs, K, std::min<int64_t>(kDotCols, N - j0),
                accumulate ? c + j0 : nullptr);
}

// B with contiguous rows (B(p,j) = b[p*b.rs + j], values' rows for y = P·V): c's columns in
// vectors, each the sum over p of a(p) times row p, p ascending. A strip of Vecs vectors of c
// (columns j0..) in registers: several at once keep several multiply-add chains in flight.
template <int Vecs>
void one_row_axpy_strip(int64_t j0, int64_t K, View a, View b, float* c, bool accumulate) {
  vf acc[Vecs];
  for (int v = 0; v < Vecs; v++) acc[v] = zero();
  for (int64_t p = 0; p < K; p++) {
    const vf ap = set1(a.p[p * a.cs]);
    const float* row = b.p + p * b.rs + j0;
    for (int v = 0; v < Vecs; v++) acc[v] = fma(ap, load(row + v * kWidth), acc[v]);
  }
  for (int v = 0; v < Vecs; v++) {
    float* cp = c + j0 + v * kWidth;
    store(cp, accumulate ? add(load(cp), acc[v]) : acc[v]);
  }
}

void one_row_axpys(int64_t N, int64_t K, View a, View b, float* c, bool accumulate) {
  int64_t j0 = 0;
  for (; j0 + 4 * kWidth <= N; j0 += 4 * kWidth) one_row_axpy_strip<4>(j0, K, a, b, c, accumulate);
  if (j0 + 2 * kWidth <= N) {  // a head of 32 channels on AVX-512 is two vectors
    one_row_axpy_strip<2>(j0, K, a, b, c, accumulate);
    j0 += 2 * kWidth;
  }
  if (j0 + kWidth <= N) {
    one_row_axpy_strip<1>(j0, K, a, b, c, accumulate);
    j0 += kWidth;
  }
  for (; j0 < N; j0++) {  // columns past the last whole vector
    float s = 0;
    for (int64_t p = 0; p < K; p++) s += a.p[p * a.cs] * b.p[p * b.rs + j0];
    c[j0] = accumulate ? c[j0] + s : s;
  }
}

}  // namespace

void gemm_strided(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_cs,
                  const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t ldc,
                  bool accumulate, float* scratch) {
  Gemm g{M, N, K, View{a, a_rs, a_cs}, View{b, b_rs, b_cs}, c, ldc, nullptr, accumulate};
  if (gemm_trivial(g)) return;
  if (M == 1 && b_rs == 1 && a_cs == 1) return one_row_dots(N, K, g.A, g.B, c, accumulate);
  if (M == 1 && b_cs == 1) return one_row_axpys(N, K, g.A, g.B, c, accumulate);
  g.block(0, M, 0, N, scratch);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                    int64_t K, int64_t N, ThreadPool& pool) {
  if (M <= kFewRows) return few_rows_forward(out, inp, weight, bias, M, K, N, pool);
  // out (M,N) = inp (M,K) · B with B(k,n) = weight[n*K + k]
  run_gemm(Gemm{M, N, K, View{inp, K, 1}, View{weight, 1, K}, out, N, bias, false}, pool);
}

void matmul_forward_accumulate(float* out, const float* inp, const float* weight, int64_t M,
                               int64_t K, int64_t N, ThreadPool& pool) {
  if (M <= kFewRows && M > 0 && N > 0) {
    // the few-rows dot products, each row with its own output as the "bias": out += x · w^T
    int64_t tiles = ceil_div(N, kDotCols);
    int64_t min_tiles =
        std::max<int64_t>(1, kMinWeightsPerFewRowsChunk / std::max<int64_t>(1, K * kDotCols));
    pool.parallel_for(tiles, min_tiles, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; t++) {
        int64_t n = t * kDotCols, cols = std::min<int64_t>(kDotCols, N - n);
        for (int64_t m = 0; m < M; m++)
          dot_tile<1>(out + m * N + n, N, inp + m * K, weight + n * K, K, K, cols, out + m * N + n);
      }
    });
    return;
  }
  run_gemm(Gemm{M, N, K, View{inp, K, 1}, View{weight, 1, K}, out, N, nullptr, true}, pool);
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t M,
                           int64_t K, int64_t N, ThreadPool& pool) {
  run_gemm(Gemm{M, K, N, View{dout, N, 1}, View{weight, K, 1}, dinp, K, nullptr, false}, pool);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t M, int64_t K, int64_t N, ThreadPool& pool) {
  // dinp (M,K) += dout (M,N) · weight (N,K)
  if (dinp)
    run_gemm(Gemm{M, K, N, View{dout, N, 1}, View{weight, K, 1}, dinp, K, nullptr, true}, pool);
  // dweight (N,K) += A (N,M) · inp (M,K) with A(n,m) = dout[m*N + n]
  if (dweight)
    run_gemm(Gemm{N, K, M, View{dout, 1, N}, View{inp, K, 1}, dweight, K, nullptr, true}, pool);
  // dbias (N) += column sums of dout; columns split across threads, rows summed in order.
  if (dbias && M > 0 && N > 0) {
    int64_t blocks = ceil_div(N, kWidth);
    int64_t min_blocks = std::max<int64_t>(1, kMinFlopsPerChunk / (M * kWidth));
    pool.parallel_for(blocks, min_blocks, [&](int64_t begin, int64_t end) {
      int64_t j = begin * kWidth, j_end = std::min(N, end * kWidth);
      for (; j + kWidth <= j_end; j += kWidth) {
        vf s = load(dbias + j);
        for (int64_t m = 0; m < M; m++) s = add(s, load(dout + m * N + j));
        store(dbias + j, s);
      }
      for (; j < j_end; j++) {
        float s = dbias[j];
        for (int64_t m = 0; m < M; m++) s += dout[m * N + j];
        dbias[j] = s;
      }
    });
  }
}

}  // namespace tg
