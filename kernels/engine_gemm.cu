// engine_gemm.cu: dense products of many rows (prefill) through cuBLASLt, one fixed algorithm a
// weight shape so a row's bits do not depend on the row count: BF16 weights against a hi + mid + lo
// bf16 split of the f32 inputs (tensor-core GEMMs, f32 accumulation), F32 in f32.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <mutex>

#include "engine_common.cuh"
#include "gemm_fp16x2.h"

namespace {

// cuBLAS and cuBLASLt are loaded on the first product, not linked: a process on the CPU backend
// never loads them (libcublasLt's load-time initializers also upset valgrind in the CPU tests).
#define ENG_STR2(x) #x
#define ENG_STR(x) ENG_STR2(x)
constexpr const char *kCublasLib = "libcublas.so." ENG_STR(CUBLAS_VER_MAJOR);
constexpr const char *kCublasLtLib = "libcublasLt.so." ENG_STR(CUBLAS_VER_MAJOR);

// cuBLAS itself serves only the comparison path (ENG_GEMM_CUBLAS; cuda_gemm = default): cublasGemmEx with
// its default algorithm, which cuBLAS picks by the row count (tile, split-K, stream-K), so a
// token's bits depended on how many tokens shared its chunk (prompt reuse differed by 2e-5).
struct cublas_api {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                           const void *, const void *, cudaDataType, int, const void *, cudaDataType,
                           int, const void *, void *, cudaDataType, int, cublasComputeType_t,
                           cublasGemmAlgo_t);
    const char *(*status_string)(cublasStatus_t);
};

// the cuBLASLt entry points, typed from the header (decltype names no symbol)
struct lt_api {
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmulAlgoConfigGetAttribute) config_get;
    decltype(&cublasLtMatmulAlgoCheck) check;
    decltype(&cublasLtMatmul) matmul;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy;
};

cublas_api g_api;
lt_api g_lt;
cublasLtHandle_t g_lt_handle;
bool g_api_tried, g_api_ok;

void *load_symbols(const char *lib_name, const char *const *names, void **fn, int n, int *rc)
{
    void *lib = dlopen(lib_name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        kern_log(0, "the CUDA backend's prefill products need cuBLAS, and %s did not load "
                "(%s): install the CUDA toolkit's cuBLAS or put its lib64 on LD_LIBRARY_PATH",
                lib_name, dlerror());
        *rc = (int)cudaErrorSharedObjectInitFailed;
        return nullptr;
    }
    for (int i = 0; i < n; i++)
        if (!(fn[i] = dlsym(lib, names[i]))) {
            kern_log(0, "%s has no %s: a cuBLAS of CUDA %d is needed", lib_name,
                    names[i], CUBLAS_VER_MAJOR);
            *rc = (int)cudaErrorSharedObjectSymbolNotFound;
            return nullptr;
        }
    return lib;
}

template <typename F> void set_fn(F &dst, void *src) { dst = reinterpret_cast<F>(src); }

// Under g_lock. Returns 0, or a CUDA error code after logging what is missing.
int load_cublas()
{
    if (g_api_tried)
        return g_api_ok ? 0 : (int)cudaErrorSharedObjectInitFailed;
    g_api_tried = true;
    int rc = 0;
    const char *names[6] = {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2",
                            "cublasSetWorkspace_v2", "cublasGemmEx", "cublasGetStatusString"};
    void *fn[13];
    if (!load_symbols(kCublasLib, names, fn, 6, &rc))
        return rc;
    set_fn(g_api.create, fn[0]);
    set_fn(g_api.destroy, fn[1]);
    set_fn(g_api.set_stream, fn[2]);
    set_fn(g_api.set_workspace, fn[3]);
    set_fn(g_api.gemm, fn[4]);
    set_fn(g_api.status_string, fn[5]);
    const char *lt_names[13] = {"cublasLtCreate", "cublasLtMatmulDescCreate", "cublasLtMatmulDescSetAttribute",
                                "cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutDestroy",
                                "cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceSetAttribute",
                                "cublasLtMatmulPreferenceDestroy", "cublasLtMatmulAlgoGetHeuristic",
                                "cublasLtMatmulAlgoConfigGetAttribute", "cublasLtMatmulAlgoCheck",
                                "cublasLtMatmul", "cublasLtMatmulDescDestroy"};
    if (!load_symbols(kCublasLtLib, lt_names, fn, 13, &rc))
        return rc;
    set_fn(g_lt.create, fn[0]);
    set_fn(g_lt.desc_create, fn[1]);
    set_fn(g_lt.desc_set, fn[2]);
    set_fn(g_lt.layout_create, fn[3]);
    set_fn(g_lt.layout_destroy, fn[4]);
    set_fn(g_lt.pref_create, fn[5]);
    set_fn(g_lt.pref_set, fn[6]);
    set_fn(g_lt.pref_destroy, fn[7]);
    set_fn(g_lt.heuristic, fn[8]);
    set_fn(g_lt.config_get, fn[9]);
    set_fn(g_lt.check, fn[10]);
    set_fn(g_lt.matmul, fn[11]);
    set_fn(g_lt.desc_destroy, fn[12]);
    cublasStatus_t s = g_lt.create(&g_lt_handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
        kern_log(0, "cuBLASLt failed in creating a handle: %s", g_api.status_string(s));
        return (int)cudaErrorUnknown;
    }
    g_api_ok = true;
    return 0;
}

// One cuBLAS handle, workspace and input-split buffer per stream (two ranks of one process run
// on two streams at once, so the buffers cannot be shared). The workspace starts at
// ENG_GEMM_WORKSPACE and grows when a shape's fixed split-K algorithm needs more at a large T
// (its partial sums are T x rows x splits floats).
constexpr int kMaxStreams = 8;
constexpr size_t kWorkspace = ENG_GEMM_WORKSPACE;

struct per_stream {
    cudaStream_t stream;
    cublasHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    __nv_bfloat16 *split; // hi, mid, lo: [T][cols] each, each from a 256-byte boundary; or [T][3 cols]
    size_t split_bytes;
    __nv_bfloat16 *w3;    // a narrow weight three times side by side: [rows][3 cols]
    size_t w3_bytes;
    __half *wh;           // the two-part form's weight scaled to fp16, once or twice side by side
    size_t wh_bytes;
    bool used;
};

per_stream g_streams[kMaxStreams];
std::mutex g_lock;

int cublas_code(cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    kern_log(0, "cuBLAS failed in %s: %s", what, g_api.status_string(s));
    return s == CUBLAS_STATUS_ALLOC_FAILED ? (int)cudaErrorMemoryAllocation : (int)cudaErrorUnknown;
}

// Grows *buf (bytes *have) to `want` bytes on stream st; the old one may still be read by this
// stream's queued products, so the stream is drained first.
int grow(void **buf, size_t *have, size_t want, cudaStream_t st)
{
    if (want <= *have)
        return 0;
    cudaError_t rc = cudaStreamSynchronize(st);
    if (rc == cudaSuccess && *buf)
        rc = cudaFree(*buf);
    *buf = nullptr;
    *have = 0;
    if (rc == cudaSuccess)
        rc = cudaMalloc(buf, want);
    if (rc != cudaSuccess)
        return (int)rc;
    *have = want;
    return 0;
}

// The entry of `st`, created on first use; its split buffer grown to `split_bytes`. Under g_lock.
int entry_for(cudaStream_t st, size_t split_bytes, per_stream **out)
{
    int lrc = load_cublas();
    if (lrc)
        return lrc;
    per_stream *e = nullptr;
    for (int i = 0; i < kMaxStreams && !e; i++)
        if (g_streams[i].used && g_streams[i].stream == st)
            e = &g_streams[i];
    for (int i = 0; i < kMaxStreams && !e; i++)
        if (!g_streams[i].used) {
            per_stream n = {};
            cudaError_t rc = cudaMalloc(&n.workspace, kWorkspace);
            if (rc != cudaSuccess)
                return (int)rc;
            n.workspace_bytes = kWorkspace;
            int brc = cublas_code(g_api.create(&n.handle), "creating a handle");
            if (!brc)
                brc = cublas_code(g_api.set_workspace(n.handle, n.workspace, kWorkspace), "setting the workspace");
            if (!brc)
                brc = cublas_code(g_api.set_stream(n.handle, st), "setting the stream");
            if (brc) {
                if (n.handle)
                    g_api.destroy(n.handle);
                cudaFree(n.workspace);
                return brc;
            }
            n.stream = st;
            n.used = true;
            g_streams[i] = n;
            e = &g_streams[i];
        }
    if (!e) {
        kern_log(0, "more than %d CUDA streams ran dense prefill products", kMaxStreams);
        return -1;
    }
    int grc = grow(reinterpret_cast<void **>(&e->split), &e->split_bytes, split_bytes, st);
    if (grc)
        return grc;
    *out = e;
    return 0;
}

// A weight shape's product: its matmul descriptor, the weight's layout and the algorithm fixed at
// the first product of that shape. The algorithm is the heuristic's best at kRefRows rows among
// those whose split-K partials (if any) are summed out of place in a fixed order; its tile, split
// count and reduction scheme stay whatever T comes, so every output element is one fixed sequence
// of operations over the weight row and the input row, wherever that row sits in the chunk.
constexpr int kRefRows = 1024;
constexpr int kMaxPlans = 128;
constexpr int kCandidates = 32;

// The algorithms are chosen for operands aligned to kAlign bytes (what the Hopper kernels' tensor
// memory loads need; the engine's buffers are 256-byte aligned and its row strides keep that).
// cuBLASLt's own default assumes 256 and would pick kernels that misread a less aligned operand,
// which cublasGemmEx avoided by looking at the pointers on every call. An operand off kAlign gets
// a second fixed plan for any alignment (named in a warning: its bits differ from the aligned one's).
constexpr uintptr_t kAlign = 16;

struct plan {
    int rows, cols, dtype;
    bool half;      // fp16 weight and input parts (the two-part form; dtype is then the weight's ENG_BF16)
    bool nosplit;   // only algorithms without split-K (ENG_GEMM_NOSPLIT)
    bool unaligned; // for operands aligned to their element only
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a;
    cublasLtMatmulAlgo_t algo;
    uint32_t splitk, reduction, tile, id;
    bool used;
    // the input and output layouts and the checked workspace of the first 8 row counts
    // (a prefill's full chunks and its tails), kept so that a product does not describe and
    // check them again; set under g_lock, never changed once set (other threads read them)
    struct at_rows {
        int T;
        cublasLtMatrixLayout_t b, c;
        size_t workspace;
    } at[8];
    int n_at;
};

plan g_plans[kMaxPlans];

// the operands' type, for messages
const char *type_name(const plan *p) { return p->half ? "fp16" : p->dtype == ENG_BF16 ? "bf16" : "f32"; }

int lt_code(cublasStatus_t s, const char *what, const plan *p)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    kern_log(0, "cuBLASLt failed in %s (%d x %d %s weights): %s", what, p->rows,
            p->cols, type_name(p), g_api.status_string(s));
    return s == CUBLAS_STATUS_ALLOC_FAILED ? (int)cudaErrorMemoryAllocation : (int)cudaErrorUnknown;
}

cudaDataType in_type(const plan *p)
{
    return p->half ? CUDA_R_16F : p->dtype == ENG_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The input (cols x T, column-major) and output (rows x T) layouts at T rows.
int io_layouts(const plan *p, int T, cublasLtMatrixLayout_t *b, cublasLtMatrixLayout_t *c)
{
    *b = *c = nullptr;
    int rc = lt_code(g_lt.layout_create(b, in_type(p), (uint64_t)p->cols, (uint64_t)T, p->cols),
                     "describing the input", p);
    if (!rc)
        rc = lt_code(g_lt.layout_create(c, CUDA_R_32F, (uint64_t)p->rows, (uint64_t)T, p->rows),
                     "describing the output", p);
    if (rc) {
        if (*b)
            g_lt.layout_destroy(*b);
        *b = nullptr;
    }
    return rc;
}

// A 32-bit configuration attribute of a (the split count is int32_t, the others uint32_t).
bool config_u32(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t attr, uint32_t *v)
{
    size_t got = 0;
    *v = 0;
    return g_lt.config_get(a, attr, v, sizeof *v, &got) == CUBLAS_STATUS_SUCCESS && got == sizeof *v;
}

// eng_gemm_set_mode's choice (engine.h): ENG_GEMM_FIXED, ENG_GEMM_SHOW (the same, and each
// shape's choice logged when it is made), ENG_GEMM_NOSPLIT (fixed algorithms without split-K:
// the few-output shapes run slower), ENG_GEMM_CUBLAS (cublasGemmEx's own choice over three bf16
// parts), ENG_GEMM_THREE (the fixed algorithms, every BF16 weight as three bf16 parts),
// ENG_GEMM_ONEPART (the fixed algorithms, a BF16 weight fp16x2_takes against the hi part alone).
// The other fixed modes run a BF16 weight fp16x2_takes as two fp16 parts (gemm_fp16x2).
enum { MODE_FIXED = ENG_GEMM_FIXED, MODE_SHOW = ENG_GEMM_SHOW, MODE_DEFAULT = ENG_GEMM_CUBLAS,
       MODE_NOSPLIT = ENG_GEMM_NOSPLIT, MODE_THREE = ENG_GEMM_THREE,
       MODE_ONEPART = ENG_GEMM_ONEPART };
int g_mode = MODE_FIXED; // set while no product runs (the engine's open)
int gemm_mode() { return g_mode; }

// Chooses p's algorithm (p->rows, cols, dtype set). Under g_lock.
int choose(plan *p, bool show)
{
    int rc = lt_code(g_lt.desc_create(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "creating a descriptor", p);
    // column-major view: y^T [rows x T] = W^T' (W stored [rows][cols] is cols x rows) * x^T
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (!rc)
        rc = lt_code(g_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "setting transa", p);
    if (!rc)
        rc = lt_code(g_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "setting transb", p);
    if (!rc)
        rc = lt_code(g_lt.layout_create(&p->a, in_type(p), (uint64_t)p->cols, (uint64_t)p->rows, p->cols),
                     "describing the weight", p);
    if (rc)
        return rc;
    cublasLtMatrixLayout_t b, c, b9, c9;
    if ((rc = io_layouts(p, kRefRows, &b, &c)))
        return rc;
    if ((rc = io_layouts(p, ENG_GEMM_MIN_ROWS + 1, &b9, &c9))) {
        g_lt.layout_destroy(b);
        g_lt.layout_destroy(c);
        return rc;
    }
    cublasLtMatmulPreference_t pref = nullptr;
    uint64_t ws = kWorkspace;
    uint32_t align = p->unaligned ? 4 : (uint32_t)kAlign;
    // no in-place split-K (its parts meet in the output in whatever order they finish)
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    rc = lt_code(g_lt.pref_create(&pref), "creating a preference", p);
    if (!rc)
        rc = lt_code(g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                     "bounding the workspace", p);
    if (!rc)
        rc = lt_code(g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes),
                     "restricting the reduction", p);
    const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && !rc; i++)
        rc = lt_code(g_lt.pref_set(pref, aligns[i], &align, sizeof align), "setting the alignment", p);
    cublasLtMatmulHeuristicResult_t res[kCandidates];
    int n = 0;
    if (!rc)
        rc = lt_code(g_lt.heuristic(g_lt_handle, p->desc, p->a, b, c, c, pref, kCandidates, res, &n),
                     "asking for algorithms", p);
    bool found = false;
    int pick = -1;
    for (int i = 0; !rc && i < n && !found; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS)
            continue;
        // an algorithm whose split or reduction cannot be read is not known to be fixed-order
        uint32_t splitk, red;
        if (!config_u32(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk) ||
            !config_u32(&res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red))
            continue;
        if (splitk > 1 && (p->nosplit || (red != CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE &&
                                           red != CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)))
            continue;
        // it must also take the smallest chunk eng_gemm is given
        cublasLtMatmulHeuristicResult_t small = {};
        if (g_lt.check(g_lt_handle, p->desc, p->a, b9, c9, c9, &res[i].algo, &small) != CUBLAS_STATUS_SUCCESS)
            continue;
        p->algo = res[i].algo;
        p->splitk = splitk > 1 ? splitk : 1;
        p->reduction = red;
        config_u32(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &p->tile); // for the record only
        config_u32(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &p->id);
        found = true;
        pick = i + 1;
    }
    if (pref)
        g_lt.pref_destroy(pref);
    g_lt.layout_destroy(b);
    g_lt.layout_destroy(c);
    g_lt.layout_destroy(b9);
    g_lt.layout_destroy(c9);
    if (rc)
        return rc;
    if (!found) {
        kern_log(0, "cuBLASLt offers no fixed-order algorithm for %d x %d %s weights "
                "(of %d candidates)", p->rows, p->cols, type_name(p), n);
        return (int)cudaErrorNotSupported;
    }
    if (show || p->unaligned)
        kern_log(show ? 3 : 1, "eng_gemm %d x %d %s%s%s: algorithm %u, tile %u, split-K %u, reduction %u "
                "(candidate %d of %d)", p->rows, p->cols, type_name(p),
                p->nosplit ? " nosplit" : "", p->unaligned ? " for operands off 16-byte alignment" : "",
                p->id, p->tile, p->splitk, p->reduction, pick, n);
    return 0;
}

// The plan of w's shape (half: as fp16 parts), chosen on its first product. Under g_lock.
int plan_for(const eng_mat *w, bool half, bool nosplit, bool unaligned, bool show, plan **out)
{
    for (int i = 0; i < kMaxPlans; i++) {
        plan *p = &g_plans[i];
        if (p->used && p->rows == w->rows && p->cols == w->cols && p->dtype == w->dtype &&
            p->half == half && p->nosplit == nosplit && p->unaligned == unaligned) {
            *out = p;
            return 0;
        }
    }
    for (int i = 0; i < kMaxPlans; i++) {
        plan *p = &g_plans[i];
        if (p->used)
            continue;
        *p = plan{};
        p->rows = w->rows;
        p->cols = w->cols;
        p->dtype = w->dtype;
        p->half = half;
        p->nosplit = nosplit;
        p->unaligned = unaligned;
        int rc = choose(p, show);
        if (rc) {
            // a shape that cannot be planned is tried again (and refused again, by name) next time
            if (p->a)
                g_lt.layout_destroy(p->a);
            if (p->desc)
                g_lt.desc_destroy(p->desc);
            *p = plan{};
            return rc;
        }
        p->used = true;
        *out = p;
        return 0;
    }
    kern_log(0, "more than %d weight shapes ran dense prefill products", kMaxPlans);
    return -1;
}

// hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid): the three carry about 24
// significant bits of x, as an f32 product would (hi + lo alone, about 16 bits, can move an
// indexer near-tie past the parity test's tolerance, which a mkmodel model showed).
__device__ __forceinline__ void split3(float v, __nv_bfloat16 &h, __nv_bfloat16 &m,
                                       __nv_bfloat16 &l)
{
    h = __float2bfloat16_rn(v);
    float rest = v - __bfloat162float(h);
    m = __float2bfloat16_rn(rest);
    l = __float2bfloat16_rn(rest - __bfloat162float(m));
}

__global__ void split_kernel(const float *__restrict__ x, size_t n, __nv_bfloat16 *__restrict__ hi,
                             __nv_bfloat16 *__restrict__ mid, __nv_bfloat16 *__restrict__ lo)
{
    pdl_prologue();
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        split3(x[i], hi[i], mid[i], lo[i]);
}

// A narrow weight's three parts as one GEMM over 3 cols: row t of x as [lo mid hi] (the parts
// split_kernel makes, smallest first, as the three-GEMM form adds them) ...
__global__ void split_rows_kernel(const float *__restrict__ x, int T, int cols,
                                  __nv_bfloat16 *__restrict__ out)
{
    pdl_prologue();
    size_t n = (size_t)T * cols, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        size_t t = i / cols, k = i - t * cols;
        __nv_bfloat16 *row = out + t * 3 * cols;
        split3(x[i], row[2 * cols + k], row[cols + k], row[k]);
    }
}

// ... against [W W W]: each weight row three times over (16-byte copies where vec: cols % 8 == 0
// and w 16-byte aligned; else element by element).
__global__ void triple_kernel(const __nv_bfloat16 *__restrict__ w, int rows, int cols, int vec,
                              __nv_bfloat16 *__restrict__ w3)
{
    pdl_prologue();
    size_t stride = (size_t)gridDim.x * blockDim.x;
    if (vec) {
        int per = cols / 8;
        size_t n = (size_t)rows * per;
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
            size_t r = i / per, j = i - r * per;
            uint4 v = reinterpret_cast<const uint4 *>(w)[i];
            uint4 *o = reinterpret_cast<uint4 *>(w3 + r * 3 * cols) + j;
            o[0] = v;
            o[per] = v;
            o[2 * per] = v;
        }
        return;
    }
    size_t n = (size_t)rows * cols;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        size_t r = i / cols, k = i - r * cols;
        __nv_bfloat16 v = w[i];
        __nv_bfloat16 *o = w3 + r * 3 * cols + k;
        o[0] = v;
        o[cols] = v;
        o[2 * cols] = v;
    }
}

unsigned grid_for(size_t n)
{
    return (unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
}

// Whether w's three parts run as one GEMM over 3 cols (a shape's choice: never T's): a narrow
// input (cols <= ENG_GEMM_CONCAT_COLS) makes a product bound by its output, which three GEMMs
// would write once and then read and write twice more.
bool concat_parts(const eng_mat *w)
{
    return w->dtype == ENG_BF16 && eng_gemm_narrow(w->rows, w->cols);
}

// What a product holds once set up: its stream's entry, its plan (none on the comparison path),
// the input and output layouts at its T (the plan's own when `kept`, else destroyed after it).
struct call {
    per_stream *e = nullptr;
    plan *p = nullptr;
    cublasLtMatrixLayout_t b = nullptr, c = nullptr;
    bool kept = false;
};

void release(call *k)
{
    if (k->b && !k->kept)
        g_lt.layout_destroy(k->b);
    if (k->c && !k->kept)
        g_lt.layout_destroy(k->c);
    k->b = k->c = nullptr;
}

// which per-stream weight buffer a product writes
enum weight_buffer { WB_NONE, WB_TRIPLE, WB_HALF };

// Sets up a product of `shape` (half: its fp16 form) at T rows on st: the stream's entry with a
// split buffer of split_bytes, its weight buffer `wb` of wb_bytes, and where `planned` the
// shape's fixed algorithm checked at T, with the workspace it needs there.
int prepare(const eng_mat *shape, bool half, int T, cudaStream_t st, size_t split_bytes,
            weight_buffer wb, size_t wb_bytes, bool planned, bool nosplit, bool unaligned, bool show,
            call *k)
{
    std::lock_guard<std::mutex> guard(g_lock);
    int rc = entry_for(st, split_bytes, &k->e);
    per_stream *e = k->e;
    if (!rc && wb == WB_TRIPLE)
        rc = grow(reinterpret_cast<void **>(&e->w3), &e->w3_bytes, wb_bytes, st);
    if (!rc && wb == WB_HALF)
        rc = grow(reinterpret_cast<void **>(&e->wh), &e->wh_bytes, wb_bytes, st);
    if (!rc && planned)
        rc = plan_for(shape, half, nosplit, unaligned, show, &k->p);
    plan *p = k->p;
    cublasLtMatmulHeuristicResult_t fit = {};
    for (int i = 0; !rc && p && i < p->n_at && !k->kept; i++)
        if (p->at[i].T == T) {
            k->b = p->at[i].b;
            k->c = p->at[i].c;
            fit.workspaceSize = p->at[i].workspace;
            k->kept = true;
        }
    if (!rc && p && !k->kept)
        rc = io_layouts(p, T, &k->b, &k->c);
    if (!rc && p && !k->kept) {
        // the fixed algorithm at this T: refused means a loud failure, never another choice
        cublasStatus_t s = g_lt.check(g_lt_handle, p->desc, p->a, k->b, k->c, k->c, &p->algo, &fit);
        if (s != CUBLAS_STATUS_SUCCESS) {
            kern_log(0, "the fixed algorithm of %d x %d %s weights does not take "
                    "%d rows: %s", p->rows, p->cols, type_name(p), T, g_api.status_string(s));
            rc = (int)cudaErrorNotSupported;
        } else if (p->n_at < (int)(sizeof p->at / sizeof *p->at)) {
            p->at[p->n_at++] = {T, k->b, k->c, fit.workspaceSize};
            k->kept = true;
        }
    }
    if (!rc && p && fit.workspaceSize > e->workspace_bytes) {
        rc = grow(&e->workspace, &e->workspace_bytes, fit.workspaceSize, st);
        if (!rc) // the comparison path's handle holds the workspace too
            rc = cublas_code(g_api.set_workspace(e->handle, e->workspace, e->workspace_bytes),
                             "setting the workspace");
    }
    if (rc)
        release(k);
    return rc;
}

// ---- the two-part form: two fp16 parts of each input row against the weight in fp16 ----
// y[t][n] = 2^-(a_t + s) (sum_k lo[t][k] W'[n][k] + sum_k hi[t][k] W'[n][k]), where
//   W' = fp16(W 2^s), s one power of two for the whole weight (its largest |W| 2^s in [2^14,
//   2^15)): a bf16's 8 significant bits fit fp16's 11, so every weight whose scaled magnitude is
//   a normal fp16 (>= 2^-14, i.e. within 2^28 of the largest) converts exactly; a smaller one
//   lands among fp16's subnormals and is rounded by at most 2^-25, under 2^-39 of the largest;
//   hi = fp16(x 2^a_t), lo = fp16(x 2^a_t - hi), a_t a power of two a row (its largest |x| 2^a_t in
//   [2^14, 2^15); a zero row 0): hi + lo keep about 22 significant bits of each input (the error
//   a term under 2^-22 of it, or 2^-25 absolute after the scale for the row's smallest elements),
//   below what the f32 accumulation itself loses over a few thousand terms; a row's a_t is its
//   own, so its bits do not depend on the chunk.
// The products run with alpha 1 and one elementwise pass then scales each output row by its
// token's 2^-(a_t + s) (unscale_kernel). cuBLASLt's per-row alpha vectors (the pointer modes
// ALPHA_DEVICE_VECTOR_*) scale D's rows, which in this file's column-major D = W X are the
// weight's outputs, not the tokens; using them means swapping the operands and writing D in row
// order, which cuBLASLt supports for fewer algorithms (and another fixed choice than the other
// modes'): the extra read and write of y is the simpler, always-supported price.
// The parts are exact power-of-two multiples (gemm_fp16x2_scale), so the scale is exact too
// (unless an output leaves f32's normal range).

// The largest of m across the block (each thread's m, all threads get it).
__device__ __forceinline__ unsigned block_max(unsigned m, unsigned *warp_max)
{
    for (int o = 16; o; o >>= 1)
        m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0)
        warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    m = 0;
    for (int i = 0; i < (int)(blockDim.x / 32); i++)
        m = max(m, warp_max[i]);
    return m;
}

// One block a row t: its shift a_t (into row_shift[t]), then hi and lo of each element at
// hi + t ld, lo + t ld (lo NULL: hi alone, the one-part form). Block 0 also zeroes the weight's
// maximum for weight_max_kernel (the previous product's unscale_kernel, which read it, has ended:
// pdl_prologue waits for it).
__global__ void split_half_kernel(const float *__restrict__ x, int cols, __half *__restrict__ lo,
                                  __half *__restrict__ hi, size_t ld, int *__restrict__ row_shift,
                                  unsigned *__restrict__ weight_max)
{
    pdl_prologue();
    __shared__ unsigned warp_max[32];
    size_t t = blockIdx.x;
    const float *row = x + t * (size_t)cols;
    unsigned m = 0;
    for (int k = threadIdx.x; k < cols; k += blockDim.x)
        m = max(m, __float_as_uint(row[k]) & 0x7fffffffu); // NaN and Inf above every finite value
    int a = gemm_fp16x2_shift(block_max(m, warp_max));
    if (threadIdx.x == 0) {
        row_shift[t] = a;
        if (t == 0)
            *weight_max = 0;
    }
    for (int k = threadIdx.x; k < cols; k += blockDim.x) {
        float v = gemm_fp16x2_scale(row[k], a);
        __half h = __float2half_rn(v);
        hi[t * ld + k] = h;
        if (lo)
            lo[t * ld + k] = __float2half_rn(v - __half2float(h)); // v - h is exact in f32
    }
}

__device__ __forceinline__ unsigned bf16x2_abs_max(unsigned u)
{
    return max(gemm_fp16x2_bf16_max_key((uint16_t)(u & 0xffffu)), gemm_fp16x2_bf16_max_key((uint16_t)(u >> 16)));
}

// The largest finite |w| over n bf16s (16-byte loads where vec), as float bits, into *weight_max
// (Inf and NaN left out: gemm_fp16x2_bf16_max_key).
__global__ void weight_max_kernel(const __nv_bfloat16 *__restrict__ w, size_t n, int vec,
                                  unsigned *__restrict__ weight_max)
{
    pdl_prologue();
    __shared__ unsigned warp_max[32];
    size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned m = 0;
    if (vec) {
        const uint4 *v = reinterpret_cast<const uint4 *>(w);
        for (size_t i = first; i < n / 8; i += stride) {
            uint4 q = v[i];
            m = max(max(m, bf16x2_abs_max(q.x)), max(bf16x2_abs_max(q.y),
                                                     max(bf16x2_abs_max(q.z), bf16x2_abs_max(q.w))));
        }
    } else {
        const uint16_t *bits = reinterpret_cast<const uint16_t *>(w);
        for (size_t i = first; i < n; i += stride)
            m = max(m, gemm_fp16x2_bf16_max_key(bits[i]));
    }
    m = block_max(m, warp_max);
    if (threadIdx.x == 0 && m)
        atomicMax(weight_max, gemm_fp16x2_bf16_abs_bits((uint16_t)m));
}

__device__ __forceinline__ unsigned short bf16_to_half_bits(unsigned bf16, int s)
{
    float f = __uint_as_float(bf16 << 16);
    return __half_as_ushort(__float2half_rn(gemm_fp16x2_scale(f, s)));
}

__device__ __forceinline__ unsigned bf16x2_to_half2(unsigned u, int s)
{
    return bf16_to_half_bits(u & 0xffffu, s) | ((unsigned)bf16_to_half_bits(u >> 16, s) << 16);
}

// W' = fp16(W 2^s) (s from *weight_max), each row `copies` (1 or 2) times side by side: out row r
// is [W'r] or [W'r W'r] (the narrow weights' one GEMM over [lo hi]); 8 values a thread where vec
// (cols % 8 == 0 and w 16-byte aligned).
__global__ void weight_half_kernel(const __nv_bfloat16 *__restrict__ w, int rows, int cols, int copies,
                                   int vec, const unsigned *__restrict__ weight_max,
                                   __half *__restrict__ out)
{
    pdl_prologue();
    int s = gemm_fp16x2_shift(*weight_max);
    size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        int per = cols / 8;
        size_t n = (size_t)rows * per;
        for (size_t i = first; i < n; i += stride) {
            size_t r = i / per, j = i - r * per;
            uint4 q = reinterpret_cast<const uint4 *>(w)[i];
            uint4 h = {bf16x2_to_half2(q.x, s), bf16x2_to_half2(q.y, s), bf16x2_to_half2(q.z, s),
                       bf16x2_to_half2(q.w, s)};
            uint4 *o = reinterpret_cast<uint4 *>(out + r * copies * cols) + j;
            o[0] = h;
            if (copies == 2)
                o[per] = h;
        }
        return;
    }
    const uint16_t *bits = reinterpret_cast<const uint16_t *>(w);
    size_t n = (size_t)rows * cols;
    for (size_t i = first; i < n; i += stride) {
        size_t r = i / cols, k = i - r * cols;
        __half h = __ushort_as_half(bf16_to_half_bits(bits[i], s));
        __half *o = out + r * copies * cols + k;
        o[0] = h;
        if (copies == 2)
            o[cols] = h;
    }
}

// y[t][:] *= 2^-(row_shift[t] + s): the parts' scales undone (float4 where vec: rows % 4 == 0
// and y 16-byte aligned).
__global__ void unscale_kernel(float *__restrict__ y, int T, int rows, int vec,
                               const int *__restrict__ row_shift, const unsigned *__restrict__ weight_max)
{
    pdl_prologue();
    int s = gemm_fp16x2_shift(*weight_max);
    size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        int per = rows / 4;
        size_t n = (size_t)T * per;
        float4 *y4 = reinterpret_cast<float4 *>(y);
        for (size_t i = first; i < n; i += stride) {
            int k = -(row_shift[i / per] + s);
            float4 v = y4[i];
            v.x = gemm_fp16x2_scale(v.x, k);
            v.y = gemm_fp16x2_scale(v.y, k);
            v.z = gemm_fp16x2_scale(v.z, k);
            v.w = gemm_fp16x2_scale(v.w, k);
            y4[i] = v;
        }
        return;
    }
    size_t n = (size_t)T * rows;
    for (size_t i = first; i < n; i += stride)
        y[i] = gemm_fp16x2_scale(y[i], -(row_shift[i / rows] + s));
}

// The bytes of w's fp16 copy (twice side by side for a narrow weight); the two-part form takes
// the BF16 weights whose copy fits ENG_GEMM_HALF_BYTES (engine.h).
size_t half_copy_bytes(const eng_mat *w)
{
    return eng_gemm_half_copy_bytes(w->rows, w->cols);
}

bool fp16x2_takes(const eng_mat *w)
{
    return w->dtype == ENG_BF16 && eng_gemm_half_takes(w->rows, w->cols);
}

// a launch's error as a code (and taken off cudaGetLastError, as the launches above leave none)
int launched(cudaError_t rc)
{
    if (rc == cudaSuccess)
        return 0;
    cudaGetLastError();
    return (int)rc;
}

// A BF16 product in two fp16 parts (the comment above split_half_kernel): a narrow weight
// (concat_parts) as one GEMM of [W' W'] against each row's [lo hi], any other as two GEMMs into y,
// lo first; in the one-part mode one GEMM of W' against hi; then the scale pass. The split
// buffer holds the parts (from 256-byte boundaries), then the weight's largest magnitude (256
// bytes) and the rows' shifts.
int gemm_fp16x2(const eng_mat *w, const float *x, int T, float *y, int mode, cudaStream_t st)
{
    size_t K = (size_t)w->cols, R = (size_t)w->rows, n = (size_t)T * K;
    size_t stride = (n + 127) & ~(size_t)127, scales_at = 2 * stride * sizeof(__half);
    bool one = mode == MODE_ONEPART, cat = !one && concat_parts(w);
    eng_mat shape = *w; // the plan's shape: [W' W'] is rows x 2 cols
    if (cat)
        shape.cols = 2 * w->cols;
    call k;
    // the weight and the parts are this stream's own buffers (256-byte aligned): only y may be off
    int rc = prepare(&shape, true, T, st, scales_at + 256 + (size_t)T * sizeof(int), WB_HALF,
                     half_copy_bytes(w), true, mode == MODE_NOSPLIT, (uintptr_t)y % kAlign != 0,
                     mode == MODE_SHOW, &k);
    if (rc)
        return rc;
    per_stream *e = k.e;
    plan *p = k.p;
    char *base = reinterpret_cast<char *>(e->split);
    __half *lo = reinterpret_cast<__half *>(base), *hi = lo + (cat ? K : stride);
    unsigned *weight_max = reinterpret_cast<unsigned *>(base + scales_at);
    int *row_shift = reinterpret_cast<int *>(base + scales_at + 256);
    const __nv_bfloat16 *wd = static_cast<const __nv_bfloat16 *>(w->data);
    bool vec = K % 8 == 0 && (uintptr_t)w->data % 16 == 0;
    size_t wn = R * K;
    rc = launched(launch(split_half_kernel, (unsigned)T, 256, 0, st, x, w->cols,
                         one ? nullptr : lo, hi, cat ? 2 * K : K, row_shift, weight_max));
    if (!rc)
        rc = launched(launch(weight_max_kernel, grid_for(vec ? wn / 8 : wn), 256, 0, st, wd, wn,
                             vec ? 1 : 0, weight_max));
    if (!rc)
        rc = launched(launch(weight_half_kernel, grid_for(vec ? wn / 8 : wn), 256, 0, st, wd, w->rows,
                             w->cols, cat ? 2 : 1, vec ? 1 : 0, (const unsigned *)weight_max, e->wh));
    const float unit = 1.0f, zero = 0.0f;
    if (!rc && cat)
        rc = lt_code(g_lt.matmul(g_lt_handle, p->desc, &unit, e->wh, p->a, lo, k.b, &zero, y, k.c, y,
                                 k.c, &p->algo, e->workspace, e->workspace_bytes, st),
                     "an fp16 product (two parts side by side)", p);
    if (!rc && !cat && !one)
        rc = lt_code(g_lt.matmul(g_lt_handle, p->desc, &unit, e->wh, p->a, lo, k.b, &zero, y, k.c, y,
                                 k.c, &p->algo, e->workspace, e->workspace_bytes, st),
                     "an fp16 product (lo)", p);
    if (!rc && !cat)
        rc = lt_code(g_lt.matmul(g_lt_handle, p->desc, &unit, e->wh, p->a, hi, k.b, one ? &zero : &unit,
                                 y, k.c, y, k.c, &p->algo, e->workspace, e->workspace_bytes, st),
                     one ? "an fp16 product (the hi part alone)" : "an fp16 product (hi)", p);
    bool yvec = R % 4 == 0 && (uintptr_t)y % 16 == 0;
    if (!rc)
        rc = launched(launch(unscale_kernel, grid_for((size_t)T * R / (yvec ? 4 : 1)), 256, 0, st, y, T,
                             w->rows, yvec ? 1 : 0, (const int *)row_shift, (const unsigned *)weight_max));
    release(&k);
    return rc;
}

} // namespace

extern "C" int eng_gemm_takes(const eng_mat *w, int T)
{
    return w && T > ENG_GEMM_MIN_ROWS && (w->dtype == ENG_BF16 || w->dtype == ENG_F32) &&
           w->rows >= 1 && w->cols >= 1;
}

// The comparison path: cublasGemmEx with CUBLAS_GEMM_DEFAULT (row bits depend on T).
static int gemm_default(const eng_mat *w, int T, float *y, per_stream *e, const float *x,
                        __nv_bfloat16 *const part[3])
{
    const float one = 1.0f, zero = 0.0f;
    if (w->dtype == ENG_F32)
        return cublas_code(g_api.gemm(e->handle, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, T, w->cols, &one,
                                        w->data, CUDA_R_32F, w->cols, x, CUDA_R_32F, w->cols, &zero, y,
                                        CUDA_R_32F, w->rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           "an f32 product");
    static const char *what[3] = {"a bf16 product (lo)", "a bf16 product (mid)", "a bf16 product (hi)"};
    int rc = 0;
    for (int p = 0; p < 3 && !rc; p++)
        rc = cublas_code(g_api.gemm(e->handle, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, T, w->cols, &one,
                                      w->data, CUDA_R_16BF, w->cols, part[p], CUDA_R_16BF, w->cols,
                                      p ? &one : &zero, y, CUDA_R_32F, w->rows, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT),
                         what[p]);
    return rc;
}

extern "C" int eng_gemm(const eng_mat *w, const float *x, int T, float *y, void *stream)
{
    if (!eng_gemm_takes(w, T) || !x || !y)
        return -1;
    int mode = gemm_mode();
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (mode != MODE_DEFAULT && mode != MODE_THREE && fp16x2_takes(w))
        return gemm_fp16x2(w, x, T, y, mode, st);
    size_t n = (size_t)T * w->cols;
    // the three parts of the split each start on a 256-byte boundary
    size_t stride = (n + 127) & ~(size_t)127;
    bool cat = mode != MODE_DEFAULT && concat_parts(w);
    eng_mat w3 = *w; // the shape the concatenated GEMM's plan is for (its data: e->w3)
    w3.cols = 3 * w->cols;
    // (e->w3 and e->split start on 256-byte boundaries)
    bool unaligned = ((cat ? 0 : (uintptr_t)w->data) | (uintptr_t)y |
                      (w->dtype == ENG_F32 ? (uintptr_t)x : 0)) % kAlign;
    call k;
    int rc = prepare(cat ? &w3 : w, false, T, st, w->dtype == ENG_BF16 ? 3 * stride * sizeof(__nv_bfloat16) : 0,
                     cat ? WB_TRIPLE : WB_NONE, 6 * (size_t)w->rows * (size_t)w->cols, mode != MODE_DEFAULT,
                     mode == MODE_NOSPLIT, unaligned, mode == MODE_SHOW, &k);
    if (rc)
        return rc;
    per_stream *e = k.e;
    plan *p = k.p;
    cublasLtMatrixLayout_t b = k.b, c = k.c;
    const float one = 1.0f, zero = 0.0f;
    if (cat) { // one GEMM: [W W W] against each row's [lo mid hi]
        // the copies are made again each product: a few microseconds for a narrow weight, and no
        // cache keyed by a weight's address to go stale when its memory is reused
        bool vec = w->cols % 8 == 0 && (uintptr_t)w->data % 16 == 0;
        launch(triple_kernel, grid_for((size_t)w->rows * w->cols / (vec ? 8 : 1)), 256, 0, st,
               static_cast<const __nv_bfloat16 *>(w->data), w->rows, w->cols, vec ? 1 : 0, e->w3);
        launch(split_rows_kernel, grid_for(n), 256, 0, st, x, T, w->cols, e->split);
        cudaError_t crc = cudaGetLastError();
        if (crc != cudaSuccess)
            rc = (int)crc;
        if (!rc)
            rc = lt_code(g_lt.matmul(g_lt_handle, p->desc, &one, e->w3, p->a, e->split, b, &zero, y,
                                     c, y, c, &p->algo, e->workspace, e->workspace_bytes, st),
                         "a bf16 product (three parts side by side)", p);
        release(&k);
        return rc;
    }
    __nv_bfloat16 *part[3] = {nullptr, nullptr, nullptr}; // lo, mid, hi
    if (w->dtype == ENG_BF16) {
        part[0] = e->split + 2 * stride;
        part[1] = e->split + stride;
        part[2] = e->split;
        launch(split_kernel, grid_for(n), 256, 0, st, x, n, part[2], part[1], part[0]);
        cudaError_t crc = cudaGetLastError();
        if (crc != cudaSuccess)
            rc = (int)crc;
    }
    if (!rc && !p)
        return gemm_default(w, T, y, e, x, part);
    if (!rc && w->dtype == ENG_F32)
        rc = lt_code(g_lt.matmul(g_lt_handle, p->desc, &one, w->data, p->a, x, b, &zero, y, c, y, c,
                                 &p->algo, e->workspace, e->workspace_bytes, st),
                     "an f32 product", p);
    // the smallest part first: y = W lo, y += W mid, y += W hi
    static const char *what[3] = {"a bf16 product (lo)", "a bf16 product (mid)", "a bf16 product (hi)"};
    for (int j = 0; j < 3 && !rc && w->dtype == ENG_BF16; j++)
        rc = lt_code(g_lt.matmul(g_lt_handle, p->desc, &one, w->data, p->a, part[j], b, j ? &one : &zero,
                                 y, c, y, c, &p->algo, e->workspace, e->workspace_bytes, st),
                     what[j], p);
    release(&k);
    return rc;
}

extern "C" int eng_gemm_set_mode(int mode)
{
    if (mode != MODE_FIXED && mode != MODE_SHOW && mode != MODE_DEFAULT && mode != MODE_NOSPLIT &&
        mode != MODE_THREE && mode != MODE_ONEPART)
        return -1;
    g_mode = mode;
    return 0;
}

extern "C" int eng_gemm_one_part(void)
{
    return g_mode == MODE_ONEPART;
}

extern "C" void eng_gemm_forget_stream(void *stream)
{
    std::lock_guard<std::mutex> guard(g_lock);
    for (int i = 0; i < kMaxStreams; i++) {
        per_stream *e = &g_streams[i];
        if (!e->used || e->stream != static_cast<cudaStream_t>(stream))
            continue;
        cudaStreamSynchronize(e->stream);
        g_api.destroy(e->handle);
        cudaFree(e->workspace);
        cudaFree(e->split);
        cudaFree(e->w3);
        cudaFree(e->wh);
        *e = per_stream{};
    }
}
