// The three products of a Linear layer, all computed by one blocked GEMM, C (+)= A·B, where A and B
// are strided views, so that transposes cost nothing but a different packing loop:
//   forward  out  (M,N) = inp (M,K) · W^T       + bias     A = inp,    B(k,n) = W[n,k]
//   dinp     dinp (M,K) += dout (M,N) · W                  A = dout,   B = W
//   dweight  dW   (N,K) += dout^T (N,M) · inp (M,K)        A(n,m) = dout[m,n], B = inp
//
// Blocking follows BLIS (Goto's algorithm): C is cut into tiles of MC×NC (the unit of work given to
// a thread); for each KC-slice of the reduction the tile's A block (MC×KC) and B block (KC×NC) are
// packed into the thread's scratch as MR-row and NR-column micro-panels, contiguous in the order the
// micro-kernel reads them and zero-padded at the edges; the micro-kernel keeps an MR×NR block of C
// in registers (MR broadcasts of A times NR/kWidth vectors of B per step of k). Sizes: an A micro-
// panel (MR×KC) and a B micro-panel (KC×NR) stay in L1, the A block in L2.
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

// Cache blocking: 144 is a multiple of every MR above, 256 of every NR.
constexpr int64_t MC = 144, KC = 256, NC = 256;
static_assert(MC % MR == 0 && NC % NR == 0, "tiles must hold whole micro-panels");
static_assert(MC * KC + KC * NC <= ThreadPool::kScratchFloats, "packed blocks must fit the scratch");

// Below this many flops per chunk a GEMM is not split across threads: the wake-up and the
// imbalance of a small split cost more than they save.
constexpr int64_t kMinFlopsPerChunk = int64_t(1) << 20;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A read-only strided view: element (i, j) is p[i * rs + j * cs].
struct View {
  const float* p;
  int64_t rs, cs;
};

// Packs rows [i0, i0+rows) × depth [p0, p0+kb) of `src` as a micro-panel of R rows: dst[p*R + i],
// rows >= `rows` zero. The two layouts that occur have one unit stride, on i or on p.
template <int R>
void pack_panel(float* dst, View src, int64_t i0, int64_t p0, int64_t rows, int64_t kb) {
  const float* s = src.p + i0 * src.rs + p0 * src.cs;
  if (src.rs == 1) {  // i contiguous: copy R-runs
    for (int64_t p = 0; p < kb; p++) {
      const float* sp = s + p * src.cs;
      float* d = dst + p * R;
      int64_t i = 0;
      for (; i < rows; i++) d[i] = sp[i];
      for (; i < R; i++) d[i] = 0.0f;
    }
  } else {  // p contiguous (cs == 1 in practice): transpose while copying
    for (int64_t i = 0; i < rows; i++) {
      const float* si = s + i * src.rs;
      for (int64_t p = 0; p < kb; p++) dst[p * R + i] = si[p * src.cs];
    }
    for (int64_t i = rows; i < R; i++)
      for (int64_t p = 0; p < kb; p++) dst[p * R + i] = 0.0f;
  }
}

// c (rows×cols of an MR×NR tile, row stride ldc) = acc + bias   if overwrite (bias may be null)
//                                                 += acc         otherwise
// a: packed (kb, MR), b: packed (kb, NR).
void micro_kernel(int64_t kb, const float* a, const float* b, float* c, int64_t ldc, int64_t rows,
                  int64_t cols, const float* bias, bool overwrite) {
  vf acc[MR][NV];
  for (int i = 0; i < MR; i++)
    for (int v = 0; v < NV; v++) acc[i][v] = zero();
  for (int64_t p = 0; p < kb; p++) {
    vf bv[NV];
    for (int v = 0; v < NV; v++) bv[v] = load(b + v * kWidth);
    for (int i = 0; i < MR; i++) {
      vf ai = set1(a[i]);
      for (int v = 0; v < NV; v++) acc[i][v] = fma(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += NR;
  }
  if (rows == MR && cols == NR) {
    for (int i = 0; i < MR; i++)
      for (int v = 0; v < NV; v++) {
        float* cp = c + i * ldc + v * kWidth;
        vf r = acc[i][v];
        if (!overwrite) r = add(load(cp), r);
        else if (bias) r = add(r, load(bias + v * kWidth));
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
      if (!overwrite) *cp = *cp + r;
      else *cp = bias ? r + bias[j] : r;
    }
}

// C (M,N) row stride ldc; (=) A·B + bias when !accumulate, (+=) A·B when accumulate.
struct Gemm {
  int64_t M, N, K;
  View A, B;
  float* C;
  int64_t ldc;
  const float* bias;
  bool accumulate;
  int64_t mc, nc, tiles_m, tiles_n;

  // One MC×NC tile of C, all of K, with `scratch` holding the packed blocks.
  void tile(int64_t t, float* scratch) const {
    int64_t i0 = (t / tiles_n) * mc, j0 = (t % tiles_n) * nc;
    int64_t mb = std::min(mc, M - i0), nb = std::min(nc, N - j0);
    float* Ap = scratch;            // (mc/MR panels) × KC × MR
    float* Bp = scratch + MC * KC;  // (nc/NR panels) × KC × NR
    for (int64_t pc = 0; pc < K; pc += KC) {
      int64_t kb = std::min(KC, K - pc);
      for (int64_t jr = 0; jr < nb; jr += NR)
        pack_panel<NR>(Bp + jr * kb, View{B.p, B.cs, B.rs}, j0 + jr, pc, std::min<int64_t>(NR, nb - jr), kb);
      for (int64_t ir = 0; ir < mb; ir += MR)
        pack_panel<MR>(Ap + ir * kb, A, i0 + ir, pc, std::min<int64_t>(MR, mb - ir), kb);
      bool overwrite = pc == 0 && !accumulate;
      for (int64_t jr = 0; jr < nb; jr += NR)
        for (int64_t ir = 0; ir < mb; ir += MR)
          micro_kernel(kb, Ap + ir * kb, Bp + jr * kb, C + (i0 + ir) * ldc + j0 + jr, ldc,
                       std::min<int64_t>(MR, mb - ir), std::min<int64_t>(NR, nb - jr),
                       bias ? bias + j0 + jr : nullptr, overwrite);
    }
  }
};

// Chooses the tile size and runs the tiles across the pool. Rows of C are cut finer than MC when
// that balances the tiles over the threads (time ~ max tiles per thread × tile height).
void run_gemm(Gemm g, ThreadPool& pool) {
  if (g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0) {  // empty reduction: out = bias (or 0); += nothing
    if (!g.accumulate)
      for (int64_t i = 0; i < g.M; i++)
        for (int64_t j = 0; j < g.N; j++) g.C[i * g.ldc + j] = g.bias ? g.bias[j] : 0.0f;
    return;
  }
  int64_t flops = 2 * g.M * g.N * g.K;
  int64_t threads = std::min<int64_t>(pool.size(), std::max<int64_t>(1, flops / kMinFlopsPerChunk));
  g.tiles_n = ceil_div(g.N, NC);
  g.nc = ceil_div(ceil_div(g.N, g.tiles_n), NR) * NR;
  g.tiles_n = ceil_div(g.N, g.nc);
  int64_t base_m = ceil_div(g.M, MC);
  int64_t best_cost = -1;
  for (int64_t tm = base_m; tm <= base_m + 2 * threads; tm++) {
    int64_t mc = ceil_div(ceil_div(g.M, tm), MR) * MR;
    int64_t tiles = ceil_div(g.M, mc) * g.tiles_n;
    int64_t cost = ceil_div(tiles, threads) * mc;
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      g.mc = mc;
    }
    if (mc == MR) break;
  }
  g.tiles_m = ceil_div(g.M, g.mc);
  int64_t tiles = g.tiles_m * g.tiles_n;
  pool.parallel_for_scratch(tiles, threads > 1 ? 1 : tiles, [&g](int64_t begin, int64_t end, float* scratch) {
    for (int64_t t = begin; t < end; t++) g.tile(t, scratch);
  });
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t M, int64_t K, int64_t N, ThreadPool& pool) {
  // out (M,N) = inp (M,K) · B with B(k,n) = weight[n*K + k]
  run_gemm(Gemm{M, N, K, View{inp, K, 1}, View{weight, 1, K}, out, N, bias, false, 0, 0, 0, 0}, pool);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t M, int64_t K, int64_t N,
                     ThreadPool& pool) {
  // dinp (M,K) += dout (M,N) · weight (N,K)
  if (dinp)
    run_gemm(Gemm{M, K, N, View{dout, N, 1}, View{weight, K, 1}, dinp, K, nullptr, true, 0, 0, 0, 0}, pool);
  // dweight (N,K) += A (N,M) · inp (M,K) with A(n,m) = dout[m*N + n]
  if (dweight)
    run_gemm(Gemm{N, K, M, View{dout, 1, N}, View{inp, K, 1}, dweight, K, nullptr, true, 0, 0, 0, 0}, pool);
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
